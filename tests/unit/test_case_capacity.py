"""The seed's case decided by capacity under the interactive SLO (issue 14 item 5): the mixed load scaled as a
whole, the SLO judging the interactive tenant only, and the decision — a winner beyond noise, a tie broken by
cost (said so), nothing chosen when no strategy meets the SLO — on planted brackets and on the fake engine."""

from __future__ import annotations

import math

import pytest
from test_case_study import _wl, fake_case

from inferopt.choose.case import CaseCapacity, case_capacity, decide_by_capacity
from inferopt.choose.ranking import Duel
from inferopt.config import FakeSystem, SLOConfig, WorkloadConfig
from inferopt.config.pooled import Pool, PooledSystem
from inferopt.validate.capacity import CapacityBudget, Probe, capacity, conclude, load_table, workload_rate_per_s
from inferopt.workload.mixed import MixedLoad

SLO = SLOConfig(ttft_p99_ms=300, tpot_p95_ms=50)


def cap(name: str, lo: float | None, hi: float | None, goodput: float | None = None, price: float = 1.0):
    probes = []
    if lo is not None:
        probes.append(Probe(0, "start", lo, True, (), "", goodput_req_per_s=goodput if goodput else lo))
    if hi is not None:
        probes.append(Probe(1, "double", hi, False, (), ""))
    return CaseCapacity(name, conclude(probes, [], CapacityBudget(rel_tol=0.5), SLO), price)


def duel_says(confirmed: bool, calls: list):
    def duel(leader: str, rival: str, rate: float) -> Duel:
        calls.append((leader, rival, rate))
        return Duel(leader, rival, rate, (True, True), (False, False) if confirmed else (True, False))

    return duel


def test_the_leader_wins_only_when_its_bracket_clears_the_runner_up_and_the_duel_confirms() -> None:
    calls: list = []
    caps = [cap("slow", 2.0, 2.5), cap("fast", 4.0, 5.0), cap("none", None, 0.5)]
    d = decide_by_capacity(caps, duel_says(True, calls))
    assert (d.decision, d.chosen) == ("winner", "fast")
    assert calls == [("fast", "slow", pytest.approx(math.sqrt(2.5 * 4.0)))]  # between the two brackets
    assert "beyond noise" in d.message and "passed 2/2" in d.message


def test_an_unconfirmed_duel_is_a_tie_broken_by_cost_and_the_message_says_so() -> None:
    calls: list = []
    # fast clears slow's bracket but loses the duel; fast's deployment costs 3x per hour at 1.6x the goodput
    caps = [cap("fast", 4.0, 5.0, goodput=4.0, price=3.0), cap("slow", 2.0, 2.5, goodput=2.5, price=1.0)]
    d = decide_by_capacity(caps, duel_says(False, calls))
    assert (d.decision, d.chosen, d.tied) == ("tie", "slow", ("fast", "slow"))
    assert "not confirmed" in d.message and "broken by cost per 1000 requests" in d.message
    assert caps[1].cost_per_1k_ok_usd < caps[0].cost_per_1k_ok_usd


def test_overlapping_brackets_tie_without_a_duel_and_equal_prices_pick_the_higher_goodput() -> None:
    calls: list = []
    caps = [cap("a", 4.0, 5.0, goodput=3.9), cap("b", 4.5, 5.5, goodput=4.4), cap("c", 1.0, 1.2)]
    d = decide_by_capacity(caps, duel_says(True, calls))
    assert calls == [] and (d.decision, d.chosen) == ("tie", "b") and set(d.tied) == {"a", "b"}
    assert "brackets overlap" in d.message


def repeated(name: str, passes: list[float], fails: list[float], repeat_fails_at: float) -> CaseCapacity:
    """A search whose boundary repeat failed (the case's second run on vLLM: pooled passed 14.7 once)."""
    probes = [Probe(i, "double", r, True, (), "", goodput_req_per_s=r) for i, r in enumerate(passes)]
    probes += [Probe(len(probes) + i, "bisect", r, False, (), "") for i, r in enumerate(fails)]
    again = [Probe(len(probes), "repeat", repeat_fails_at, False, (), "")]
    return CaseCapacity(name, conclude(probes, again, CapacityBudget(rel_tol=0.5), SLO), 1.0)


def test_a_failed_boundary_repeat_leans_on_the_next_pass_below_it_not_on_a_tie() -> None:
    calls: list = []
    leader = repeated("pooled", [3.675, 7.35, 14.7], [16.8], repeat_fails_at=14.7)
    assert leader.capacity.lo_req_per_s == 14.7 and leader.capacity.sure_lo_req_per_s == 7.35
    d = decide_by_capacity([leader, cap("static", 1.18, 1.31)], duel_says(True, calls))
    assert (d.decision, d.chosen) == ("winner", "pooled")
    assert calls == [("pooled", "static", pytest.approx(math.sqrt(1.31 * 7.35)))]  # a rate it held every time
    calls.clear()
    lone = repeated("pooled", [14.7], [16.8], repeat_fails_at=14.7)  # nothing below the failed repeat held
    d = decide_by_capacity([lone, cap("static", 1.18, 1.31, goodput=1.0)], duel_says(True, calls))
    assert calls == [] and d.decision == "tie" and "boundary repeat failed" in d.message


def test_no_strategy_meeting_the_slo_chooses_nothing_and_names_each_search() -> None:
    d = decide_by_capacity([cap("a", None, 1.0), cap("b", None, 2.0)], duel_says(True, []))
    assert (d.decision, d.chosen) == ("none_meets", None)
    assert "a: no rate meets the SLO" in d.message and "b: no rate meets the SLO" in d.message


def _mixed(judged: tuple[str, ...]) -> MixedLoad:
    chat = WorkloadConfig.model_validate(_wl("w-chat", "chat", 12, 40.0, 16, 4))
    jobs = WorkloadConfig.model_validate(_wl("w-jobs", "jobs", 4, 10.0, 64, 12))
    return MixedLoad((chat, jobs), judged)


def test_a_mixed_load_scales_every_tenant_by_one_factor_and_keeps_the_mix() -> None:
    load = _mixed(("chat",))
    assert workload_rate_per_s(load) == 50.0 and load.num_requests == 16
    table = load_table(load, 100.0, 50, seed=load.seed)
    counts = table["tenant"].value_counts().to_dict()
    assert counts == {"chat": 40, "jobs": 10}
    for tenant, rate in (("chat", 80.0), ("jobs", 20.0)):
        t = table[table["tenant"] == tenant]["arrival_offset_s"]
        assert (len(t) - 1) / (t.max() - t.min()) == pytest.approx(rate, rel=1e-6)  # each at its share
    assert table["request_id"].is_unique and table["arrival_offset_s"].is_monotonic_increasing
    again = load_table(load.reseeded(load.seed + 7), 100.0, 50, seed=load.seed + 7)
    assert not again["arrival_offset_s"].equals(table["arrival_offset_s"])  # a fresh draw
    with pytest.raises(ValueError, match="judged tenants"):
        MixedLoad(load.parts, ("nobody",))


def test_the_slo_judges_only_the_interactive_tenant_of_a_mixed_load(tmp_path) -> None:
    pooled = PooledSystem(
        pools=(
            Pool(name="i", tenants=("chat",), system=FakeSystem(decode_step_ms=0.5)),
            Pool(name="o", tenants=("jobs",), system=FakeSystem(decode_step_ms=80.0)),  # TPOT ~80 ms > 50
        )
    )
    budget = CapacityBudget(start_req_per_s=10.0, max_probes=1)
    judged = capacity(pooled, _mixed(("chat",)), SLO, tmp_path / "chat", budget=budget)
    everyone = capacity(pooled, _mixed(("chat", "jobs")), SLO, tmp_path / "all", budget=budget)
    assert judged.probes[0].passed, judged.probes[0].reasons
    assert not everyone.probes[0].passed and any("TPOT p95" in r and "FAIL" in r for r in everyone.probes[0].reasons)
    assert judged.probes[0].requests == everyone.probes[0].requests == 16  # every tenant served and counted


@pytest.mark.slow  # still run in CI; off the fast suite (~5 min): ~16 s here
def test_the_fake_case_ranks_the_faster_strategy_first_beyond_noise(tmp_path) -> None:
    fast = {"engine": "fake", "decode_step_ms": 0.5, "batching": {"max_batch_size": 8}}
    slow = {"engine": "fake", "decode_step_ms": 4.0, "batching": {"max_batch_size": 1}}
    case = fake_case(slow={"baseline": slow}, fast={"baseline": fast})
    budget = CapacityBudget(max_probes=4, rel_tol=0.3, requests_per_probe=24)
    caps, d = case_capacity(case, tmp_path, budget=budget, duel_repeats=2)
    by = {c.strategy: c for c in caps}
    assert by["fast"].capacity.lo_req_per_s > by["slow"].capacity.hi_req_per_s, [c.text() for c in caps]
    assert (d.decision, d.chosen) == ("winner", "fast"), d.message
    assert (tmp_path / "slow" / "capacity" / "probes.jsonl").exists() and (tmp_path / "duels").is_dir()
