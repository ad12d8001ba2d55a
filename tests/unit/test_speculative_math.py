"""SPEC K5 arithmetic: tokens per round, Leviathan's speed-up, the acceptance-rate estimator, the vLLM counters."""

import math

import numpy as np
import pytest

from inferopt.ablate.speculative_math import (
    acceptance_rate,
    expected_tokens_per_round,
    measured_tokens_per_round,
    predicted_speedup,
    summarize,
    summarize_counters,
)


def test_tokens_per_round_is_the_geometric_sum():
    assert expected_tokens_per_round(0.8, 4) == pytest.approx(3.3616)  # SPEC K5's example: 1 + .8 + ... + .8^4
    for a in (0.0, 0.3, 0.5, 0.97):
        for k in (0, 1, 3, 8):
            assert expected_tokens_per_round(a, k) == pytest.approx(sum(a**i for i in range(k + 1)))
    assert expected_tokens_per_round(1.0, 5) == 6.0
    assert expected_tokens_per_round(0.0, 5) == 1.0


def test_predicted_speedup_leviathan():
    a, k, c = 0.8, 4, 0.05
    assert predicted_speedup(a, k, c) == pytest.approx((1 - a ** (k + 1)) / ((1 - a) * (k * c + 1)))
    assert predicted_speedup(a, k, 0.0) == pytest.approx(expected_tokens_per_round(a, k))  # a free draft
    assert predicted_speedup(0.0, 4, 0.5) < 1.0  # low acceptance: slower than plain decoding (K5)
    assert predicted_speedup(0.9, 4, 0.5) > predicted_speedup(0.5, 4, 0.5)
    assert predicted_speedup(a, k, c, verify_cost_ratio=2.0) == pytest.approx(
        expected_tokens_per_round(a, k) / (k * c + 2.0)
    )  # a verify forward priced at two plain steps
    with pytest.raises(ValueError, match="verify_cost_ratio"):
        predicted_speedup(a, k, c, verify_cost_ratio=0.0)
    with pytest.raises(ValueError, match="cost_ratio"):
        predicted_speedup(0.5, 4, -1.0)
    with pytest.raises(ValueError, match="acceptance_rate"):
        expected_tokens_per_round(1.2, 4)


def test_acceptance_mle_recovers_a_where_accepted_over_drafted_does_not():
    rng = np.random.default_rng(0)
    a_true, k = 0.6, 4
    drafted, accepted = [], []
    for _ in range(20000):
        n = 0
        while n < k and rng.random() < a_true:
            n += 1
        drafted.append(k)
        accepted.append(n)
    a = acceptance_rate(drafted, accepted)
    assert a == pytest.approx(a_true, abs=0.01)
    assert sum(accepted) / sum(drafted) < a_true - 0.15  # vLLM's accepted/drafted: not the a of the formula
    # with independent acceptance the prediction from a matches the measured tokens per round
    assert expected_tokens_per_round(a, k) == pytest.approx(measured_tokens_per_round(accepted), rel=0.01)


def test_acceptance_edge_cases():
    assert acceptance_rate([3, 3], [3, 3]) == 1.0  # no rejection at all
    assert acceptance_rate([3, 3], [0, 0]) == 0.0
    assert acceptance_rate([2], [2]) == 1.0  # a short round fully accepted is not a rejection
    assert math.isnan(acceptance_rate([], []))
    with pytest.raises(ValueError, match="accepted 4 of 3"):
        acceptance_rate([3], [4])
    with pytest.raises(ValueError, match="one of each per round"):
        acceptance_rate([3], [])


def test_correlated_acceptance_shows_a_gap():
    # all-or-nothing rounds (easy stretches accept everything, hard ones nothing): a = 0.9 predicts 3.44 tokens per
    # round, 3.25 were measured — the gap the K5 check exists to show
    drafted, accepted = [3] * 4, [3, 3, 3, 0]
    s = summarize(3, drafted, accepted, cost_ratio=0.2)
    assert s.acceptance_rate == pytest.approx(9 / 10)
    assert s.measured_tokens_per_round == pytest.approx(1 + 9 / 4)
    assert s.predicted_tokens_per_round == pytest.approx(expected_tokens_per_round(0.9, 3))
    assert s.predicted_speedup == pytest.approx(s.predicted_tokens_per_round / 1.6)
    assert s.predicted_tokens_per_round > s.measured_tokens_per_round
    assert s.draft_acceptance_rate == pytest.approx(0.75)


def test_counters_agree_with_rounds_when_every_round_drafts_k():
    drafted, accepted = [4] * 5, [4, 1, 0, 4, 2]
    from_rounds = summarize(4, drafted, accepted)
    full = sum(a == 4 for a in accepted)
    from_counters = summarize_counters(4, rounds=5, drafted_tokens=20, accepted_tokens=11, full_rounds=full)
    assert from_counters.acceptance_rate == pytest.approx(from_rounds.acceptance_rate)
    assert from_counters.measured_tokens_per_round == pytest.approx(from_rounds.measured_tokens_per_round)
    assert math.isnan(from_counters.predicted_speedup)  # no cost ratio: no prediction, not a made-up one
