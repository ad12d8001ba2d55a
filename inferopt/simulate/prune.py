"""Pruning a search with the simulator: predict every point, measure only what could still be the pick.

`prune` takes the candidate systems (the baseline first), a `predict(system) -> CapacityResult` (the calibrated
simulator's capacity search, `calibrate.simulated_capacity`) and that simulator's `Calibration`. With a usable
calibration it keeps for real measurement: the baseline and the points named in `always` (control arms), the
`top_k` points by predicted capacity (the simulator's own top pick always), every point that could still be the
best (`tie_share`: each prediction off by the capacity error, bracketed no finer than `resolution`; a point
reached by the roofline prior, `CostModel.carried_to`, off by the bound more) and every point it refuses to
predict (another engine, model). The Pareto frontier of predicted capacity vs per-user speed (1000 / TPOT p50
at capacity; ties within the simulator's error, or 1 % in speed; none that is the baseline again) is always
reported, measured only with `frontier`: the pick is by capacity, so a frontier point beyond the error of the
best cannot be it. An unusable calibration prunes nothing and says so; every point is predicted either way.
Deliberately not here: measuring, or the search's decision rule (`inferopt.choose.pruning` wires this into the
search, which measures what `prune` keeps and decides on measurements only).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from inferopt.config import AnySystem
from inferopt.simulate.calibrate import Calibration
from inferopt.simulate.costs import WrongSystem
from inferopt.validate.capacity import CapacityResult

SPEED_RESOLUTION = 0.01  # per-user speeds predicted within 1 % of each other are not told apart


@dataclass(frozen=True)
class PruneDecision:
    """`measure`: indices into the space to measure for real (sorted); `predicted`: one row per point (its
    predicted capacity, whether it is kept and why); `usable`: whether the simulator pruned anything."""

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


def pareto_max(x: np.ndarray, y: np.ndarray, eps_x: float = 0.0, eps_y: float = 0.0) -> np.ndarray:
    """True where no other point is at least as good on both and better on one (both maximised, non-negative);
    with `eps_*`, relative differences within them count as ties (the simulator cannot resolve them)."""
    keep = np.ones(len(x), bool)
    for i in range(len(x)):
        at_least = (x >= x[i] * (1.0 - eps_x)) & (y >= y[i] * (1.0 - eps_y))
        better = (x > x[i] * (1.0 + eps_x)) | (y > y[i] * (1.0 + eps_y))
        keep[i] = not (at_least & better).any()
    return keep


def tie_share(rel_err: float, resolution: float) -> float:
    """How far below the best a predicted capacity may sit and still be the best: each prediction off by up to
    `rel_err` (relative), and each the low end of a bracket `resolution` wide (the capacity search's rel_tol):
    1 - (1 - e) / ((1 + e)(1 + r))."""
    return 1.0 - (1.0 - rel_err) / ((1.0 + rel_err) * (1.0 + resolution))


def predict_all(
    space: Sequence[AnySystem], predict: Callable[[AnySystem], CapacityResult]
) -> tuple[list[CapacityResult | None], list[str]]:
    """Each point's predicted capacity, or None with the simulator's refusal (`WrongSystem`) as the reason."""
    results: list[CapacityResult | None] = []
    refusals = []
    for system in space:
        try:
            results.append(predict(system))
            refusals.append("")
        except WrongSystem as exc:
            results.append(None)
            refusals.append(str(exc))
    return results, refusals


def _table(results: Sequence[CapacityResult | None], refusals: Sequence[str]) -> pd.DataFrame:
    cap = [(r.req_per_s if math.isfinite(r.req_per_s) else 0.0) if r is not None else math.nan for r in results]
    return pd.DataFrame(
        {
            "point": range(len(results)),
            "predictable": [r is not None for r in results],
            "predicted_capacity_req_per_s": cap,
            "predicted_status": [r.status if r is not None else "refused" for r in results],
            "predicted_per_user_tok_per_s": [_speed(r) if r is not None else math.nan for r in results],
            "refusal": list(refusals),
        }
    )


def _bounds(
    space: Sequence[AnySystem],
    cap: np.ndarray,
    carried: np.ndarray,
    raw: float,
    rivals: Sequence[int],
    calibration: Calibration,
    band: Callable[[AnySystem, float], tuple[float, float]] | None,
) -> tuple[np.ndarray, np.ndarray]:
    """The lowest and highest capacity each point may really have: its prediction off by its capacity error,
    widened by `band` (the capacities its latency error allows: near a flat latency curve a percent of latency
    is a bracket of capacity). A capacity error above the bound (usable only when the baseline's measured
    capacity lies in its band) is what the band explains, so then only the band counts."""
    point_err = np.where(carried, raw + calibration.bound, raw)  # a carried prediction is a prior: wider
    low, high = cap * (1.0 - point_err), cap * (1.0 + point_err)
    e_slo = calibration.slo_rel_err
    if band is None or not math.isfinite(e_slo):
        return low, high
    if raw > calibration.bound:
        low, high = cap.copy(), cap.copy()
    for i in rivals:
        lo, hi = band(space[i], e_slo + (calibration.bound if carried[i] else 0.0))
        low[i], high[i] = min(low[i], lo), max(high[i], hi)
    return low, high


def _error_text(raw: float, calibration: Calibration, banded: bool) -> str:
    e_slo = calibration.slo_rel_err
    text = f"capacity {raw:.0%}" if raw <= calibration.bound or not banded else "capacity knife-edge"
    if banded and math.isfinite(e_slo):
        text += f", latency {e_slo:.1%} moving each point's capacity range"
    return text + f", one {calibration.bound:.0%} more for a carried prediction"


def _carried(calibration: Calibration, system: AnySystem) -> str:
    """How the calibrated model reached `system` by the roofline prior ("" when fitted on it)."""
    try:
        return calibration.cost.carried_to(system).carried
    except WrongSystem:
        return ""


def _why(i: int, row: pd.Series, always: set[int], frontier: bool) -> str:
    if i in always:
        return "baseline" if i == 0 else "declared control arm"
    reasons = [
        name
        for name, flag in (
            ("cannot predict", not row["predictable"]),
            ("extrapolates past the measured steps", bool(row.get("extrapolated", ""))),
            ("top by predicted capacity", row["top"]),
            ("within the simulator's error of the best", row["near_best"]),
            ("on the predicted frontier", row["frontier"] and frontier),
        )
        if flag
    ]
    if reasons:
        return "; ".join(reasons)
    why = "pruned: predicted below the best beyond the simulator's error"
    return why + (" (on the predicted frontier, so reported; it cannot be the pick)" if row["frontier"] else "")


def prune(
    space: Sequence[AnySystem],
    predict: Callable[[AnySystem], CapacityResult],
    calibration: Calibration | None,
    *,
    top_k: int = 2,
    frontier: bool = False,
    always: Sequence[int] = (),
    resolution: float = 0.0,
    band: Callable[[AnySystem, float], tuple[float, float]] | None = None,
    extrapolation: Callable[[AnySystem, float], str] | None = None,
) -> PruneDecision:
    """Which points of `space` to measure (see the module docstring); `extrapolation(system, predicted
    capacity)` says why a point's prediction leaves what the fit measured ("" when it does not): such a point
    is measured, as one the simulator cannot predict."""
    everything = tuple(range(len(space)))
    if calibration is None:
        return PruneDecision(everything, pd.DataFrame({"point": everything}), False, "nothing pruned: no calibration")
    table = _table(*predict_all(space, predict))
    ok = table["predictable"].to_numpy(bool)
    cap = table["predicted_capacity_req_per_s"].fillna(0.0).to_numpy(float)
    speed = table["predicted_per_user_tok_per_s"].fillna(0.0).to_numpy(float)
    keep_always = {0, *always}
    rivals = [i for i in everything if ok[i] and i not in keep_always]  # the points the simulator may rank
    raw = calibration.capacity_rel_err if math.isfinite(calibration.capacity_rel_err) else calibration.bound
    err = tie_share(raw, resolution)
    table["carried"] = [_carried(calibration, system) if ok[i] else "" for i, system in enumerate(space)]
    table["extrapolated"] = [
        extrapolation(system, float(cap[i])) if extrapolation is not None and i in rivals else ""
        for i, system in enumerate(space)
    ]
    beyond = table["extrapolated"].to_numpy() != ""
    tpot_err = calibration.median_rel_err.get("tpot_ms_p50", math.nan)
    speed_err = max(tpot_err if math.isfinite(tpot_err) else calibration.bound, SPEED_RESOLUTION)
    best = max((cap[i] for i in rivals), default=0.0)
    top = set(sorted(rivals, key=lambda i: (-cap[i], i))[:top_k])
    table["top"] = [i in top for i in everything]
    low, high = _bounds(space, cap, table["carried"].to_numpy() != "", raw, rivals, calibration, band)
    table["predicted_lo_req_per_s"], table["predicted_hi_req_per_s"] = low, high
    floor = max((low[i] for i in rivals), default=0.0)  # surely reached by one point
    could = high * (1.0 + resolution)  # the most each point could measure
    table["near_best"] = [i in rivals and best > 0 and could[i] >= floor for i in everything]
    front = pareto_max(np.where(ok, cap, 0.0), np.where(ok, speed, 0.0), err, speed_err) & ok
    twin = (cap <= cap[0] * (1.0 + err)) & (speed <= speed[0] * (1.0 + speed_err))  # the baseline's, within error
    front &= ~twin | (np.arange(len(ok)) == 0)
    table["frontier"] = front  # always reported; measured only with `frontier`
    if not calibration.usable:
        table["measure"], table["why"] = True, "nothing pruned: the simulator's calibration is unusable"
        return PruneDecision(everything, table, False, f"nothing pruned: {calibration.message}")
    keep = [
        i
        for i in everything
        if i in keep_always or not ok[i] or beyond[i] or top & {i} or table["near_best"][i] or (frontier and front[i])
    ]
    table["measure"] = [i in keep for i in everything]
    table["why"] = [_why(i, table.iloc[i], keep_always, frontier) for i in everything]
    msg = (
        f"measure {len(keep)} of {len(space)} points (the baseline, top {top_k}, those that could still be the best "
        f"given the simulator's error ({_error_text(raw, calibration, band is not None)}), those it cannot predict"
        + (", the predicted frontier" if frontier else "")
        + f"); {len(space) - len(keep)} pruned by the simulator"
        + ("" if frontier else f"; the predicted frontier ({int(front.sum())} points) reported, not measured")
    )
    return PruneDecision(tuple(keep), table, True, msg)
