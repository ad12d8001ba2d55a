import math

import numpy as np
import pytest

from inferopt.analysis.stats import bootstrap_ci, holm, paired_bootstrap_diff, percentile, percentile_fn


def test_percentile_is_nan_safe():
    assert percentile([1.0, math.nan, 3.0], 50) == 2.0
    assert math.isnan(percentile([math.nan], 99)) and math.isnan(percentile([], 50))
    assert percentile_fn(99).__name__ == "p99"


def test_bootstrap_ci_covers_the_truth_at_about_the_nominal_rate():
    rng = np.random.default_rng(0)
    sims, hits = 150, 0
    for i in range(sims):
        ci = bootstrap_ci(rng.normal(10.0, 2.0, size=40), np.mean, n_boot=300, alpha=0.1, seed=i)
        hits += ci.contains(10.0)
    assert 0.8 <= hits / sims <= 0.97  # nominal 0.90 (percentile bootstrap runs a little narrow at n=40)


def test_paired_diff_ci_covers_the_true_difference():
    rng = np.random.default_rng(1)
    sims, hits = 60, 0
    for i in range(sims):
        a = [rng.exponential(100.0, 60) for _ in range(3)]
        b = [rng.exponential(110.0, 60) for _ in range(3)]
        eff = paired_bootstrap_diff(a, b, np.mean, n_boot=200, alpha=0.1, seed=i)
        hits += eff.diff_lo <= 10.0 <= eff.diff_hi
    assert 0.75 <= hits / sims <= 1.0  # nominal 0.90


def test_identical_arms_straddle_zero():
    rng = np.random.default_rng(2)
    trials = [rng.lognormal(4.0, 0.5, 200) for _ in range(3)]
    eff = paired_bootstrap_diff(trials, [t.copy() for t in trials], percentile_fn(50), n_boot=500, seed=0)
    assert eff.diff == 0.0 and eff.diff_lo < 0.0 < eff.diff_hi
    assert eff.ratio_lo < 1.0 < eff.ratio_hi
    assert eff.p_value > 0.5 and not eff.significant
    assert eff.metric == "p50" and eff.n_a == eff.n_b == 600


@pytest.mark.parametrize("stat", [np.mean, percentile_fn(50)])
def test_planted_twenty_percent_shift_is_detected(stat):
    rng = np.random.default_rng(3)
    a = [rng.lognormal(4.0, 0.5, 200) for _ in range(3)]
    b = [1.2 * rng.lognormal(4.0, 0.5, 200) for _ in range(3)]
    eff = paired_bootstrap_diff(a, b, stat, n_boot=1000, seed=0)
    assert eff.diff_lo > 0 and eff.p_value < 0.01 and eff.significant
    assert eff.ratio_lo < 1.2 < eff.ratio_hi
    assert eff.ratio == pytest.approx(eff.b_value / eff.a_value)


def test_unequal_trial_counts_and_nans():
    a = [np.array([1.0, 2.0, math.nan]), np.array([1.5, 2.5])]
    b = [np.array([3.0, 4.0]), np.array([3.5]), np.array([4.5, math.nan])]
    eff = paired_bootstrap_diff(a, b, np.mean, n_boot=200, seed=0, metric="ttft_ms_mean")
    assert eff.metric == "ttft_ms_mean" and eff.n_a == 4 and eff.n_b == 4 and eff.diff > 0
    empty = paired_bootstrap_diff([[]], b, np.mean, n_boot=10)
    assert math.isnan(empty.diff)


def test_holm_step_down():
    assert holm([0.01, 0.04, 0.03, 0.005], alpha=0.05) == [True, False, False, True]
    assert holm([0.01, 0.02], alpha=0.05) == [True, True]
    assert holm([math.nan, 0.001]) == [False, True]
    assert holm([]) == []
