"""The sequential head-to-head (issue 14): its rule, its stated false-positive rate checked by enumerating
every outcome, and the seeds it runs."""

from __future__ import annotations

import itertools

import pytest

from inferopt.choose.duels import sequential_duel
from inferopt.choose.ranking import Duel, duel_false_positive_rate


def duel(lead: str, rival: str, n: int = 2, m: int = 2) -> Duel:
    as_bools = lambda s: tuple(c == "P" for c in s)  # noqa: E731
    return Duel("a", "b", 1.0, as_bools(lead), as_bools(rival), first_stage=n, extra=m)


@pytest.mark.parametrize(
    ("lead", "rival", "confirmed"),
    [
        ("PP", "FF", True),  # no miss
        ("PF", "FF", False),  # one miss, the extra stage not run: not settled, not confirmed
        ("PFPP", "FFFF", True),  # one miss, then none in two more
        ("PPPP", "PFFF", True),  # the rival's one pass is the miss
        ("PFPF", "FFFF", False),  # a miss in the extra stage
        ("PFP", "FFF", False),  # an extra stage cut short
        ("F", "P", False),  # two misses on the first seed: stopped
        ("FF", "FF", False),
    ],
)
def test_a_duel_confirms_only_on_no_miss_or_one_miss_then_a_clean_second_stage(lead, rival, confirmed) -> None:
    assert duel(lead, rival).confirmed is confirmed


def _confirm_chance(p: float, n: int, m: int) -> float:
    """P(confirmed) for two equal points sharing pass probability p, by enumerating every seed outcome."""
    total = 0.0
    for outcome in itertools.product((True, False), repeat=2 * (n + m)):
        lead, rival = outcome[0::2], outcome[1::2]
        first_miss = sum(not x for x in lead[:n]) + sum(rival[:n])
        used = n if first_miss != 1 else n + m  # the seeds the rule would have run (extra only after one miss)
        d = Duel("a", "b", 1.0, lead[:used], rival[:used], first_stage=n, extra=m)
        if d.confirmed:
            passes = sum(lead) + sum(rival)
            total += p**passes * (1 - p) ** (2 * (n + m) - passes)
    return total


@pytest.mark.parametrize(("n", "m"), [(2, 2), (2, 0), (3, 2), (1, 1)])
def test_the_stated_false_positive_rate_bounds_every_common_pass_probability(n: int, m: int) -> None:
    bound = duel_false_positive_rate(n, m)
    chances = [_confirm_chance(p / 20, n, m) for p in range(21)]
    assert max(chances) <= bound + 1e-9
    assert max(chances) >= bound - 2e-3  # and it is the bound, not a loose one
    if m == 0:
        assert bound == pytest.approx(0.25**n)  # the fixed duel: (1/4)^n at p = 1/2


def test_the_second_stage_costs_little_false_positive_rate_and_buys_power() -> None:
    assert duel_false_positive_rate(2, 2) < 0.08  # was 1/16 for the fixed two-seed duel
    real = 0.8  # a real gain whose leader passes 80 % of seeds at the duel's rate; the rival never
    fixed = real**2
    seq = fixed + 2 * real * (1 - real) * real**2
    assert seq > fixed + 0.15


def scripted(outcomes: list[tuple[bool, bool]]):
    seen: list[int] = []

    def judge(k: int) -> tuple[bool, bool]:
        seen.append(k)
        return outcomes[k]

    return judge, seen


def test_a_clean_first_stage_runs_no_more_seeds() -> None:
    judge, seen = scripted([(True, False)] * 4)
    assert sequential_duel(judge, 2, 2) == ([True, True], [False, False]) and seen == [0, 1]


def test_one_miss_runs_the_extra_seeds_on_new_seed_numbers() -> None:
    judge, seen = scripted([(True, False), (False, False), (True, False), (True, False)])
    lead, rival = sequential_duel(judge, 2, 2)
    assert seen == [0, 1, 2, 3] and lead == [True, False, True, True] and rival == [False] * 4
    assert Duel("a", "b", 1.0, tuple(lead), tuple(rival), first_stage=2, extra=2).confirmed


def test_a_second_miss_stops_the_duel_at_once() -> None:
    judge, seen = scripted([(False, True), (True, False), (True, False), (True, False)])
    assert sequential_duel(judge, 2, 2) == ([False], [True]) and seen == [0]
    judge, seen = scripted([(False, False), (True, False), (False, False), (True, False)])
    assert sequential_duel(judge, 2, 2)[0] == [False, True, False] and seen == [0, 1, 2]


def test_no_extra_stage_is_the_fixed_duel() -> None:
    judge, seen = scripted([(True, False), (False, False), (True, False)])
    lead, rival = sequential_duel(judge, 2, 0)
    assert seen == [0, 1] and not Duel("a", "b", 1.0, tuple(lead), tuple(rival), first_stage=2).confirmed


def test_the_sentence_says_the_extra_seeds_and_the_rate() -> None:
    s = duel("PFPP", "FFFF").sentence()
    assert "4 fresh seeds each; one miss in the first 2, so 2 more" in s and "passed 3/4" in s
    assert "not confirmed" not in s and "7.8%" in s
