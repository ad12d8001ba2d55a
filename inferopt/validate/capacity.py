"""Capacity under the SLO: the highest arrival rate (requests/s) at which every SLO still holds, with its bracket.

A bracketing search over the rate of the workload's own arrival process (mix, lengths, tenants and prefixes
unchanged; every probe replays the workload's seed, its gaps the same draw stretched to the rate): double from a
start rate until a probe fails, then bisect between the highest pass and the lowest failure to a relative
tolerance or the probe budget. A failing start rate is halved until one passes (or, served alone, even net of
queue wait its median TTFT misses the bound). A probe fails on `judge.check_slo` or on saturation (throughput
not keeping up with the offered rate while queue wait grows; a backlog below `STABLE_SHARE` of a throughput an
earlier probe sustained is a burst of the replayed draw), which also stops the doubling: a queue that grows
through a probe breaks any latency bound given a longer run.
Each probe's records go to `probe-NN/requests.jsonl` and its summary row to `probes.jsonl` as it finishes.
The result says how the search ended (`status`) and why; running out of budget or an unmet SLO is a result,
not an exception. Deliberately not here: logging (tasks/), the plot (`report.plots.capacity_curve`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd

from inferopt.config import AnySystem, ScenarioConfig, SLOConfig, WorkloadConfig
from inferopt.engines import EngineFactory, make_engine
from inferopt.measure.runner import RunTags
from inferopt.measure.session import MeasuredRun, run_system
from inferopt.measure.slices import headline
from inferopt.measure.slo import RequestSLO
from inferopt.validate.judge import check_slo
from inferopt.validate.scenarios import scenario_workload
from inferopt.workload.build import build_workload, workload_hash
from inferopt.workload.mixed import MixedLoad, merge_timeline
from inferopt.workload.output_lengths import mark

ProbePhase = Literal["start", "double", "halve", "bisect", "repeat", "fixed"]  # fixed: a rate set outside the search
CapacityStatus = Literal["bracketed", "budget_spent", "unbracketed", "unmet", "failed"]


@dataclass(frozen=True)
class CapacityBudget:
    """How far the search may go. `start_req_per_s` None: the workload's own rate; `requests_per_probe` None:
    the workload's `num_requests`; `max_req_per_s` caps the doubling; `boundary_repeats` re-runs the highest
    passing rate with fresh seeds after the search; `min_served_ratio`: completions per arrival while the load
    arrives below which (with a growing queue) a probe is saturated; `min_probe_s`: each probe's arrivals span at
    least this long (more requests at higher rates, at most `max_requests_per_probe`), so that a fast rate is a
    sustained load and not a burst of a few dozen requests that any queue absorbs."""

    start_req_per_s: float | None = None
    max_probes: int = 12
    rel_tol: float = 0.05
    requests_per_probe: int | None = None
    max_req_per_s: float | None = None
    max_halvings: int = 4
    boundary_repeats: int = 0
    min_served_ratio: float = 0.95
    min_probe_s: float | None = None
    max_requests_per_probe: int = 2000

    def __post_init__(self) -> None:
        problems = budget_problems(self)
        if problems:
            raise ValueError("capacity budget: " + "; ".join(problems))


def budget_problems(b: CapacityBudget) -> list[str]:
    """Each bad field of a budget as a sentence with its fix (empty: the budget is usable)."""
    out = []
    if b.max_probes < 1:
        out.append(f"max_probes={b.max_probes}: the search needs at least one probe; fix: max_probes >= 3")
    if b.start_req_per_s is not None and not b.start_req_per_s > 0:
        out.append(f"start_req_per_s={b.start_req_per_s}: a rate must be > 0; fix: e.g. the workload's rate")
    if b.max_req_per_s is not None and not b.max_req_per_s > 0:
        out.append(f"max_req_per_s={b.max_req_per_s}: a rate must be > 0")
    if b.start_req_per_s and b.max_req_per_s and b.max_req_per_s < b.start_req_per_s:
        out.append(
            f"empty rate range: max_req_per_s={b.max_req_per_s:g} is below start_req_per_s={b.start_req_per_s:g}; "
            "fix: a ceiling above the start rate (or none)"
        )
    if not 0 < b.rel_tol < 1:
        out.append(f"rel_tol={b.rel_tol}: must be in (0, 1), e.g. 0.05 (bracket within 5 %)")
    if b.requests_per_probe is not None and b.requests_per_probe < 2:
        out.append(f"requests_per_probe={b.requests_per_probe}: a rate needs at least 2 requests; fix: 40-80")
    if b.min_probe_s is not None and not b.min_probe_s > 0:
        out.append(f"min_probe_s={b.min_probe_s}: a duration must be > 0 (or None: a fixed count per probe)")
    if b.max_requests_per_probe < 2:
        out.append(f"max_requests_per_probe={b.max_requests_per_probe}: must be >= 2")
    if b.max_halvings < 0 or b.boundary_repeats < 0:
        out.append("max_halvings and boundary_repeats must be >= 0")
    if not 0 < b.min_served_ratio <= 1:
        out.append(f"min_served_ratio={b.min_served_ratio}: must be in (0, 1], e.g. 0.95")
    return out


_NAN = float("nan")


@dataclass(frozen=True)
class Probe:
    """One replay at one offered rate: the rate/latency curve's point and its pass/fail with reasons (a run
    that failed keeps NaN metrics and its error as the reason)."""

    index: int
    phase: ProbePhase
    offered_req_per_s: float
    passed: bool
    reasons: tuple[str, ...]
    records_path: str
    requests: int = 0
    duration_s: float = _NAN
    achieved_req_per_s: float = _NAN  # successful requests per second of the run
    goodput_req_per_s: float = _NAN  # requests meeting every per-request SLO bound per second (failures: misses)
    goodput_tok_per_s: float = _NAN  # their output tokens per second
    slo_attainment: float = _NAN  # share of all requests meeting every per-request SLO bound
    served_ratio: float = _NAN  # completions per arrival while the load arrived (1 = keeping up)
    failure_rate: float = _NAN  # timeout + rejected + error
    ttft_ms_p50: float = _NAN
    ttft_ms_p99: float = _NAN
    tpot_ms_p50: float = _NAN
    tpot_ms_p95: float = _NAN
    tpot_ms_p99: float = _NAN
    e2e_ms_p50: float = _NAN
    e2e_ms_p99: float = _NAN
    queue_ms_p50: float = _NAN
    queue_ms_p99: float = _NAN
    queue_growth_ms: float = _NAN  # median queue wait, last quarter of arrivals minus first quarter
    saturated: bool = False
    service_misses_slo: bool = False  # even net of queue wait the median TTFT (or E2E) misses its p99 bound
    failed_at: str | None = None  # the run's own failure stage ("start" | "run"), None when it ran

    def row(self) -> dict[str, Any]:
        return {**asdict(self), "reasons": "; ".join(self.reasons)}


@dataclass(frozen=True)
class CapacityResult:
    """`req_per_s`: the highest rate that passed below the lowest that failed (NaN when none passed); the
    bracket [`lo_req_per_s`, `hi_req_per_s`] is its uncertainty (None where that side was not found)."""

    status: CapacityStatus
    req_per_s: float
    lo_req_per_s: float | None
    hi_req_per_s: float | None
    message: str
    probes: tuple[Probe, ...]
    repeats: tuple[Probe, ...] = ()
    saturated_req_per_s: float | None = None  # the lowest offered rate found saturated
    slo_bounds_ms: dict[str, float] = field(default_factory=dict)  # the latency bounds, for the plot

    def table(self) -> pd.DataFrame:
        """One row per probe (the search's, then the boundary repeats), sorted by offered rate."""
        rows = [p.row() for p in (*self.probes, *self.repeats)]
        return (
            pd.DataFrame(rows).sort_values(["offered_req_per_s", "index"], ignore_index=True)
            if rows
            else pd.DataFrame()
        )

    def at_capacity(self) -> Probe | None:
        """The probe at the highest passing rate (the capacity's own operating point), None when none passed."""
        at = [p for p in self.probes if p.passed and p.offered_req_per_s == self.lo_req_per_s]
        return at[-1] if at else None

    @property
    def sure_lo_req_per_s(self) -> float | None:
        """The highest rate that passed every time it ran: `lo_req_per_s` unless a boundary repeat failed, then
        the highest passing probe below every failure, repeats included (None if there is none). A comparison
        that calls one result beyond another leans on this side, not on one lucky pass."""
        if all(r.passed for r in self.repeats):
            return self.lo_req_per_s
        return bracket((*self.probes, *self.repeats))[0]

    def text(self) -> str:
        """The capacity, its bracket and status in words, e.g. `3 req/s [3, 4.5] (budget_spent)`."""
        lo = f"{self.lo_req_per_s:.4g}" if self.lo_req_per_s is not None else "none passed"
        hi = f"{self.hi_req_per_s:.4g}" if self.hi_req_per_s is not None else "none failed"
        return f"{self.req_per_s:.4g} req/s [{lo}, {hi}] ({self.status})"

    def metrics(self) -> dict[str, float]:
        nan = float("nan")
        return {
            "capacity.req_per_s": self.req_per_s,
            "capacity.lo": self.lo_req_per_s if self.lo_req_per_s is not None else nan,
            "capacity.hi": self.hi_req_per_s if self.hi_req_per_s is not None else nan,
            "capacity.probes": float(len(self.probes)),
            "capacity.repeat_pass_rate": _pass_rate(self.repeats),
        }


def _pass_rate(probes: Sequence[Probe]) -> float:
    return float(np.mean([p.passed for p in probes])) if probes else float("nan")


# ---------------------------------------------------------------------------------------------- the search policy


def bracket(probes: Sequence[Probe]) -> tuple[float | None, float | None]:
    """(highest passing rate below the lowest failing one, lowest failing rate); None where there is none.
    A pass above a failure (noise at the boundary) is ignored: the bracket stays on the safe side."""
    fails = [p.offered_req_per_s for p in probes if not p.passed]
    hi = min(fails) if fails else None
    passes = [p.offered_req_per_s for p in probes if p.passed and (hi is None or p.offered_req_per_s < hi)]
    return (max(passes) if passes else None), hi


def next_probe(
    probes: Sequence[Probe], start_req_per_s: float, budget: CapacityBudget
) -> tuple[float, ProbePhase] | None:
    """The next rate to probe and why, or None when the search is done (see the module docstring)."""
    if len(probes) >= budget.max_probes:
        return None
    if not probes:
        return start_req_per_s, "start"
    lo, hi = bracket(probes)
    if hi is None:  # every probe passed: double, up to the ceiling
        ceiling = budget.max_req_per_s or math.inf
        return (min(2.0 * lo, ceiling), "double") if lo < ceiling else None
    if lo is None:  # every probe failed: halve, unless even net of queue wait the lowest one misses
        lowest = min((p for p in probes if not p.passed), key=lambda p: p.offered_req_per_s)
        halvings = sum(p.phase == "halve" for p in probes)
        return None if halvings >= budget.max_halvings or lowest.service_misses_slo else (hi / 2.0, "halve")
    return None if hi / lo - 1.0 <= budget.rel_tol else ((lo + hi) / 2.0, "bisect")


# ---------------------------------------------------------------------------------------------- one probe


Load = WorkloadConfig | MixedLoad  # one workload, or several tenants' on one timeline scaled together


def workload_rate_per_s(workload: Load) -> float:
    """The workload's own arrival rate: its arrival process's, or a trace's mean rate over its span; a mixed
    load's, the sum of its parts'."""
    if isinstance(workload, MixedLoad):
        return sum(workload_rate_per_s(p) for p in workload.parts)
    if workload.arrival is not None:
        return float(workload.arrival.rate_per_s)
    offsets = build_workload(workload)["arrival_offset_s"].to_numpy(float)
    span_s = float(offsets.max() - offsets.min()) if len(offsets) else 0.0
    if len(offsets) < 2 or span_s <= 0:
        raise ValueError(
            f"workload {workload.name!r}: its trace has no time span (fewer than 2 rows or one timestamp), so it "
            "has no arrival rate to scale; fix: a trace with at least two distinct timestamps"
        )
    return (len(offsets) - 1) / span_s


def probe_requests(budget: CapacityBudget, rate_per_s: float, workload_requests: int) -> int:
    """How many requests a probe at `rate_per_s` replays: `requests_per_probe` (else the workload's count), and
    with `min_probe_s` at least that many seconds of arrivals, capped at `max_requests_per_probe`."""
    n = budget.requests_per_probe or workload_requests
    if budget.min_probe_s is None:
        return n
    longer = math.ceil(rate_per_s * budget.min_probe_s) + 1  # n arrivals span (n - 1) / rate
    return max(n, min(longer, budget.max_requests_per_probe))


def probe_workload(
    base: WorkloadConfig, rate_per_s: float, base_rate_per_s: float, num_requests: int | None, seed: int
) -> WorkloadConfig:
    """The workload at `rate_per_s`, scaled as a validation scenario's `rate_scale` is; the seed kept."""
    sc = ScenarioConfig(
        name="capacity", kind="steady", rate_scale=rate_per_s / base_rate_per_s, num_requests=num_requests
    )
    return scenario_workload(base, sc).model_copy(update={"name": f"{base.name}-capacity", "seed": seed})


def probe_table(wl: WorkloadConfig, rate_per_s: float) -> pd.DataFrame:
    """The probe's requests, its arrival times stretched so that their realised rate ((n - 1) / span) is the
    offered rate: a 40-request Poisson draw's own rate is off by ~15 %, which would shift the whole curve.
    Output lengths are forced unless the workload declares them (capacity is measured at the target lengths)."""
    table = build_workload(wl)
    if wl.output_lengths is None:
        mark(table, "forced")  # capacity work replays the target lengths unless the workload says otherwise
    offsets = table["arrival_offset_s"].to_numpy(float)
    first_s = float(offsets.min()) if len(offsets) else 0.0
    span_s = float(offsets.max()) - first_s if len(offsets) >= 2 else 0.0
    if span_s > 0:
        table["arrival_offset_s"] = first_s + (offsets - first_s) * ((len(offsets) - 1) / rate_per_s / span_s)
        table.attrs["content_hash"] = workload_hash(table)
    return table


def load_table(load: Load, rate_per_s: float, num_requests: int, seed: int) -> pd.DataFrame:
    """The probe's request table at `rate_per_s` with `seed`: one workload's (`probe_table`), or every part of
    a mixed load at its own rate times the same factor, each with its share of the requests, on one timeline."""
    base_rate = workload_rate_per_s(load)
    if not isinstance(load, MixedLoad):
        return probe_table(probe_workload(load, rate_per_s, base_rate, num_requests, seed), rate_per_s)
    mixed, tables = load.reseeded(seed), []
    for part in mixed.parts:
        share = workload_rate_per_s(part) / base_rate
        n = max(2, round(num_requests * share))
        tables.append(load_table(part, rate_per_s * share, n, part.seed))
    return merge_timeline(tables)


def reseeded(load: Load, seed: int) -> Load:
    """The same load drawn with another seed (a mixed load moves every part's seed by the same offset)."""
    return load.reseeded(seed) if isinstance(load, MixedLoad) else load.model_copy(update={"seed": seed})


def judged_phases(phases: pd.DataFrame, judged: tuple[str, ...] | None) -> pd.DataFrame:
    """The requests the SLO judges: every one, or the `judged` tenants' (a mixed load's)."""
    return phases if judged is None else phases[phases["tenant"].isin(judged)]


def served_ratio(run: MeasuredRun, service_s: float = 0.0) -> float:
    """Completions (any outcome) per arrival while the load arrived: of the requests sent by the last intended
    send time, how many had finished one unqueued service time (`service_s`) after it, over n - 1 (the last one
    has only just arrived). Without the service time a batching engine that keeps up still has a batch in flight
    at the last send (Little: rate x service time requests) and would read as lagging."""
    recs = run.records
    if len(recs) < 2:
        return 1.0
    t_done_s = max(r.intended_s for r in recs) + service_s
    done = sum(1 for r in recs if r.client_done_s is not None and r.client_done_s <= t_done_s)
    return min(1.0, done / (len(recs) - 1))


def unqueued_service_s(run: MeasuredRun) -> float:
    """How long a request takes net of queue wait, from the first quarter of the successful requests by send
    time (the least queued): their 90th percentile of send-to-done minus queue wait (0 with under 4 requests)."""
    ok = sorted(
        (r for r in run.records if r.outcome == "ok" and r.client_done_s is not None), key=lambda r: r.intended_s
    )
    first = ok[: len(ok) // 4]
    waits = [r.admitted_s - r.arrival_s if r.admitted_s is not None and r.arrival_s is not None else 0.0 for r in first]
    times = [r.client_done_s - r.intended_s - w for r, w in zip(first, waits, strict=True)]
    return max(0.0, float(np.quantile(times, 0.9))) if times else 0.0


def _wait_ms(r: Any) -> float | None:
    """The engine's queue wait, else (no server timings) the TTFT."""
    if r.admitted_s is not None and r.arrival_s is not None:
        return 1000.0 * (r.admitted_s - r.arrival_s)
    return 1000.0 * (r.client_token_s[0] - r.intended_s) if r.client_token_s else None


def _quarters_ms(rows: list[tuple[float, float]]) -> tuple[float, float]:
    """Median of the first and of the last quarter of (send time, wait) rows, by send time (NaN under 8 rows)."""
    if len(rows) < 8:
        return math.nan, math.nan
    q, waits = len(rows) // 4, [w for _, w in sorted(rows)]
    return float(np.median(waits[:q])), float(np.median(waits[-q:]))


def _grew(quarters_ms: tuple[float, float], allowance_ms: float = 0.0) -> bool:
    """Whether the last quarter's wait exceeds the first's by more than the first itself (and 1 ms, and the
    allowance): a backlog, not noise."""
    first_ms, last_ms = quarters_ms
    return last_ms - first_ms > max(1.0, first_ms, allowance_ms)


def queue_quarters_ms(run: MeasuredRun) -> tuple[tuple[float, float], bool]:
    """How the backlog grew over the probe: the median wait of the first and of the last quarter of the
    successful requests, by send time, and whether it is time to first token. The engine's queue wait, unless it
    stayed flat: an engine that admits every request at once (vLLM under `max_num_seqs`) keeps its backlog among
    the running ones, sharing every step, so the tenant whose time to first token grew most is the signal."""
    ok = [r for r in run.records if r.outcome == "ok"]
    queue = _quarters_ms([(r.intended_s, w) for r in ok if (w := _wait_ms(r)) is not None])
    if not math.isfinite(queue[0]) or _grew(queue):
        return queue, False
    ttft = []
    for tenant in sorted({r.tenant for r in ok}):
        mine = [r for r in ok if r.tenant == tenant and r.client_token_s]
        ttft.append(_quarters_ms([(r.intended_s, 1000.0 * (r.client_token_s[0] - r.intended_s)) for r in mine]))
    grown = [q for q in ttft if _grew(q)]
    return (max(grown, key=lambda q: q[1] - q[0]), True) if grown else (queue, False)


def saturation_reasons(
    m: dict[str, float],
    served: float,
    quarters_ms: tuple[float, float],
    min_served: float,
    prev: Probe | None,
    service_ms: float = 0.0,
) -> list[str]:
    """Why a probe is saturated (empty: it is not): it does not keep up with what arrives while its queue wait
    grows (by more than its first quarter's and than one service time, `service_ms`: a batching engine's wait for
    the batch in flight is not a growing queue), or (against the next lower rate probed) its throughput stayed
    flat while its queue wait grew."""
    out = []
    first_ms, last_ms = quarters_ms
    if served < min_served and _grew(quarters_ms, service_ms):
        out.append(
            f"saturated: {served:.2f} completions per arrival while the load arrived (< {min_served:g}), median wait "
            f"(queue, or a tenant's time to first token) {first_ms:.0f} ms in the first quarter of arrivals -> "
            f"{last_ms:.0f} ms in the last"
        )
    achieved, offered, q99 = m["ok_req_per_s"], m["offered"], m["queue_ms_p99"]
    if prev is not None and prev.achieved_req_per_s > 0 and offered >= 1.5 * prev.offered_req_per_s:
        if achieved < 1.1 * prev.achieved_req_per_s and q99 > 2.0 * prev.queue_ms_p99 + 1.0:
            out.append(
                f"saturated: throughput flat, {achieved:.3g} req/s at {offered:.3g} offered vs "
                f"{prev.achieved_req_per_s:.3g} at {prev.offered_req_per_s:.3g} "
                f"(x{achieved / prev.achieved_req_per_s:.2f} for x{offered / prev.offered_req_per_s:.2f} the rate) "
                "while queue wait p99 grew "
                f"{prev.queue_ms_p99:.0f} -> {q99:.0f} ms"
            )
    return out


STABLE_SHARE = 0.9  # offered below this share of a throughput the engine sustained: a backlog is a burst


def sustained_req_per_s(probes: Sequence[Probe]) -> float:
    """The highest throughput (ok completions per second) any of these probes achieved (0: none ran): the
    engine's service rate is at least that, whatever load it is offered (a batching engine serves a queue at
    least as fast as it served the overload that built it)."""
    return max((p.achieved_req_per_s for p in probes if p.failed_at is None), default=0.0)


def burst_not_saturation(sat: list[str], offered_req_per_s: float, sustained: float) -> list[str]:
    """`sat` unless the offered rate is below `STABLE_SHARE` of a sustained throughput, where lagging completions
    and a growing wait are a burst of this draw of arrivals (every probe replays the same draw, so a burst at its
    end recurs at every rate: the hf engine "saturated" at 58 % of a throughput it had completed); then a note,
    and the SLO alone judges the probe."""
    if not sat or offered_req_per_s > STABLE_SHARE * sustained:
        return sat
    return [
        f"not saturated: {offered_req_per_s:.4g} req/s offered is below {STABLE_SHARE:.0%} of the "
        f"{sustained:.4g} req/s an earlier probe completed, so the backlog ({sat[0].removeprefix('saturated: ')}) "
        "is a burst of the arrivals, judged by the SLO"
    ]


def unqueued_miss(phases: pd.DataFrame, slo: SLOConfig) -> list[str]:
    """The latency bounds that even the successful requests' median net of queue wait misses: no lower rate
    can meet those. Known only where the requests were served alone (median requests in flight at arrival,
    itself included, 1): a batching engine's service time shrinks with its load (fewer sequences sharing each
    step, no KV preemption), so a contended probe proves nothing (nor does an engine without queue timings)."""
    ok = phases[phases["outcome"] == "ok"]
    if "concurrency" in ok and len(ok) and float(pd.to_numeric(ok["concurrency"], errors="coerce").median()) > 1:
        return []
    queue_ms = pd.to_numeric(ok["queue_ms"], errors="coerce")
    out = []
    for col, bound, label in (("ttft_ms", slo.ttft_p99_ms, "TTFT"), ("e2e_ms", slo.e2e_p99_ms, "E2E")):
        net_ms = float((pd.to_numeric(ok[col], errors="coerce") - queue_ms).median()) if len(ok) else math.nan
        if bound is not None and net_ms > bound:
            out.append(f"even net of queue wait the median {label} is {net_ms:.1f} ms > its p99 bound {bound:g} ms")
    return out


def summarize_probe(
    run: MeasuredRun,
    where: tuple[int, ProbePhase, float, str],
    slo: SLOConfig,
    budget: CapacityBudget,
    prev: Probe | None,
    req_slo: RequestSLO,
    judged: tuple[str, ...] | None = None,
    sustained_req_per_s: float = 0.0,
) -> Probe:
    """The probe's row: the rate/latency point, goodput (`measure.slo`, failures in the denominator),
    saturation and the SLO verdict with reasons. `where`: (index, phase, offered rate, records path).
    `judged`: the tenants whose requests the SLO, latencies and goodput are of (None: all); saturation and
    the achieved rate count every request. `sustained_req_per_s`: the highest throughput an earlier probe of
    the search completed (`sustained_req_per_s()`; 0: none known)."""
    index, phase, rate_per_s, path = where
    if run.failed:
        first = (run.error or "unknown error").splitlines()[0]
        return Probe(index, phase, rate_per_s, False, (f"run failed: {first}",), path, failed_at=run.failed_at or "run")
    phases = judged_phases(run.phases, judged)
    m = {**headline(phases, run.duration_s, req_slo), "offered": rate_per_s}
    m["ok_req_per_s"] = headline(run.phases, run.duration_s)["ok_req_per_s"]
    slo_ok, reasons = check_slo(m, slo)
    service_s = unqueued_service_s(run)
    served = served_ratio(run, service_s)
    quarters, admits_all = queue_quarters_ms(run)  # admitted at once: no batch in flight to wait for
    sat = saturation_reasons(m, served, quarters, budget.min_served_ratio, prev, 0.0 if admits_all else 1e3 * service_s)
    sat = burst_not_saturation(sat, rate_per_s, sustained_req_per_s)
    saturated = any(r.startswith("saturated") for r in sat)
    unqueued = unqueued_miss(phases, slo)
    goodput, attained = m.get("goodput_req_per_s", 0.0), m.get("slo_attainment", math.nan)
    reasons += [*sat, *unqueued, f"goodput {goodput:.3g} req/s ({attained:.1%} of requests within every SLO bound)"]
    latencies = {k: m[k] for k in _LATENCY_FIELDS}
    return Probe(
        index,
        phase,
        rate_per_s,
        slo_ok and not saturated,
        tuple(reasons),
        path,
        requests=len(run.phases),
        duration_s=run.duration_s,
        achieved_req_per_s=m["ok_req_per_s"],
        goodput_req_per_s=goodput,
        goodput_tok_per_s=m.get("goodput_tok_per_s", 0.0),
        slo_attainment=attained,
        served_ratio=served,
        failure_rate=1.0 - m["ok_rate"],
        queue_growth_ms=quarters[1] - quarters[0],
        saturated=saturated,
        service_misses_slo=bool(unqueued),
        **latencies,
    )


_LATENCY_FIELDS = (
    "ttft_ms_p50",
    "ttft_ms_p99",
    "tpot_ms_p50",
    "tpot_ms_p95",
    "tpot_ms_p99",
    "e2e_ms_p50",
    "e2e_ms_p99",
    "queue_ms_p50",
    "queue_ms_p99",
)


# ---------------------------------------------------------------------------------------------- the search


@dataclass(frozen=True)
class _Search:
    """What every probe of one search shares."""

    system: AnySystem
    workload: Load
    slo: SLOConfig
    out_dir: Path
    budget: CapacityBudget
    base_rate_per_s: float
    tags: RunTags
    warmup_requests: int
    run_kwargs: dict[str, Any]


def _run_probe(s: _Search, where: tuple[int, ProbePhase, float, int], earlier: Sequence[Probe]) -> Probe:
    """Replay the workload at `rate` with `seed` (`where`: index, phase, rate, seed), keep its records in
    `probe-NN/`, append its row to `probes.jsonl`; `earlier`: the search's probes so far."""
    index, phase, rate, seed = where
    prev, sustained = _closest_below(earlier, rate), sustained_req_per_s(earlier)
    n = probe_requests(s.budget, rate, s.workload.num_requests)
    judged = s.workload.judged if isinstance(s.workload, MixedLoad) else None
    path = s.out_dir / f"probe-{index:02d}" / "requests.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    tags = RunTags(run_tag=s.tags.run_tag, arm=s.tags.arm, trial=index, scenario=f"capacity-{index:02d}")
    run = run_system(
        s.system,
        load_table(s.workload, rate, n, seed),
        tags,
        timeout_s=s.workload.timeout_s,
        records_path=path,
        warmup_requests=s.warmup_requests,
        prompt_seed=seed,
        **s.run_kwargs,
    )
    req_slo = RequestSLO.of(s.workload, s.slo)  # type: ignore[arg-type]  # reads timeout_s only
    probe = summarize_probe(run, (index, phase, rate, str(path)), s.slo, s.budget, prev, req_slo, judged, sustained)
    with (s.out_dir / "probes.jsonl").open("a") as fh:
        fh.write(json.dumps(probe.row(), default=str) + "\n")
    return probe


def _closest_below(probes: Sequence[Probe], rate: float) -> Probe | None:
    """The probe that ran at the highest rate below `rate` (the reference for 'throughput flat')."""
    below = [p for p in probes if p.offered_req_per_s < rate and p.failed_at is None]
    return max(below, key=lambda p: p.offered_req_per_s) if below else None


def capacity(
    system: AnySystem,
    workload: Load,
    slo: SLOConfig,
    out_dir: str | Path,
    *,
    budget: CapacityBudget = CapacityBudget(),  # noqa: B008 - frozen
    arm: str = "capacity",
    run_tag: str = "",
    warmup_requests: int = 0,
    wrap_engine: Callable[[Any], Any] | None = None,
    engine_factory: EngineFactory = make_engine,
) -> CapacityResult:
    """The highest arrival rate at which `system` meets `slo` on `workload`'s mix, with its bracket (see the
    module docstring); a `MixedLoad` is scaled as a whole, its rate the sum of its parts'. A bad budget or an
    empty rate range raises ValueError before anything runs; running out of budget, an SLO no rate meets and
    an engine that does not start are results that say so.
    `engine_factory` and `wrap_engine` reach every probe's `run_system` (tests inject engines through them)."""
    base_rate = workload_rate_per_s(workload)
    start = budget.start_req_per_s or base_rate
    if budget.max_req_per_s is not None and budget.max_req_per_s < start:
        raise ValueError(
            f"capacity: empty rate range: max_req_per_s={budget.max_req_per_s:g} is below the start rate "
            f"{start:g} req/s (the workload's own rate unless start_req_per_s is set); fix: raise the ceiling"
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    s = _Search(
        system,
        workload,
        slo,
        out,
        budget,
        base_rate,
        RunTags(run_tag=run_tag, arm=arm),
        warmup_requests,
        {"wrap_engine": wrap_engine, "engine_factory": engine_factory},
    )
    probes: list[Probe] = []
    while (nxt := next_probe(probes, start, budget)) is not None:
        rate, phase = nxt
        probes.append(_run_probe(s, (len(probes), phase, rate, workload.seed), probes))
        if probes[-1].failed_at == "start":
            break
    lo, _ = bracket(probes)
    repeats = []
    if lo is not None and not any(p.failed_at == "start" for p in probes):
        for k in range(budget.boundary_repeats):
            idx = len(probes) + k
            repeats.append(_run_probe(s, (idx, "repeat", lo, workload.seed + 1 + k), probes))
    return conclude(probes, repeats, budget, slo)


def _failures(p: Probe) -> str:
    return "; ".join(r for r in p.reasons if "FAIL" in r or r.startswith(("saturated", "run failed"))) or "failed"


def conclude(
    probes: Sequence[Probe], repeats: Sequence[Probe], budget: CapacityBudget, slo: SLOConfig
) -> CapacityResult:
    """The result of a finished search: its status and a message saying how it ended and what to do."""
    lo, hi = bracket(probes)
    n = len(probes)
    sat = min((p.offered_req_per_s for p in probes if p.saturated), default=None)
    started = [p for p in probes if p.failed_at == "start"]
    if started:
        status, msg = "failed", f"the engine did not start (probe {started[0].index}): {_failures(started[0])}"
    elif lo is not None and hi is not None:
        width = hi / lo - 1.0
        status = "bracketed" if width <= budget.rel_tol else "budget_spent"
        msg = f"capacity {lo:.4g} req/s: passes at {lo:.4g}, fails at {hi:.4g} (+{width:.1%}) after {n} probes"
        if status == "budget_spent":
            msg += (
                f"; the budget of {budget.max_probes} probes ran out before the bracket narrowed to "
                f"{budget.rel_tol:.0%}: the capacity lies in it; fix: raise max_probes"
            )
    elif lo is not None:
        status = "unbracketed"
        why = (
            f"the ceiling max_req_per_s={budget.max_req_per_s:g} was reached"
            if budget.max_req_per_s is not None and lo >= budget.max_req_per_s
            else f"the budget of {budget.max_probes} probes ran out before any probe failed; fix: raise max_probes "
            "or start_req_per_s"
        )
        msg = f"every probe passed, up to {lo:.4g} req/s: the capacity is at least that, not bracketed ({why})"
    else:
        status, msg = "unmet", _unmet_message(probes, budget)
    return CapacityResult(
        status=status,
        req_per_s=lo if lo is not None else float("nan"),
        lo_req_per_s=lo,
        hi_req_per_s=hi,
        message=msg + _repeat_note(repeats),
        probes=tuple(probes),
        repeats=tuple(repeats),
        saturated_req_per_s=sat,
        slo_bounds_ms=slo_bounds_ms(slo),
    )


def _unmet_message(probes: Sequence[Probe], budget: CapacityBudget) -> str:
    if not probes:
        return "no probe ran"
    low = min(probes, key=lambda p: p.offered_req_per_s)
    msg = (
        f"no rate meets the SLO: it failed at every rate probed, down to {low.offered_req_per_s:.4g} req/s "
        f"({_failures(low)})"
    )
    if low.service_misses_slo:
        return msg + (
            "; the service time itself misses it, so no lower rate can help; "
            "fix: a looser SLO or a faster configuration"
        )
    if len(probes) >= budget.max_probes:
        return msg + f"; the budget of {budget.max_probes} probes ran out; fix: raise max_probes or start lower"
    return (
        msg
        + f"; lower rates were not tried after {budget.max_halvings} halvings; fix: start lower or raise max_halvings"
    )


def _repeat_note(repeats: Sequence[Probe]) -> str:
    if not repeats:
        return ""
    k = sum(p.passed for p in repeats)
    note = f"; the highest passing rate passed {k} of {len(repeats)} repeats with fresh seeds"
    return note + ("" if k == len(repeats) else ": the boundary is within noise, size with a margin")


def slo_bounds_ms(slo: SLOConfig) -> dict[str, float]:
    """The latency bounds keyed by the probe table's column they bound."""
    out = {"ttft_ms_p50": slo.ttft_p50_ms} if slo.ttft_p50_ms is not None else {}
    out.update({"ttft_ms_p99": slo.ttft_p99_ms, "tpot_ms_p95": slo.tpot_p95_ms})
    if slo.e2e_p99_ms is not None:
        out["e2e_ms_p99"] = slo.e2e_p99_ms
    return out
