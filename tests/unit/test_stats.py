import math

import numpy as np
import pytest

from inferopt.stats.inference import (
    bootstrap_ci,
    holm,
    paired_bootstrap_diff,
    percentile,
    percentile_fn,
    quantile,
)


def test_percentile_is_nan_safe():
    assert percentile([1.0, math.nan, 3.0], 50) == 2.0
    assert math.isnan(percentile([math.nan], 99)) and math.isnan(percentile([], 50))
    assert percentile_fn(99).__name__ == "p99"


def test_quantile_and_percentile_are_numpys_on_the_finite_values():
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 100):
        v = rng.lognormal(3.0, 1.0, n)
        with_gaps = np.concatenate([v, [math.nan, math.inf]])
        for q in (0.5, 0.95, 0.99, 1 / 3):
            assert quantile(with_gaps, q) == float(np.quantile(v, q))
            assert percentile(with_gaps, 100 * q) == float(np.percentile(v, 100 * q))
    assert math.isnan(quantile([], 0.5)) and math.isnan(quantile([math.nan], 0.99))


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


# --------------------------------------------------------------------------- repeat-level test, interactions, rows


def test_quantile_rows_matches_numpy_on_ragged_rows():
    from inferopt.stats.inference import quantile_rows, sum_rows

    rng = np.random.default_rng(5)
    m = rng.normal(size=(40, 25))
    m[rng.random(m.shape) < 0.3] = math.nan
    for q in (0.0, 0.5, 0.95, 0.99, 1.0):
        ref = [np.quantile(r[np.isfinite(r)], q) for r in m]
        assert np.allclose(quantile_rows(q)(m), ref)
    assert np.allclose(sum_rows(m), [np.nansum(r) for r in m])


def test_vectorised_bootstrap_agrees_with_the_loop():
    from inferopt.stats.inference import quantile_rows

    rng = np.random.default_rng(6)
    a = [rng.lognormal(1, 0.3, rng.integers(30, 41)) for _ in range(5)]
    b = [1.1 * rng.lognormal(1, 0.3, 40) for _ in range(5)]
    loop = paired_bootstrap_diff(a, b, percentile_fn(50), n_boot=3000, seed=1)
    fast = paired_bootstrap_diff(a, b, percentile_fn(50), n_boot=3000, seed=1, row_stat=quantile_rows(0.5))
    assert fast.diff == loop.diff and fast.ratio == loop.ratio
    assert fast.ratio_lo == pytest.approx(loop.ratio_lo, abs=0.02) and fast.ratio_hi == pytest.approx(
        loop.ratio_hi, abs=0.02
    )


def test_repeat_test_is_calibrated_when_trials_carry_their_own_offset():
    """Each trial shifted by its own random factor (a noisy neighbour for the whole trial): the repeat-level
    t-test keeps its false-alarm rate near nominal where a request-level bootstrap would not."""
    from inferopt.stats.inference import paired_repeat_test

    rng = np.random.default_rng(7)
    sims, alarms = 300, 0
    for _ in range(sims):
        a = [rng.lognormal(1, 0.3, 40) * rng.lognormal(0, 0.05) for _ in range(4)]
        b = [rng.lognormal(1, 0.3, 40) * rng.lognormal(0, 0.05) for _ in range(4)]
        alarms += paired_repeat_test(a, b, percentile_fn(50)).significant
    assert alarms / sims <= 0.09  # nominal 0.05


def test_repeat_test_detects_and_its_intervals_agree():
    from inferopt.stats.inference import paired_repeat_test

    rng = np.random.default_rng(8)
    a = [rng.lognormal(1, 0.3, 60) for _ in range(5)]
    b = [1.3 * rng.lognormal(1, 0.3, 60) for _ in range(5)]
    eff = paired_repeat_test(a, b, percentile_fn(50), metric="tpot_ms_p50")
    assert eff.significant and eff.p_value < 0.01 and eff.ratio_lo < 1.3 < eff.ratio_hi
    assert eff.diff == pytest.approx(eff.a_value * (eff.ratio - 1))
    assert (eff.diff_lo > 0) == (eff.ratio_lo > 1) and eff.n_a == 300 and eff.metric == "tpot_ms_p50"
    one = paired_repeat_test(a[:1], b[:1], percentile_fn(50))
    assert math.isnan(one.p_value) and not one.significant  # one repeat: no test


def test_interaction_repeat_test_separates_additive_from_multiplicative():
    from inferopt.ablate.interaction import interaction_repeat_test

    rng = np.random.default_rng(9)

    def trials(scale):
        return [scale * rng.lognormal(1, 0.2, 50) * rng.lognormal(0, 0.02) for _ in range(4)]

    base = trials(1.0)
    multiplicative = interaction_repeat_test(base, [trials(0.6), trials(0.5)], trials(0.3), percentile_fn(50))
    assert not multiplicative.significant and multiplicative.interaction == pytest.approx(1.0, abs=0.08)
    overlapping = interaction_repeat_test(base, [trials(0.6), trials(0.5)], trials(0.5), percentile_fn(50))
    assert overlapping.significant and overlapping.lo > 1.0  # together they do less than the product
    assert overlapping.predicted_ratio == pytest.approx(0.3, rel=0.1)
    assert overlapping.interaction == pytest.approx(overlapping.observed_ratio / overlapping.predicted_ratio)
