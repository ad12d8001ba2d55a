"""Unpaired effects of run B over run A on one metric, for runs that did not replay the same workload (their
content hashes differ, so repeat r of one is no partner of repeat r of the other).

- A per-request statistic (p50/p99 of TTFT, TPOT, E2E): the requests of every trial pooled per run, a two-sided
  Mann-Whitney U test of the two samples, and a percentile-bootstrap CI of b/a resampling each run's requests
  independently. It treats requests as independent, which batching makes optimistic; the table says so.
- A per-trial value (output tokens/s, memory, CPU time): Welch's t-test over the trials, the CI of the
  difference from Welch-Satterthwaite, the ratio's CI on A's scale.

Rows have the columns of `inferopt.ablate.compare.compare_arms`. Deliberately not here: pairing (that is
`compare_arms`), and judging which direction is better (the caller's `lower_is_better`).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy import stats

from inferopt.ablate.compare import MetricSpec

MANN_WHITNEY = "unpaired: Mann-Whitney U on per-request values (requests treated as independent)"
WELCH = "unpaired: Welch t over trials"
NAN = math.nan


def _row(spec: MetricSpec, a: float, b: float, diff_ci: tuple[float, float], ratio_ci, p: float, n: tuple[int, int]):
    return {
        "metric": spec.name,
        "unit": spec.unit,
        "lower_is_better": spec.lower_is_better,
        "baseline_value": a,
        "arm_value": b,
        "diff": b - a,
        "diff_lo": diff_ci[0],
        "diff_hi": diff_ci[1],
        "ratio": b / a if a else NAN,
        "ratio_lo": ratio_ci[0],
        "ratio_hi": ratio_ci[1],
        "p_value": p,
        "n_baseline": n[0],
        "n_arm": n[1],
    }


def per_request_effect(
    a_trials: list[np.ndarray], b_trials: list[np.ndarray], spec: MetricSpec, alpha: float, n_boot: int, seed: int
) -> dict:
    """Mann-Whitney U over the pooled requests; bootstrap CI of the statistic's ratio (and difference)."""
    a = np.concatenate([t for t in a_trials if t.size] or [np.array([])])
    b = np.concatenate([t for t in b_trials if t.size] or [np.array([])])
    if a.size < 2 or b.size < 2:
        va = spec.stat(a) if a.size else NAN
        vb = spec.stat(b) if b.size else NAN
        return {**_row(spec, va, vb, (NAN, NAN), (NAN, NAN), NAN, (a.size, b.size)), "test": MANN_WHITNEY}
    va, vb = float(spec.stat(a)), float(spec.stat(b))
    p = float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)
    rng = np.random.default_rng(seed)
    row_stat = spec.row_stat or (lambda m: np.apply_along_axis(spec.stat, 1, m))
    boot_a = row_stat(a[rng.integers(0, a.size, size=(n_boot, a.size))])
    boot_b = row_stat(b[rng.integers(0, b.size, size=(n_boot, b.size))])
    q = (100 * alpha / 2, 100 * (1 - alpha / 2))
    d_lo, d_hi = np.percentile(boot_b - boot_a, q)
    with np.errstate(divide="ignore", invalid="ignore"):
        r_lo, r_hi = np.nanpercentile(boot_b / boot_a, q) if va > 0 else (NAN, NAN)
    row = _row(spec, va, vb, (float(d_lo), float(d_hi)), (float(r_lo), float(r_hi)), p, (a.size, b.size))
    return {**row, "test": MANN_WHITNEY}


def per_trial_effect(a_values: np.ndarray, b_values: np.ndarray, spec: MetricSpec, alpha: float) -> dict:
    """Welch's t over per-trial values; the mean per run as the value."""
    a, b = a_values[np.isfinite(a_values)], b_values[np.isfinite(b_values)]
    va = float(a.mean()) if a.size else NAN
    vb = float(b.mean()) if b.size else NAN
    diff_ci, ratio_ci, p = (NAN, NAN), (NAN, NAN), NAN
    if a.size >= 2 and b.size >= 2:
        sa, sb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
        se = math.sqrt(sa + sb)
        if se > 0:
            dof = (sa + sb) ** 2 / (sa**2 / (a.size - 1) + sb**2 / (b.size - 1))
            half = float(stats.t.ppf(1 - alpha / 2, dof)) * se
            diff_ci = (vb - va - half, vb - va + half)
            ratio_ci = (1 + diff_ci[0] / va, 1 + diff_ci[1] / va) if va else (NAN, NAN)
            with warnings.catch_warnings():  # nearly equal per-trial bytes: scipy warns of precision, p stays valid
                warnings.simplefilter("ignore", RuntimeWarning)
                p = float(stats.ttest_ind(b, a, equal_var=False).pvalue)
        elif vb == va:
            diff_ci, ratio_ci, p = (0.0, 0.0), (1.0, 1.0), 1.0
    return {**_row(spec, va, vb, diff_ci, ratio_ci, p, (a.size, b.size)), "test": WELCH}
