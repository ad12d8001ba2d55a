"""Calibration: fit the simulator on some capacity probes, predict the held-back ones, and say how wrong it was.

The probes are those of the capacity search (`inferopt.validate.capacity`): each one's table is rebuilt from the
workload, its rate and its seed (`probe_workload` + `probe_table`, deterministic) and simulated; the simulated
records go through the very summary a real probe gets (`summarize_probe`: headline metrics, SLO check,
saturation), and `simulated_capacity` runs the search's own policy (`next_probe`, `conclude`) on simulated
probes. Errors are relative, |predicted - measured| / measured, per held-back probe and metric: the table keeps
every row, `median_rel_err` and `p99_rel_err` are their median and 99th percentile over the held-back probes
per metric. A simulator whose held-back median error on any latency metric, or whose capacity error, exceeds
`bound` is marked unusable (`usable=False`, with the reason) and must not prune a search.
Deliberately not here: running engines (the caller measured), MLflow (tasks/), plots (`report.plots`).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from inferopt.config import AnySystem, SLOConfig, WorkloadConfig
from inferopt.measure.phases import phase_table
from inferopt.measure.runner import RunTags
from inferopt.measure.session import MeasuredRun
from inferopt.measure.slo import RequestSLO
from inferopt.records import RequestRecord, read_records
from inferopt.simulate.costs import KV_BYTES, CostModel
from inferopt.simulate.observe import static_observations
from inferopt.simulate.scheduler import SIM_TAG, ContinuousPolicy, StaticPolicy, simulate
from inferopt.validate.capacity import (
    CapacityBudget,
    CapacityResult,
    Probe,
    conclude,
    next_probe,
    probe_requests,
    probe_table,
    probe_workload,
    slo_bounds_ms,
    summarize_probe,
    sustained_req_per_s,
    workload_rate_per_s,
)

METRICS = ("ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p95", "tpot_ms_p99", "e2e_ms_p50", "e2e_ms_p99")
THROUGHPUT = "achieved_req_per_s"
DEFAULT_BOUND = 0.15


@dataclass(frozen=True)
class MeasuredProbe:
    """One measured capacity probe of one configuration (`label`: e.g. `batching.max_batch_size=4`)."""

    label: str
    system: AnySystem
    probe: Probe

    def records(self) -> list[RequestRecord]:
        return [r for r in read_records(self.probe.records_path) if not r.warmup]


def measured_probes(label: str, system: AnySystem, result: CapacityResult) -> list[MeasuredProbe]:
    """The probes of one capacity search that ran (not its fresh-seed repeats: their seeds differ)."""
    return [MeasuredProbe(label, system, p) for p in result.probes if p.failed_at is None]


def policy_for(system: AnySystem, cost: CostModel) -> StaticPolicy | ContinuousPolicy:
    """The scheduler the system runs: a paged KV budget means vLLM-style continuous batching, else static."""
    cost.check_system(system)
    caps = system.capabilities
    if caps.kv_budget is None:
        blocks = getattr(system, "prefix_cache_block_tokens", None) if caps.prefix_cache else None
        return StaticPolicy(
            system.batching,
            prefix_block_tokens=blocks,
            kv_tokens=static_kv_tokens(system),
            live_rows=not caps.finished_rows_compute,
        )
    kv = caps.kv_budget
    per_token = cost.stats.get("kv_bytes_per_token", 0.0)
    blocks = (
        int(kv.configured_bytes // (per_token * kv.block_size_tokens)) if kv.configured_bytes and per_token else None
    )
    return ContinuousPolicy(
        max_num_seqs=caps.max_running or 256,
        max_num_batched_tokens=getattr(system, "max_num_batched_tokens", None) or 2048,
        chunked_prefill=getattr(system, "enable_chunked_prefill", None) is not False,
        priority=getattr(system, "scheduling_policy", "fcfs") == "priority",
        max_queued=caps.queue_bound,
        kv_blocks=blocks,
        block_size=kv.block_size_tokens,
        prefix_caching=bool(caps.prefix_cache),
    )


def static_kv_tokens(system: AnySystem) -> float | None:
    """A static batcher's KV cache in tokens of this system's KV dtype (the fake engine's `kv_cache_tokens`
    are fp16 tokens: an fp8 cache holds twice as many); None: the cache grows per batch (the hf engine)."""
    cap = getattr(system, "kv_cache_tokens", None)
    if cap is None:
        return None
    per_token = KV_BYTES.get(str(getattr(system, "kv_cache_dtype", "fp16")), 2.0) / KV_BYTES["fp16"]
    return cap / per_token


def extrapolation(
    cost: CostModel, system: AnySystem, workload: WorkloadConfig, rate_per_s: float, n: int | None
) -> str:
    """What of `system`'s simulated run at `rate_per_s` the fit never measured: "" when every step of a static
    batcher's simulated batches lies in the span of the measured steps (`Fit.identified`), else how many do not
    (a continuous batcher's fit reads per-request phases, not steps: not judged here, "")."""
    cost = cost.carried_to(system)
    if not isinstance(policy_for(system, cost), StaticPolicy) or not (math.isfinite(rate_per_s) and rate_per_s > 0):
        return ""
    run, _ = simulated_run(cost, system, workload, rate_per_s, n, workload.seed)
    obs = static_observations(run.records, live_rows=not system.capabilities.finished_rows_compute)
    pre = sum(1 for x in obs["px"] if not cost.prefill.identified(x))
    dec = sum(1 for x in obs["dx"] if not cost.decode.identified(x))
    if not pre and not dec:
        return ""
    return (
        f"{pre} of {len(obs['px'])} prefill and {dec} of {len(obs['dx'])} decode steps have a shape the fit "
        "never measured (an extrapolation)"
    )


def simulated_run(
    cost: CostModel,
    system: AnySystem,
    workload: WorkloadConfig,
    rate_per_s: float,
    n: int | None,
    seed: int,
    replicas: int = 1,
) -> tuple[MeasuredRun, WorkloadConfig]:
    """The workload at `rate_per_s` (a capacity probe's table) through the simulator, as a `MeasuredRun`; with
    `replicas` > 1, the rows dealt round robin to that many identical engines (a balancer), records merged."""
    wl = probe_workload(workload, rate_per_s, workload_rate_per_s(workload), n, seed)
    cost = cost.carried_to(system)  # itself, or carried across a dtype by the roofline prior; else WrongSystem
    table, policy = probe_table(wl, rate_per_s), policy_for(system, cost)
    records = [
        rec
        for k in range(replicas)
        for rec in simulate(table.iloc[k::replicas], policy, cost, timeout_s=wl.timeout_s, trial=k, seed=seed)
    ]
    ends = [r.client_done_s for r in records if r.client_done_s is not None]
    start_s = min(r.intended_s for r in records) if records else 0.0
    run = MeasuredRun(
        tags=RunTags(run_tag=SIM_TAG, arm=SIM_TAG),
        records=records,
        phases=phase_table(records),
        duration_s=max(ends) - start_s if ends else 0.0,
    )
    return run, wl


def simulated_probe(
    cost: CostModel,
    system: AnySystem,
    workload: WorkloadConfig,
    slo: SLOConfig,
    budget: CapacityBudget,
    where: tuple[int, str, float],
    prev: Probe | None = None,
    replicas: int = 1,
    sustained: float = 0.0,
) -> Probe:
    """A capacity probe's summary row, predicted (`where`: index, phase, offered rate; `prev`, `sustained`: as
    the search's own `summarize_probe` gets them)."""
    index, phase, rate = where
    n = probe_requests(budget, rate, workload.num_requests)  # as the measured probe at this rate
    run, wl = simulated_run(cost, system, workload, rate, n, workload.seed, replicas)
    where4 = (index, phase, rate, SIM_TAG)
    return summarize_probe(run, where4, slo, budget, prev, RequestSLO.of(wl, slo), sustained_req_per_s=sustained)


def simulated_capacity(
    cost: CostModel,
    system: AnySystem,
    workload: WorkloadConfig,
    slo: SLOConfig,
    budget: CapacityBudget,
    replicas: int = 1,
) -> CapacityResult:
    """The capacity search's own policy run on simulated probes (seconds, not minutes)."""
    start = budget.start_req_per_s or workload_rate_per_s(workload)
    probes: list[Probe] = []
    while (nxt := next_probe(probes, start, budget)) is not None:
        rate, phase = nxt
        below = [p for p in probes if p.offered_req_per_s < rate]
        prev = max(below, key=lambda p: p.offered_req_per_s) if below else None
        where = (len(probes), phase, rate)
        sustained = sustained_req_per_s(probes)
        probes.append(simulated_probe(cost, system, workload, slo, budget, where, prev, replicas, sustained))
    return conclude(probes, (), budget, slo)


def scaled_slo(slo: SLOConfig, factor: float) -> SLOConfig:
    """The SLO with every latency bound times `factor` (its failure-rate bounds as they are)."""
    fields = ("ttft_p99_ms", "tpot_p95_ms", "e2e_p99_ms")
    return slo.model_copy(update={f: getattr(slo, f) * factor for f in fields if getattr(slo, f) is not None})


def capacity_range(
    cost: CostModel, system: AnySystem, workload: WorkloadConfig, slo: SLOConfig, budget: CapacityBudget, err: float
) -> tuple[float, float]:
    """The capacities a prediction off by `err` (relative, on the latencies the SLO bounds) allows: simulated
    against the bounds tightened and loosened by that much (0 where nothing passes). Near a flat latency curve
    a small latency error moves the capacity a lot; this range says how much."""
    out = []
    for factor in (1.0 - err, 1.0 + err):
        r = simulated_capacity(cost, system, workload, scaled_slo(slo, max(factor, 1e-3)), budget).req_per_s
        out.append(r if math.isfinite(r) else 0.0)
    return out[0], out[1]


def slo_rel_err(rel_err_by_metric: dict[str, float], slo: SLOConfig) -> float:
    """The largest of these errors among the latencies the SLO bounds (NaN when none is known); calibration
    takes the held-back p99s: a range meant to hold the truth is sized by the worst probe, not the typical."""
    errs = [rel_err_by_metric.get(m, math.nan) for m in slo_bounds_ms(slo)]
    errs = [e for e in errs if math.isfinite(e)]
    return max(errs) if errs else math.nan


def rel_err(predicted: float, measured: float) -> float:
    """|predicted - measured| / |measured| (NaN when either is missing or the measurement is 0)."""
    if not (math.isfinite(predicted) and math.isfinite(measured)) or measured == 0:
        return math.nan
    return abs(predicted - measured) / abs(measured)


@dataclass(frozen=True)
class Calibration:
    """Predicted vs measured on held-back probes (see the module docstring). `table`: one row per probe and
    metric (split fit | held_back); `capacity`: one row per configuration whose capacity was measured."""

    cost: CostModel
    table: pd.DataFrame
    capacity: pd.DataFrame
    median_rel_err: dict[str, float]
    p99_rel_err: dict[str, float]
    capacity_rel_err: float
    probes_fit: int
    probes_held_back: int
    bound: float
    usable: bool
    message: str
    slo_rel_err: float = math.nan  # held-back p99 error on the latencies the SLO bounds, for `capacity_range`

    def metrics(self) -> dict[str, float]:
        """Flat metrics for tracking (non-finite errors left out)."""
        out = {f"sim.median_rel_err.{k}": v for k, v in self.median_rel_err.items()}
        out.update({f"sim.p99_rel_err.{k}": v for k, v in self.p99_rel_err.items()})
        out["sim.capacity_rel_err"] = self.capacity_rel_err
        out["sim.slo_rel_err"] = self.slo_rel_err
        out = {k: float(v) for k, v in out.items() if math.isfinite(v)}
        out.update({"sim.usable": float(self.usable), "sim.probes_fit": float(self.probes_fit)})
        return out | {"sim.probes_held_back": float(self.probes_held_back)}


def _rows(mp: MeasuredProbe, predicted: Probe, split: str) -> list[dict[str, Any]]:
    out = []
    for metric in (*METRICS, THROUGHPUT):
        meas, pred = float(getattr(mp.probe, metric)), float(getattr(predicted, metric))
        out.append(
            {
                "config": mp.label,
                "probe": mp.probe.index,
                "offered_req_per_s": mp.probe.offered_req_per_s,
                "split": split,
                "metric": metric,
                "measured": meas,
                "predicted": pred,
                "rel_err": rel_err(pred, meas),
                "passed_measured": mp.probe.passed,
                "passed_predicted": predicted.passed,
            }
        )
    return out


def error_table(
    cost: CostModel,
    probes: Sequence[tuple[MeasuredProbe, str]],
    workload: WorkloadConfig,
    slo: SLOConfig,
    budget: CapacityBudget,
) -> pd.DataFrame:
    """Predicted vs measured for every (probe, split) given, each search's probes in its order: a predicted
    verdict is judged against the predicted probes before it, as the search judged the measured one."""
    searched: dict[str, list[Probe]] = defaultdict(list)
    predicted = {}
    for mp, _ in sorted(probes, key=lambda t: (t[0].label, t[0].probe.index)):
        seen, rate = searched[mp.label], mp.probe.offered_req_per_s
        prev = max((p for p in seen if p.offered_req_per_s < rate), key=lambda p: p.offered_req_per_s, default=None)
        where = (mp.probe.index, mp.probe.phase, rate)
        seen.append(simulated_probe(cost, mp.system, workload, slo, budget, where, prev, 1, sustained_req_per_s(seen)))
        predicted[id(mp)] = seen[-1]
    return pd.DataFrame([row for mp, split in probes for row in _rows(mp, predicted[id(mp)], split)])


def as_searched(budget: CapacityBudget, result: CapacityResult) -> CapacityBudget:
    """`budget` started where the measured search started (its first probe's rate): the simulated search then
    walks the same grid of rates, so a capacity error is the model's and not two brackets' different grids
    (each up to `rel_tol` wide, reached from different starts)."""
    first = min(result.probes, key=lambda p: p.index, default=None)
    return replace(budget, start_req_per_s=first.offered_req_per_s) if first is not None else budget


def capacity_table(
    cost: CostModel,
    measured: dict[str, tuple[AnySystem, CapacityResult]],
    workload: WorkloadConfig,
    slo: SLOConfig,
    budget: CapacityBudget,
    err: float = math.nan,
) -> pd.DataFrame:
    """Measured vs simulated capacity under the SLO, per configuration; with a latency `err`, the range it
    allows (`capacity_range`) and whether the measured bracket meets it, one bracket's width given (`in_range`)."""
    rows = []
    for label, (system, result) in measured.items():
        searched = as_searched(budget, result)
        sim = simulated_capacity(cost, system, workload, slo, searched)
        lo, hi = capacity_range(cost, system, workload, slo, searched, err) if math.isfinite(err) else (math.nan,) * 2
        m_lo = result.req_per_s
        m_hi = result.hi_req_per_s or m_lo * (1.0 + budget.rel_tol)
        rows.append(
            {
                "config": label,
                "measured_req_per_s": m_lo,
                "predicted_req_per_s": sim.req_per_s,
                "rel_err": rel_err(sim.req_per_s, m_lo),
                "predicted_lo_req_per_s": lo,
                "predicted_hi_req_per_s": hi,
                "in_range": bool(m_lo <= hi * (1.0 + budget.rel_tol) and lo <= m_hi),
                "measured_status": result.status,
                "predicted_status": sim.status,
            }
        )
    return pd.DataFrame(rows)


def calibrate(
    fit_on: Sequence[MeasuredProbe],
    held_back: Sequence[MeasuredProbe],
    fitter: Callable[[Sequence[RequestRecord], AnySystem], CostModel],
    workload: WorkloadConfig,
    slo: SLOConfig,
    budget: CapacityBudget,
    *,
    capacities: dict[str, tuple[AnySystem, CapacityResult]] | None = None,
    bound: float = DEFAULT_BOUND,
) -> Calibration:
    """Fit on `fit_on`'s records, predict every probe; errors judged on `held_back` only. `capacities`: the
    measured capacity searches of held-back configurations, compared with `simulated_capacity`."""
    if not fit_on:
        raise ValueError("calibrate: no probes to fit on; fix: at least one measured capacity probe")
    records = [r for mp in fit_on for r in mp.records()]
    cost = fitter(records, fit_on[0].system)
    table = error_table(
        cost, [(m, "fit") for m in fit_on] + [(m, "held_back") for m in held_back], workload, slo, budget
    )
    held = table[table["split"] == "held_back"] if len(table) else table
    med = {m: _q(held, m, 0.5) for m in (*METRICS, THROUGHPUT)}
    p99 = {m: _q(held, m, 0.99) for m in (*METRICS, THROUGHPUT)}
    e_slo = slo_rel_err(p99, slo)
    cap = capacity_table(cost, capacities or {}, workload, slo, budget, e_slo)
    cap_err = float(cap["rel_err"].median()) if len(cap) else math.nan
    in_range = bool(cap["in_range"].all()) if len(cap) and math.isfinite(e_slo) else False
    gating = [m for m in slo_bounds_ms(slo) if m in METRICS]
    usable, message = judge(med, cap_err, bound, len(held_back), in_range, gating)
    n_fit, n_held = len(fit_on), len(held_back)
    return Calibration(cost, table, cap, med, p99, cap_err, n_fit, n_held, bound, usable, message, e_slo)


def _q(held: pd.DataFrame, metric: str, q: float) -> float:
    vals = held.loc[held["metric"] == metric, "rel_err"].dropna().to_numpy(float) if len(held) else np.array([])
    return float(np.quantile(vals, q)) if vals.size else math.nan


def judge(
    median_rel_err: dict[str, float],
    capacity_rel_err: float,
    bound: float,
    n_held: int,
    in_range: bool = False,
    gating: Sequence[str] = METRICS,
) -> tuple[bool, str]:
    """Usable for pruning only when the held-back median error of every latency in `gating` (calibration
    passes the ones the SLO bounds: capacity under the SLO depends on those alone; the others are reported) is
    within `bound`, and the capacity error too, or else the measured capacity lies in the range the latency
    error allows (`in_range`: a knife-edge SLO, where a percent of latency moves the capacity by a bracket; the
    pruner then keeps every point that range cannot rule out). No held-back probe: not known, so not usable."""
    if n_held == 0:
        return False, "no held-back probe: the simulator's error is unknown, so it is not used for pruning"
    over = {m: e for m, e in median_rel_err.items() if m in gating and (not math.isfinite(e) or e > bound)}
    cap_over = math.isfinite(capacity_rel_err) and capacity_rel_err > bound
    if cap_over and not in_range:
        over["capacity"] = capacity_rel_err
    if over:
        worst = ", ".join(f"{m} {e:.0%}" for m, e in over.items())
        return False, f"simulator unusable for pruning: held-back median error above {bound:.0%} ({worst})"
    edge = (
        f"; capacity off by {capacity_rel_err:.0%}, but the measured capacity lies in the range its latency error "
        "allows (a knife-edge SLO), so each point is judged by that range"
        if cap_over
        else ""
    )
    which = "every held-back median error" if set(gating) >= set(METRICS) else f"held-back median {', '.join(gating)}"
    return True, f"simulator usable: {which} within {bound:.0%} on {n_held} probes{edge}"


@dataclass(frozen=True)
class SearchCalibration:
    """The simulator calibrated on a search's own points: `calibration` None when it could not be fitted
    (`message` says why)."""

    calibration: Calibration | None
    message: str


def calibrate_search(
    points: Sequence[tuple[str, AnySystem, CapacityResult]],
    workload: WorkloadConfig,
    slo: SLOConfig,
    budget: CapacityBudget,
    fitter: Callable[[Sequence[RequestRecord], AnySystem], CostModel],
    bound: float = DEFAULT_BOUND,
) -> SearchCalibration:
    """Fit on the first point's probes (the baseline), predict every other point's probes and capacity: other
    knob values at the rates their own searches chose. An engine the fitter cannot read says so."""
    if not points:
        return SearchCalibration(None, "no point was measured: nothing to calibrate on")
    label, system, result = points[0]
    held = [mp for lab, sys_, res in points[1:] for mp in measured_probes(lab, sys_, res)]
    caps = {lab: (sys_, res) for lab, sys_, res in points[1:] if res.status != "failed"}
    try:
        cal = calibrate(
            measured_probes(label, system, result), held, fitter, workload, slo, budget, capacities=caps, bound=bound
        )
    except ValueError as exc:
        return SearchCalibration(None, f"simulator not fitted: {exc}")
    return SearchCalibration(cal, cal.message)


def calibrate_baseline(
    label: str,
    system: AnySystem,
    result: CapacityResult,
    workload: WorkloadConfig,
    slo: SLOConfig,
    budget: CapacityBudget,
    fitter: Callable[[Sequence[RequestRecord], AnySystem], CostModel],
    bound: float = DEFAULT_BOUND,
) -> SearchCalibration:
    """Before any other point is measured: fit on every other probe of the baseline's capacity search (by rate:
    the lowest, the third, ...), hold back the rest (other rates) and the baseline's capacity; when usable, the
    model returned is refitted on all of them (more data than the judged fit: its error is no larger, not less
    known). Other knob values are not judged here (none measured yet): `calibrate_search` does that afterwards."""
    probes = sorted(measured_probes(label, system, result), key=lambda m: m.probe.offered_req_per_s)
    if len(probes) < 2:
        return SearchCalibration(None, f"the baseline ran {len(probes)} probe(s): none to hold back, nothing judged")
    fit_on, held = probes[0::2], probes[1::2]
    try:
        cal = calibrate(fit_on, held, fitter, workload, slo, budget, capacities={label: (system, result)}, bound=bound)
        full = fitter([r for mp in probes for r in mp.records()], system)
    except ValueError as exc:
        return SearchCalibration(None, f"simulator not fitted: {exc}")
    note = " (held back: the baseline's own probes at other rates)"
    return SearchCalibration(replace(cal, cost=full), cal.message + note)
