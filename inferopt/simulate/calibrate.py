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
from inferopt.simulate.costs import CostModel
from inferopt.simulate.scheduler import SIM_TAG, ContinuousPolicy, StaticPolicy, simulate
from inferopt.validate.capacity import (
    CapacityBudget,
    CapacityResult,
    Probe,
    conclude,
    next_probe,
    probe_table,
    probe_workload,
    summarize_probe,
    workload_rate_per_s,
)

METRICS = ("ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "tpot_ms_p99", "e2e_ms_p50", "e2e_ms_p99")
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
        return StaticPolicy(system.batching, prefix_block_tokens=blocks)
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
    table, policy = probe_table(wl, rate_per_s), policy_for(system, cost)
    records = [
        rec
        for k in range(replicas)
        for rec in simulate(table.iloc[k::replicas], policy, cost, timeout_s=wl.timeout_s, trial=k)
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
) -> Probe:
    """A capacity probe's summary row, predicted (`where`: index, phase, offered rate)."""
    index, phase, rate = where
    run, wl = simulated_run(cost, system, workload, rate, budget.requests_per_probe, workload.seed, replicas)
    return summarize_probe(run, (index, phase, rate, SIM_TAG), slo, budget, prev, RequestSLO.of(wl, slo))


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
        probes.append(simulated_probe(cost, system, workload, slo, budget, where, prev, replicas))
    return conclude(probes, (), budget, slo)


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

    def metrics(self) -> dict[str, float]:
        """Flat metrics for tracking (non-finite errors left out)."""
        out = {f"sim.median_rel_err.{k}": v for k, v in self.median_rel_err.items()}
        out.update({f"sim.p99_rel_err.{k}": v for k, v in self.p99_rel_err.items()})
        out["sim.capacity_rel_err"] = self.capacity_rel_err
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
    """Predicted vs measured for every (probe, split) given."""
    rows = []
    for mp, split in probes:
        pred = simulated_probe(
            cost, mp.system, workload, slo, budget, (mp.probe.index, mp.probe.phase, mp.probe.offered_req_per_s)
        )
        rows += _rows(mp, pred, split)
    return pd.DataFrame(rows)


def capacity_table(
    cost: CostModel,
    measured: dict[str, tuple[AnySystem, CapacityResult]],
    workload: WorkloadConfig,
    slo: SLOConfig,
    budget: CapacityBudget,
) -> pd.DataFrame:
    """Measured vs simulated capacity under the SLO, per configuration."""
    rows = []
    for label, (system, result) in measured.items():
        sim = simulated_capacity(cost, system, workload, slo, budget)
        rows.append(
            {
                "config": label,
                "measured_req_per_s": result.req_per_s,
                "predicted_req_per_s": sim.req_per_s,
                "rel_err": rel_err(sim.req_per_s, result.req_per_s),
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
    cap = capacity_table(cost, capacities or {}, workload, slo, budget)
    held = table[table["split"] == "held_back"] if len(table) else table
    med = {m: _q(held, m, 0.5) for m in (*METRICS, THROUGHPUT)}
    p99 = {m: _q(held, m, 0.99) for m in (*METRICS, THROUGHPUT)}
    cap_err = float(cap["rel_err"].median()) if len(cap) else math.nan
    usable, message = judge(med, cap_err, bound, len(held_back))
    return Calibration(cost, table, cap, med, p99, cap_err, len(fit_on), len(held_back), bound, usable, message)


def _q(held: pd.DataFrame, metric: str, q: float) -> float:
    vals = held.loc[held["metric"] == metric, "rel_err"].dropna().to_numpy(float) if len(held) else np.array([])
    return float(np.quantile(vals, q)) if vals.size else math.nan


def judge(median_rel_err: dict[str, float], capacity_rel_err: float, bound: float, n_held: int) -> tuple[bool, str]:
    """Usable for pruning only when every latency metric's held-back median error and the capacity error are
    within `bound` (no held-back probe: not known, so not usable)."""
    if n_held == 0:
        return False, "no held-back probe: the simulator's error is unknown, so it is not used for pruning"
    over = {m: e for m, e in median_rel_err.items() if m in METRICS and (not math.isfinite(e) or e > bound)}
    if math.isfinite(capacity_rel_err) and capacity_rel_err > bound:
        over["capacity"] = capacity_rel_err
    if over:
        worst = ", ".join(f"{m} {e:.0%}" for m, e in over.items())
        return False, f"simulator unusable for pruning: held-back median error above {bound:.0%} ({worst})"
    return True, f"simulator usable: every held-back median error within {bound:.0%} on {n_held} probes"


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
