"""Pruning a search with the simulator: predict every point, measure only the frontier and the top few.

`prune` takes the candidate systems (the baseline first), a `predict(system) -> CapacityResult` (the calibrated
simulator's capacity search, `calibrate.simulated_capacity`) and that simulator's `Calibration`. With a usable
calibration it keeps for real measurement: the baseline, the `top_k` by predicted capacity, every point whose
predicted capacity is within twice the simulator's capacity error of the best (the simulator cannot order those),
and the Pareto frontier of predicted capacity vs per-user speed (1000 / TPOT p50 at capacity). An unusable
calibration prunes nothing and says so. Deliberately not here: measuring, or the search's decision rule
(`inferopt.choose.search` measures what `prune` keeps and decides on measurements only).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from inferopt.config import AnySystem
from inferopt.simulate.calibrate import Calibration
from inferopt.validate.capacity import CapacityResult


@dataclass(frozen=True)
class PruneDecision:
    """`measure`: indices into the space to measure for real (sorted); `predicted`: one row per point."""

    measure: tuple[int, ...]
    predicted: pd.DataFrame
    usable: bool
    message: str

    @property
    def skipped(self) -> tuple[int, ...]:
        return tuple(i for i in range(len(self.predicted)) if i not in self.measure)


def _speed(result: CapacityResult) -> float:
    at = [p for p in result.probes if p.passed and p.offered_req_per_s == result.lo_req_per_s]
    tpot = at[-1].tpot_ms_p50 if at else math.nan
    return 1000.0 / tpot if math.isfinite(tpot) and tpot > 0 else 0.0


def pareto_max(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """True where no other point is at least as good on both and better on one (both maximised)."""
    keep = np.ones(len(x), bool)
    for i in range(len(x)):
        dominated = (x >= x[i]) & (y >= y[i]) & ((x > x[i]) | (y > y[i]))
        keep[i] = not dominated.any()
    return keep


def prune(
    space: Sequence[AnySystem],
    predict: Callable[[AnySystem], CapacityResult],
    calibration: Calibration | None,
    *,
    top_k: int = 2,
) -> PruneDecision:
    """Which points of `space` to measure (see the module docstring)."""
    everything = tuple(range(len(space)))
    if calibration is None or not calibration.usable:
        why = calibration.message if calibration is not None else "no calibration"
        return PruneDecision(everything, pd.DataFrame({"point": everything}), False, f"nothing pruned: {why}")
    results = [predict(s) for s in space]
    cap = np.array([r.req_per_s if math.isfinite(r.req_per_s) else 0.0 for r in results])
    speed = np.array([_speed(r) for r in results])
    err = calibration.capacity_rel_err if math.isfinite(calibration.capacity_rel_err) else calibration.bound
    near = cap >= cap.max() * (1.0 - 2.0 * err) if len(cap) else np.array([], bool)
    top = set(np.argsort(-cap, kind="stable")[:top_k].tolist())
    front = pareto_max(cap, speed)
    keep = sorted({0, *top, *np.flatnonzero(near).tolist(), *np.flatnonzero(front).tolist()})
    table = pd.DataFrame(
        {
            "point": everything,
            "predicted_capacity_req_per_s": cap,
            "predicted_per_user_tok_per_s": speed,
            "top": [i in top for i in everything],
            "near_best": near,
            "frontier": front,
            "measure": [i in keep for i in everything],
        }
    )
    msg = (
        f"measure {len(keep)} of {len(space)} points (baseline, top {top_k}, those within {2 * err:.0%} of the best "
        f"predicted capacity, the predicted frontier); {len(space) - len(keep)} pruned by the simulator"
    )
    return PruneDecision(tuple(keep), table, True, msg)
