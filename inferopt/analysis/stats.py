"""Statistics for "the gain exceeds noise" (SPEC A1, G2): NaN-safe percentiles, percentile-bootstrap
confidence intervals, a paired two-level bootstrap of baseline-vs-candidate effects, and Holm's
step-down correction when several metrics are tested at once.

The statistic is always an argument (lm-eval style): `stat_fn(values_1d) -> float`, e.g. `np.mean`,
or `percentile_fn(99)` for a tail. Every bootstrap takes an explicit seed and its own generator.

Resampling in `paired_bootstrap_diff` (two levels, because repeats of a load test differ from each
other by more than their requests do: warm-up, neighbours, thermal state):
1. trials (blocks) are resampled with replacement; when both arms have the same number of trials
   the *same* trial indices are drawn for both (trial i of A and trial i of B ran back to back in
   the interleaved ablation order, so they share the machine's drift — this is the pairing);
2. within each drawn trial, requests are resampled with replacement;
3. the statistic is computed per arm on the pooled resampled requests, then b - a and b / a.
With no real trial-to-trial variation the two-level scheme is conservative (intervals a little wide:
variance is counted at both levels); with it, few trials make any interval approximate — use >= 3.
Requests are not paired across arms: under load a request's latency depends on its neighbours, so
request i of A and request i of B are not a matched pair even with an identical workload.

What this module deliberately does not do: decide which metric matters or what counts as better
(lower latency vs higher throughput) — that is the caller's; it reports the signed effect b - a.
No torch, no pandas.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

StatFn = Callable[[np.ndarray], float]


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float:
    """The q-th percentile (q in 0..100, linear interpolation) of the finite values; NaN when none."""
    arr = _finite(values)
    return float(np.percentile(arr, q)) if arr.size else math.nan


def percentile_fn(q: float) -> StatFn:
    """A named statistic for the q-th percentile, e.g. `percentile_fn(99).__name__ == 'p99'`."""

    def fn(values: np.ndarray) -> float:
        return percentile(values, q)

    fn.__name__ = f"p{q:g}"
    return fn


@dataclass(frozen=True)
class Interval:
    """A point estimate and its (1 - alpha) percentile-bootstrap interval."""

    value: float
    lo: float
    hi: float
    alpha: float
    n: int

    def contains(self, x: float) -> bool:
        return self.lo <= x <= self.hi


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    stat_fn: StatFn,
    n_boot: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
) -> Interval:
    """Percentile bootstrap CI of `stat_fn` over the finite `values` (NaNs dropped first)."""
    arr = _finite(values)
    if arr.size == 0:
        return Interval(math.nan, math.nan, math.nan, alpha, 0)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, arr.size, size=(n_boot, arr.size))
    boots = np.fromiter((stat_fn(arr[row]) for row in idx), dtype=float, count=n_boot)
    lo, hi = _quantiles(boots, alpha)
    return Interval(float(stat_fn(arr)), lo, hi, alpha, int(arr.size))


@dataclass(frozen=True)
class Effect:
    """Baseline (a) vs candidate (b) on one metric: values, b - a and b / a with (1 - alpha) bootstrap
    CIs, the two-sided bootstrap p-value of "no difference", and the number of requests per arm."""

    metric: str
    a_value: float
    b_value: float
    diff: float
    diff_lo: float
    diff_hi: float
    ratio: float
    ratio_lo: float
    ratio_hi: float
    p_value: float
    n_a: int
    n_b: int
    alpha: float = 0.05
    n_boot: int = 0

    @property
    def significant(self) -> bool:
        """The diff CI excludes 0."""
        return self.diff_lo > 0 or self.diff_hi < 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def paired_bootstrap_diff(
    a_trials: Sequence[Sequence[float] | np.ndarray],
    b_trials: Sequence[Sequence[float] | np.ndarray],
    stat_fn: StatFn,
    n_boot: int = 2000,
    alpha: float = 0.05,
    seed: int = 0,
    metric: str | None = None,
) -> Effect:
    """Effect of b over a for `stat_fn` with a two-level (trials, then requests) bootstrap; see the
    module docstring. Each element of `a_trials` / `b_trials` holds one repeat's per-request values
    (NaNs dropped). p-value: 2 x the smaller tail share of bootstrap diffs at or beyond 0, with a +1
    correction so it is never exactly 0, capped at 1."""
    a = [_finite(t) for t in a_trials]
    b = [_finite(t) for t in b_trials]
    a = [t for t in a if t.size]
    b = [t for t in b if t.size]
    name = metric or getattr(stat_fn, "__name__", "stat")
    n_a, n_b = sum(t.size for t in a), sum(t.size for t in b)
    if not a or not b:
        nan = math.nan
        return Effect(name, nan, nan, nan, nan, nan, nan, nan, nan, nan, n_a, n_b, alpha, n_boot)
    a_val = float(stat_fn(np.concatenate(a)))
    b_val = float(stat_fn(np.concatenate(b)))
    rng = np.random.default_rng(seed)
    paired = len(a) == len(b)
    diffs = np.empty(n_boot)
    ratios = np.empty(n_boot)
    with np.errstate(divide="ignore", invalid="ignore"):
        for i in range(n_boot):
            ta = rng.integers(0, len(a), size=len(a))
            tb = ta if paired else rng.integers(0, len(b), size=len(b))
            sa = stat_fn(_resample_within(a, ta, rng))
            sb = stat_fn(_resample_within(b, tb, rng))
            diffs[i] = sb - sa
            ratios[i] = sb / sa if sa != 0 else math.nan
        ratio = b_val / a_val if a_val != 0 else math.nan
    d_lo, d_hi = _quantiles(diffs, alpha)
    r_lo, r_hi = _quantiles(ratios[np.isfinite(ratios)], alpha) if np.isfinite(ratios).any() else (math.nan, math.nan)
    below = int(np.sum(diffs <= 0))
    above = int(np.sum(diffs >= 0))
    p = min(1.0, 2.0 * (min(below, above) + 1) / (n_boot + 1))
    return Effect(name, a_val, b_val, b_val - a_val, d_lo, d_hi, ratio, r_lo, r_hi, p, n_a, n_b, alpha, n_boot)


def holm(p_values: Sequence[float], alpha: float = 0.05) -> list[bool]:
    """Holm's step-down: which hypotheses are rejected at family-wise error `alpha`, in input order.
    NaN p-values are never rejected."""
    p = np.asarray(p_values, dtype=float)
    m = p.size
    reject = [False] * m
    order = sorted((i for i in range(m) if np.isfinite(p[i])), key=lambda i: p[i])
    for rank, i in enumerate(order):
        if p[i] <= alpha / (m - rank):
            reject[i] = True
        else:
            break
    return reject


# --------------------------------------------------------------------------- helpers


def _finite(values: Sequence[float] | np.ndarray) -> np.ndarray:
    arr = np.asarray(values, dtype=float).ravel()
    return arr[np.isfinite(arr)]


def _quantiles(boots: np.ndarray, alpha: float) -> tuple[float, float]:
    boots = boots[np.isfinite(boots)]
    if boots.size == 0:
        return math.nan, math.nan
    lo, hi = np.quantile(boots, [alpha / 2.0, 1.0 - alpha / 2.0])
    return float(lo), float(hi)


def _resample_within(trials: list[np.ndarray], picks: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Concatenate a with-replacement resample of requests from each picked trial."""
    sizes = np.array([trials[j].size for j in picks])
    offsets = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    pooled = np.concatenate([trials[j] for j in picks])
    within = (rng.random(int(sizes.sum())) * np.repeat(sizes, sizes)).astype(np.int64)
    return pooled[np.repeat(offsets, sizes) + within]
