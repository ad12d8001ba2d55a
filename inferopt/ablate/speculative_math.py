"""Speculative decoding's arithmetic (SPEC K5, Leviathan et al. 2023): acceptance rate, tokens per round, speed-up.

Model: the draft proposes k tokens per round; each is accepted with probability a independently, given every
earlier one was; the first rejection ends the round; the target's verify forward always adds one token of its
own (the correction, or a bonus token when all k were accepted). Then

- expected tokens per round = 1 + a + a^2 + ... + a^k = (1 - a^(k+1)) / (1 - a);
- with c = (one draft forward) / (one plain target step), and the verify forward costing one target step,
  expected speed-up over plain decoding = (1 - a^(k+1)) / ((1 - a) (k c + 1)); a verify forward that costs v
  plain steps gives / (k c + v) instead.

`acceptance_rate` estimates a by maximum likelihood (it says how, and why it is not vLLM's accepted / drafted).

Deliberately not here: running anything (engines), and per-arm tables (`inferopt.ablate.speculative_arms`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass


def _check(acceptance_rate: float, k: int) -> None:
    if not 0.0 <= acceptance_rate <= 1.0:
        raise ValueError(f"acceptance_rate {acceptance_rate!r} is not in [0, 1]")
    if k < 0:
        raise ValueError(f"k (draft tokens per round) {k!r} is negative")


def expected_tokens_per_round(acceptance_rate: float, k: int) -> float:
    """1 + a + ... + a^k (= (1 - a^(k+1)) / (1 - a); k + 1 at a = 1)."""
    _check(acceptance_rate, k)
    a = acceptance_rate
    return float(k + 1) if a == 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)


def predicted_speedup(acceptance_rate: float, k: int, cost_ratio: float, verify_cost_ratio: float = 1.0) -> float:
    """Leviathan et al.'s expected walltime improvement: tokens per round / (k c + 1), c = draft forward / one
    plain target step. Below 1 means speculative decoding is slower than plain decoding. `verify_cost_ratio`
    (v, default 1 as in the paper) prices the (k+1)-token verify forward in plain steps: / (k c + v)."""
    if not cost_ratio >= 0.0:
        raise ValueError(f"cost_ratio {cost_ratio!r} must be >= 0 (draft forward time / target forward time)")
    if not verify_cost_ratio > 0.0:
        raise ValueError(f"verify_cost_ratio {verify_cost_ratio!r} must be > 0 (verify forward / plain step)")
    return expected_tokens_per_round(acceptance_rate, k) / (k * cost_ratio + verify_cost_ratio)


def acceptance_rate(drafted: Sequence[int], accepted: Sequence[int]) -> float:
    """MLE of the per-position acceptance probability from rounds; nan without any judged position.
    `drafted[i]` and `accepted[i]` are round i's proposed and accepted token counts.

    Every proposal position that was judged is one Bernoulli trial (accepted, or the round's rejection);
    positions after a rejection were never judged. So a = accepted / (accepted + rounds that ended in a
    rejection). This is NOT vLLM's "draft acceptance rate" accepted / drafted (`draft_acceptance_rate`), which
    counts unjudged positions as failures and is smaller than a whenever k > 1. With a estimated this way, the
    predicted and measured tokens per round differ only when acceptance is not independent across positions
    (easy stretches accept everything, hard ones nothing) — the gap the K5 check shows."""
    if len(drafted) != len(accepted):
        raise ValueError(f"{len(drafted)} drafted counts but {len(accepted)} accepted counts: one of each per round")
    total = sum(accepted)
    rejections = 0
    for d, a in zip(drafted, accepted, strict=False):
        if not 0 <= a <= d:
            raise ValueError(f"a round accepted {a} of {d} drafted tokens")
        rejections += a < d
    trials = total + rejections
    return total / trials if trials else math.nan


def measured_tokens_per_round(accepted: Sequence[int]) -> float:
    """Tokens a verify round released on average: 1 + mean accepted (before any stop at EOS / length)."""
    return 1.0 + sum(accepted) / len(accepted) if len(accepted) else math.nan


@dataclass(frozen=True)
class SpeculativeSummary:
    k: int
    rounds: int
    drafted_tokens: int
    accepted_tokens: int
    acceptance_rate: float  # per-position MLE: the a of the formulas
    draft_acceptance_rate: float  # accepted / drafted (vLLM's definition)
    predicted_tokens_per_round: float  # 1 + a + ... + a^k
    measured_tokens_per_round: float
    cost_ratio: float  # c: draft forward / target forward (nan when unmeasured)
    predicted_speedup: float  # tokens per round / (k c + 1) (nan without c)

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def summarize(
    k: int, drafted: Sequence[int], accepted: Sequence[int], cost_ratio: float = math.nan
) -> SpeculativeSummary:
    """Every K5 figure from the rounds of one arm (all its requests' rounds, pooled)."""
    a = acceptance_rate(drafted, accepted)
    pred = expected_tokens_per_round(a, k) if not math.isnan(a) else math.nan
    return SpeculativeSummary(
        k=k,
        rounds=len(accepted),
        drafted_tokens=int(sum(drafted)),
        accepted_tokens=int(sum(accepted)),
        acceptance_rate=a,
        draft_acceptance_rate=sum(accepted) / sum(drafted) if sum(drafted) else math.nan,
        predicted_tokens_per_round=pred,
        measured_tokens_per_round=measured_tokens_per_round(accepted),
        cost_ratio=cost_ratio,
        predicted_speedup=pred / (k * cost_ratio + 1.0)
        if not (math.isnan(pred) or math.isnan(cost_ratio))
        else math.nan,
    )


def summarize_counters(
    k: int,
    rounds: float,
    drafted_tokens: float,
    accepted_tokens: float,
    full_rounds: float,
    cost_ratio: float = math.nan,
) -> SpeculativeSummary:
    """The same figures from aggregate counters (a server's Prometheus counters): `full_rounds` are the rounds
    in which every proposed token was accepted (vLLM: accepted tokens at the last position), so the rounds
    that ended in a rejection are `rounds - full_rounds`."""
    rounds_i, acc, drafted = int(rounds), int(accepted_tokens), int(drafted_tokens)
    trials = acc + max(rounds_i - int(full_rounds), 0)
    a = acc / trials if trials else math.nan
    pred = expected_tokens_per_round(a, k) if not math.isnan(a) else math.nan
    return SpeculativeSummary(
        k=k,
        rounds=rounds_i,
        drafted_tokens=drafted,
        accepted_tokens=acc,
        acceptance_rate=a,
        draft_acceptance_rate=acc / drafted if drafted else math.nan,
        predicted_tokens_per_round=pred,
        measured_tokens_per_round=1.0 + acc / rounds_i if rounds_i else math.nan,
        cost_ratio=cost_ratio,
        predicted_speedup=pred / (k * cost_ratio + 1.0)
        if not (math.isnan(pred) or math.isnan(cost_ratio))
        else math.nan,
    )
