"""Planning past this machine: the fitted simulator at other loads and replica counts — predictions, labelled so.

`load_curve` predicts a capacity probe's row (p50/p99 latencies, throughput, SLO pass) at each rate given, to show
where p99 breaks; `replica_plan` runs the capacity search's policy on simulated probes for 1..N identical
replicas behind a round-robin balancer: what rate N replicas hold under the SLO. Every row says
`kind="predicted"` and carries the simulator's own held-back error where a calibration measured one, so a
prediction is never read as a measurement.
Deliberately not here: measuring (the capacity search does that), balancer policies other than round robin.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import pandas as pd

from inferopt.config import AnySystem, SLOConfig, WorkloadConfig
from inferopt.simulate.calibrate import Calibration, simulated_capacity, simulated_probe
from inferopt.simulate.costs import CostModel
from inferopt.validate.capacity import CapacityBudget


def _error_note(calibration: Calibration | None) -> dict[str, float | bool]:
    if calibration is None:
        return {"sim_capacity_rel_err": math.nan, "sim_usable": False}
    return {"sim_capacity_rel_err": calibration.capacity_rel_err, "sim_usable": calibration.usable}


def load_curve(
    cost: CostModel,
    system: AnySystem,
    workload: WorkloadConfig,
    slo: SLOConfig,
    budget: CapacityBudget,
    rates_per_s: Sequence[float],
    *,
    replicas: int = 1,
    calibration: Calibration | None = None,
) -> pd.DataFrame:
    """One predicted probe row per offered rate (total over the replicas)."""
    rows = []
    for i, rate in enumerate(rates_per_s):
        p = simulated_probe(cost, system, workload, slo, budget, (i, "start", float(rate)), None, replicas)
        rows.append({"kind": "predicted", "replicas": replicas, **p.row(), **_error_note(calibration)})
    return pd.DataFrame(rows)


def replica_plan(
    cost: CostModel,
    system: AnySystem,
    workload: WorkloadConfig,
    slo: SLOConfig,
    budget: CapacityBudget,
    replicas: Sequence[int] = (1, 2, 4),
    *,
    calibration: Calibration | None = None,
) -> pd.DataFrame:
    """Predicted capacity under the SLO per replica count: each replica sees as many requests per probe as one
    alone would (a probe's request count times the count), and the search starts at the single-replica capacity
    times the count, so each search brackets near its answer."""
    rows, single = [], None
    for n in replicas:
        b = replace(budget, requests_per_probe=budget.requests_per_probe * n) if budget.requests_per_probe else budget
        if single is not None and math.isfinite(single):
            b = replace(b, start_req_per_s=single * n)
        result = simulated_capacity(cost, system, workload, slo, b, replicas=n)
        single = result.req_per_s / n if single is None else single
        rows.append(
            {
                "kind": "predicted",
                "replicas": n,
                "capacity_req_per_s": result.req_per_s,
                "per_replica_req_per_s": result.req_per_s / n,
                "status": result.status,
                "message": result.message,
                **_error_note(calibration),
            }
        )
    return pd.DataFrame(rows)
