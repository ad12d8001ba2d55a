"""Interaction of single changes in their combination (SPEC A1: two arms that each help, run together once):
is the combination's effect the product of the single effects (log-additive), or more / less than that?
For metrics that are sums of parts (memory bytes), `additive=True` predicts the sum of the single changes'
differences instead.

`interaction_repeat_test` works on repeat-level log ratios (the default, like `stats.paired_repeat_test`);
`interaction_bootstrap` resamples trials then requests. Both return an `Interaction`: observed vs predicted
ratio, their quotient (the interaction, 1 = none) with its interval and p-value.

Deliberately not here: the generic bootstrap / t machinery (`inferopt.stats.inference`) and tables
(`inferopt.ablate.compare`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from inferopt.stats.inference import (
    RowStat,
    StatFn,
    _finite,
    _quantiles,
    _resample_rows,
    _resample_within,
    _t_interval,
)


@dataclass(frozen=True)
class Interaction:
    """Do k changes compose multiplicatively? `observed_ratio` = combined / baseline; `predicted_ratio` =
    the product of each single change's ratio (the log-additive model: independent changes multiply a
    latency or a throughput); `interaction` = observed / predicted with its (1 - alpha) bootstrap CI and the
    two-sided bootstrap p-value of "interaction = 1". Below 1: together they do less than (for a metric that
    falls, more than) the product predicts."""

    metric: str
    observed_ratio: float
    predicted_ratio: float
    single_ratios: tuple[float, ...]
    interaction: float
    lo: float
    hi: float
    p_value: float
    alpha: float = 0.05
    n_boot: int = 0

    @property
    def significant(self) -> bool:
        return self.lo > 1.0 or self.hi < 1.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def interaction_bootstrap(
    base_trials: Sequence[Sequence[float] | np.ndarray],
    single_trials: Sequence[Sequence[Sequence[float] | np.ndarray]],
    combined_trials: Sequence[Sequence[float] | np.ndarray],
    stat_fn: StatFn,
    n_boot: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
    metric: str | None = None,
    row_stat: RowStat | None = None,
    additive: bool = False,
) -> Interaction:
    """Interaction of k single-change arms in their combination, on log scale (`additive`: see
    `interaction_repeat_test`):
    log(s_comb / s_base) - sum_i log(s_i / s_base), bootstrapped with the same two levels as
    `paired_bootstrap_diff` (trials — the same indices for every arm when all have as many, since trial i of
    every arm ran in the same interleaved repeat — then requests within trials). NaN when a value is <= 0."""
    groups = [[_finite(t) for t in g] for g in (base_trials, *single_trials, combined_trials)]
    groups = [[t for t in g if t.size] for g in groups]
    name = metric or getattr(stat_fn, "__name__", "stat")
    k = len(single_trials)
    nan = math.nan
    if any(not g for g in groups) or k < 1:
        return Interaction(name, nan, nan, tuple([nan] * k), nan, nan, nan, nan, alpha, n_boot)

    def log_terms(values: list[float]) -> tuple[float, float, list[float]]:
        if any(not (v > 0) for v in values):
            return nan, nan, [nan] * k
        lb, *ls, lc = (math.log(v) for v in values)
        return lc - lb, _predicted_log(np.asarray([x - lb for x in ls]), additive), [x - lb for x in ls]

    point = [float(stat_fn(np.concatenate(g))) for g in groups]
    obs, pred, singles = log_terms(point)
    rng = np.random.default_rng(seed)
    sizes = {len(g) for g in groups}
    paired = len(sizes) == 1
    if row_stat is not None:
        shared = rng.integers(0, len(groups[0]), size=(n_boot, len(groups[0]))) if paired else None
        stats = []
        for g in groups:
            picks = shared if paired else rng.integers(0, len(g), size=(n_boot, len(g)))
            stats.append(row_stat(_resample_rows(g, picks, rng)))
        with np.errstate(divide="ignore", invalid="ignore"):
            logs = np.log(np.where(np.vstack(stats) > 0, np.vstack(stats), math.nan))
        lb, ls, lc = logs[0], logs[1:-1], logs[-1]
        inter = (lc - lb) - _predicted_log(ls - lb, additive)
    else:
        inter = np.empty(n_boot)
        for i in range(n_boot):
            shared = rng.integers(0, len(groups[0]), size=len(groups[0])) if paired else None
            vals = []
            for g in groups:
                picks = shared if paired else rng.integers(0, len(g), size=len(g))
                vals.append(float(stat_fn(_resample_within(g, picks, rng))))
            o, p_, _ = log_terms(vals)
            inter[i] = o - p_
    lo, hi = _quantiles(inter, alpha)
    finite = inter[np.isfinite(inter)]
    if finite.size:
        below, above = int(np.sum(finite <= 0)), int(np.sum(finite >= 0))
        p = min(1.0, 2.0 * (min(below, above) + 1) / (finite.size + 1))
    else:
        p = nan
    return Interaction(
        name,
        math.exp(obs),
        math.exp(pred),
        tuple(math.exp(x) for x in singles),
        math.exp(obs - pred),
        math.exp(lo),
        math.exp(hi),
        p,
        alpha,
        n_boot,
    )


def interaction_repeat_test(
    base_trials: Sequence[Sequence[float] | np.ndarray],
    single_trials: Sequence[Sequence[Sequence[float] | np.ndarray]],
    combined_trials: Sequence[Sequence[float] | np.ndarray],
    stat_fn: StatFn,
    alpha: float = 0.05,
    metric: str | None = None,
    additive: bool = False,
) -> Interaction:
    """`Interaction` at the level of repeats (as `paired_repeat_test`): per repeat r, with per-trial
    statistics, I_r = log(comb_r / base_r) - sum_i log(single_ir / base_r); one-sample t-test on the I_r.
    observed / predicted ratios are the geometric means over repeats, so interaction = observed / predicted.

    `additive`: for a metric that is a sum of parts the changes act on separately (memory: weight bytes + KV
    bytes), no interaction means the changes' differences add up, predicted ratio 1 + sum_i (r_i - 1), not
    their product (int8 weights x0.31 and a 4-bit KV cache x0.95 of peak memory predict x0.26, not x0.30)."""
    name = metric or getattr(stat_fn, "__name__", "stat")
    k = len(single_trials)
    nan = math.nan
    groups = [[_finite(t) for t in g] for g in (base_trials, *single_trials, combined_trials)]
    n = min(len(g) for g in groups) if groups else 0
    obs, pred, singles = [], [], []
    for r in range(n):
        cells = [g[r] for g in groups]
        if any(not c.size for c in cells):
            continue
        vals = [float(stat_fn(c)) for c in cells]
        if any(not (v > 0) for v in vals):
            continue
        lb, *ls, lc = (math.log(v) for v in vals)
        predicted = _predicted_log(np.asarray([x - lb for x in ls]), additive)
        if not math.isfinite(predicted):
            continue
        obs.append(lc - lb)
        singles.append([x - lb for x in ls])
        pred.append(predicted)
    if len(obs) < 2 or k < 1:
        return Interaction(name, nan, nan, tuple([nan] * k), nan, nan, nan, nan, alpha, 0)
    inter = np.asarray(obs) - np.asarray(pred)
    lo, mean, hi, p = _t_interval(inter, alpha)
    single_means = np.mean(np.asarray(singles), axis=0)
    return Interaction(
        name,
        math.exp(float(np.mean(obs))),
        math.exp(float(np.mean(pred))),
        tuple(math.exp(float(x)) for x in single_means),
        math.exp(mean),
        math.exp(lo),
        math.exp(hi),
        p,
        alpha,
        0,
    )


def _predicted_log(single_logs: np.ndarray, additive: bool) -> Any:
    """log of the predicted combined ratio from the single arms' log ratios (axis 0 = arms): their sum
    (multiplicative model), or log(1 + sum_i (r_i - 1)) (additive model; NaN when that is <= 0)."""
    if not additive:
        return np.sum(single_logs, axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        total = 1.0 + np.sum(np.exp(single_logs) - 1.0, axis=0)
        return np.log(np.where(total > 0, total, math.nan))
