"""The search (issue 14, items 3, 4, 6) on the fake engine: a queue-bound system (batch size 1, arrivals above its
capacity) gets only batching/admission levers and a larger batch recommended beyond noise; a system already at its
best batch gets "no change helps"; an SLO nothing meets says so; bad search spaces and budgets are refused with the
fix; the decision rule, the budget split and the point sampler on synthetic points."""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
import yaml

from inferopt.choose.ranking import Duel, Point, between, change_size, decide, pareto
from inferopt.choose.sampler import allocate, select_points
from inferopt.choose.search import TuneBudget, custom_space, recommendation, recommendation_yaml, tune
from inferopt.config import (
    CandidateConfig,
    ConstantArrivals,
    FakeSystem,
    HardwareConfig,
    LengthConfig,
    SLOConfig,
    WorkloadConfig,
    load_config,
)
from inferopt.config.systems import BatchingKnobs
from inferopt.report.plots import frontier
from inferopt.validate.capacity import CapacityBudget, CapacityResult

ROOT = Path(__file__).resolve().parents[2]
HW = HardwareConfig(  # fixed roofs: no run-time micro-benchmark
    name="test-cpu",
    kind="cpu",
    peak_flops_per_s={"float32": 1e11},
    mem_bandwidth_bytes_per_s=1e10,
    memory_bytes=2**34,
    tdp_w=65,
    price_per_hour_usd=0.1,
)
SLO = SLOConfig(name="test", ttft_p99_ms=500, tpot_p95_ms=50)
CAPACITY = CapacityBudget(max_probes=6, rel_tol=0.15)  # 15 %: the brackets of a fast, coarse search
BATCHING_LEVERS = {"batch_size", "batch_wait_window", "admission_control", "continuous_batching"}


def fake(batch: int, prefill_base_ms: float, name: str) -> FakeSystem:
    """No jitter, one prefill sleep per batch and a cheap step per sequence: batching amortises the prefill."""
    return FakeSystem(
        name=name,
        context_ms=0.0,
        prefill_base_ms=prefill_base_ms,
        prefill_ms_per_token=0.0,
        decode_step_ms=2.0 if batch > 1 else 1.0,
        decode_ms_per_seq=0.2 if batch > 1 else 0.5,
        jitter_cv=0.0,
        batching=BatchingKnobs(max_batch_size=batch, batch_wait_ms=0.0),
    )


def workload(rate: float, n: int = 40) -> WorkloadConfig:
    lengths = LengthConfig(input_median=16, input_sigma=0, output_median=2, output_sigma=0)
    return WorkloadConfig(name="tune", num_requests=n, arrival=ConstantArrivals(rate_per_s=rate), lengths=lengths)


# ------------------------------------------------------------------------------------------ on the fake engine


@pytest.fixture(scope="module")
def queue_bound(tmp_path_factory):
    # batch size 1 at ~6.5 ms a request (+ the event loop's ~1 ms per sleep): ~110 req/s, arrivals at 160 req/s
    out = tmp_path_factory.mktemp("tune-queue")
    budget = TuneBudget(max_trials=4, capacity=CAPACITY)  # the baseline + one point per lever
    return out, tune(fake(1, 5.0, "fake-b1"), workload(160.0), SLO, HW, out, budget=budget, warmup_requests=0)


@pytest.mark.slow  # heavy (CI runs it); keeps `-m "not slow"` near 5 min
def test_a_queue_bound_system_gets_a_larger_batch_beyond_noise(queue_bound):
    _, r = queue_bound
    assert r.cause == "queueing"
    assert {p.remedy for p in r.proposals.proposals} <= BATCHING_LEVERS
    assert {p.remedy for p in r.points[1:]} == {"batch_size", "batch_wait_window", "admission_control"}
    # a winner only when the runner-up was also beaten head to head; else the leader is recommended as a tie
    assert r.decision == ("winner" if len(r.duels) == 2 and r.duels[1].confirmed else "tie"), r.message
    rec, base = r.recommended, r.baseline
    assert rec.field == "batching.max_batch_size" and rec.value > 1
    assert rec.capacity.lo_req_per_s > base.capacity.hi_req_per_s  # above the baseline's whole bracket
    first = r.duels[0]  # and head to head between the brackets, fresh seeds: it passes where the baseline fails
    assert first.leader == rec.label and first.rival == "baseline" and first.confirmed
    assert base.capacity.hi_req_per_s < first.rate_req_per_s < rec.capacity.lo_req_per_s
    assert "raises capacity under the SLO" in r.message and "recommendation:" in r.message


@pytest.mark.slow  # heavy (CI runs it); keeps `-m "not slow"` near 5 min
def test_every_point_tried_is_kept_in_a_tidy_table(queue_bound):
    out, r = queue_bound
    table = r.table()
    assert len(table) == len(r.points) == 4 and set(table["point"]) == {0, 1, 2, 3}
    assert table["capacity_req_per_s"].is_monotonic_decreasing  # sorted by capacity
    for col in ("proposal", "field", "value", "capacity_lo", "capacity_hi", "goodput_req_per_s", "ttft_ms_p99"):
        assert col in table
    assert table.loc[table["recommended"], "label"].tolist() == [r.recommended.label]
    rows = [json.loads(x) for x in (out / "points.jsonl").read_text().splitlines()]
    assert [row["point"] for row in rows] == [0, 1, 2, 3]  # written as each finished, the baseline first
    for p in r.points:  # and each capacity search's probes with their records
        assert len(p.capacity.probes) >= 2 and all(Path(q.records_path).is_file() for q in p.capacity.probes)
    assert r.untried and "the budget of 4 trials ran out" in r.untried[0] and "--budget 12" in r.untried[0]
    summary = json.loads((out / "tune.json").read_text())
    assert summary["decision"] == r.decision and summary["changes"] == {r.recommended.field: r.recommended.value}


@pytest.mark.slow  # heavy (CI runs it); keeps `-m "not slow"` near 5 min
def test_the_recommendation_loads_as_a_candidate(queue_bound):
    _, r = queue_bound
    cfg = load_config(r.recommendation_path, kind="candidate")
    assert isinstance(cfg, CandidateConfig) and cfg.changes == {"batching.max_batch_size": r.recommended.value}
    assert cfg.baseline == r.baseline.system and cfg.workload == workload(160.0) and cfg.slo == SLO
    assert cfg.candidate_system == r.recommended.system


def test_a_recommendation_holds_no_secret_and_says_where_they_go():
    vllm = load_config(ROOT / "configs/systems/vllm-tiny.yaml").model_copy(update={"extra_env": {"HF_TOKEN": "hf_x1"}})
    p = Point(1, "batch_size", "max_num_seqs", 32, 16, "queueing", False, "grid", vllm, cap(20.0, 22.0))
    data = recommendation(vllm, workload(10.0), SLO, HW, p, "a test")
    assert data["baseline"]["extra_env"] == {"HF_TOKEN": "***"} and data["changes"] == {"max_num_seqs": 32}
    text = recommendation_yaml(data)
    assert "hf_x1" not in text and "set baseline.extra_env.HF_TOKEN before running" in text.splitlines()[1]
    assert CandidateConfig.model_validate(yaml.safe_load(text)).candidate_system.max_num_seqs == 32


@pytest.mark.slow  # heavy (CI runs it); keeps `-m "not slow"` near 5 min
def test_the_frontier_marks_the_recommendation_and_the_slo(queue_bound):
    _, r = queue_bound
    table = r.table()
    assert table["pareto_ttft"].any() and table["pareto_per_user"].any()
    fig = frontier(table, r.slo_bounds_ms)
    labels = {t.get_text() for ax in fig.axes for t in ax.get_legend().get_texts()}
    assert {"baseline", "recommended", "SLO", "Pareto frontier", "batch_size"} <= labels
    assert fig.axes[0].lines[-1].get_xdata()[0] == SLO.ttft_p99_ms  # the TTFT bound, dashed
    plt.close(fig)


@pytest.mark.slow  # heavy (CI runs it); keeps `-m "not slow"` near 5 min
def test_a_system_at_its_best_batch_gets_no_change_helps(tmp_path):
    # batch size 16 already, ~40 ms a batch: ~400 req/s; smaller batches, waits and a bounded queue do not help
    budget = TuneBudget(max_trials=3, capacity=CAPACITY)  # a smaller batch and a wait window (budget: 3 trials)
    r = tune(fake(16, 40.0, "fake-b16"), workload(600.0), SLO, HW, tmp_path, budget=budget, warmup_requests=0)
    assert r.cause == "queueing" and [p.remedy for p in r.points[1:]] == ["batch_size", "batch_wait_window"]
    assert r.decision == "no_change_helps" and r.recommended is None, r.message
    assert r.message.startswith("no change helps") and "untried: " in r.message and "admission_control" in r.message
    assert not (tmp_path / "recommendation.yaml").exists()
    assert all("vs baseline" in line for line in r.evidence[-2:]) and len(r.table()) == 3


@pytest.mark.slow  # still run in CI; off the fast suite (~5 min): ~11 s here
def test_an_slo_no_configuration_meets_says_so(tmp_path):
    strict = SLOConfig(name="strict", ttft_p99_ms=3.0, tpot_p95_ms=50)  # the 5 ms prefill alone misses it
    budget = TuneBudget(max_trials=3, capacity=CAPACITY, confirm_repeats=1)
    r = tune(fake(1, 5.0, "fake-b1"), workload(400.0, n=30), strict, HW, tmp_path, budget=budget, warmup_requests=0)
    assert r.decision == "no_change_helps" and "no configuration tried" in r.message and "meets the SLO" in r.message
    assert all(p.capacity.status == "unmet" for p in r.points) and len(r.points) == 3  # nothing tried is lost


# ------------------------------------------------------------------------------------------ bad input


def test_bad_search_spaces_and_budgets_are_refused_before_anything_runs(tmp_path):
    system = fake(1, 5.0, "fake-b1")
    with pytest.raises(ValueError, match="empty search space"):
        custom_space(system, "batching.max_batch_size", [])
    with pytest.raises(ValueError, match="no field 'max_num_seqs'.*batching"):
        custom_space(system, "max_num_seqs", [8])  # a vLLM knob: the fake engine has none
    with pytest.raises(ValueError, match="not a lever the fake system declares"):
        custom_space(system, "seed", [1])
    assert custom_space(system, "batching.max_batch_size", [2, 4]).remedy == "batch_size"
    with pytest.raises(ValueError, match="max_trials=1.*none is left for a change"):
        TuneBudget(max_trials=1)
    with pytest.raises(ValueError, match="too small to bracket"):
        TuneBudget(capacity=CapacityBudget(max_probes=1))
    openai = load_config(ROOT / "configs/systems/openai-example.yaml")
    with pytest.raises(ValueError, match="empty search space: the openai engine declares no knob space"):
        tune(openai, workload(10.0), SLO, HW, tmp_path / "never")
    with pytest.raises(ValueError, match="control arm 'attention_kernel': not a lever"):
        tune(system, workload(10.0), SLO, HW, tmp_path / "never", budget=TuneBudget(control="attention_kernel"))
    assert not (tmp_path / "never").exists()  # refused before any file or run


def test_a_space_whose_lever_does_not_serve_the_cause_has_nothing_to_try(tmp_path):
    # a light load (no queue): admission control serves only queueing, so it is not proposed
    space = [custom_space(fake(1, 5.0, "b1"), "batching.max_queue", [4, 8])]
    r = tune(fake(1, 5.0, "b1"), workload(5.0, n=8), SLO, HW, tmp_path, spaces=space, warmup_requests=0)
    assert r.decision == "nothing_to_try" and not r.points and r.recommended is None
    assert r.message.startswith("nothing to try") and json.loads((tmp_path / "tune.json").read_text())["decision"]


# ------------------------------------------------------------------------------------------ the decision rule


def cap(lo: float | None, hi: float | None, status: str = "bracketed") -> CapacityResult:
    return CapacityResult(status, lo if lo is not None else math.nan, lo, hi, status, ())


def point(i: int, lo: float | None, hi: float | None, **kw) -> Point:
    kw = {"remedy": "batch_size", "field": "batching.max_batch_size", "control": False, **kw}
    return Point(i, kw["remedy"], kw["field"], i + 1, 1, "queueing", kw["control"], "grid", FakeSystem(), cap(lo, hi))


def duel_that(leader_passes: bool, rival_passes: bool, log: list):
    def duel(leader: Point, rival: Point, rate: float) -> Duel:
        log.append((leader.index, rival.index, rate))
        return Duel(leader.label, rival.label, rate, (leader_passes,) * 2, (rival_passes,) * 2)

    return duel


def test_a_winner_clears_the_baseline_and_the_runner_up_beyond_noise():
    base, log = point(0, 100, 110), []
    pts = [base, point(1, 200, 220), point(2, 400, 440), point(3, 105, 115)]
    r = decide(base, pts, duel_that(True, False, log))
    assert r.decision == "winner" and r.recommended.index == 2
    assert log == [(2, 0, pytest.approx(math.sqrt(110 * 400))), (2, 1, pytest.approx(math.sqrt(220 * 400)))]
    assert between(pts[0], pts[2]) == pytest.approx(math.sqrt(110 * 400))


def test_overlapping_brackets_with_the_runner_up_are_a_tie():
    base, log = point(0, 100, 110), []
    pts = [base, point(1, 200, 220), point(2, 210, 230), point(3, 90, 100)]
    r = decide(base, pts, duel_that(True, False, log))
    assert r.decision == "tie" and [p.index for p in r.tied] == [2, 1]
    assert "not beyond noise vs batching.max_batch_size=2" in r.message
    # the tie goes to the smaller change (2 from 1, not 3), once its own gain over the baseline holds
    assert r.recommended.index == 1 and log[-1][:2] == (1, 0) and "a smaller change" in r.message


def test_a_tie_between_two_sizes_of_one_lever_goes_to_the_smaller_change_whichever_led():
    # the planted fake KV case, full search vs pruned: 768 led 384 by one bracket step once, tied the next time
    base = point(0, 20, 22.5, remedy="kv_budget", field="kv_cache_tokens")
    for hi_768 in (50, 45):
        p384 = Point(
            1, "kv_budget", "kv_cache_tokens", 384, 192, "kv_capacity", False, "grid", FakeSystem(), cap(45, 50)
        )
        p768 = Point(
            2,
            "kv_budget",
            "kv_cache_tokens",
            768,
            192,
            "kv_capacity",
            False,
            "grid",
            FakeSystem(),
            cap(hi_768, hi_768 + 5),
        )
        r = decide(base, [base, p384, p768], duel_that(True, False, []))
        assert r.decision == "tie" and r.recommended.value == 384, r.message
    assert change_size(p384) == pytest.approx(0.5) and change_size(p768) == pytest.approx(0.75)
    assert change_size(base) == 0.0


def test_a_tie_prefers_a_lever_that_leaves_outputs_unchanged_once_its_own_gain_holds_head_to_head():
    # the planted vLLM KV case, as measured twice: fp8 KV and 4x KV bytes tie, each leading once by its point
    base = point(0, 0.66, 0.75, remedy="kv_budget", field="kv_cache_memory_bytes")
    fp8 = point(1, 4.5, 6.0, remedy="kv_quantization", field="kv_cache_dtype")  # can change outputs
    more = point(2, 3.0, 4.5, remedy="kv_budget", field="kv_cache_memory_bytes")  # cannot
    log: list = []
    r = decide(base, [base, fp8, more], duel_that(True, False, log))
    assert r.decision == "tie" and r.recommended.index == 2 and [p.index for p in r.tied] == [1, 2]
    assert log[-1][:2] == (2, 0)  # its own gain over the baseline, head to head
    assert "leaves the model's outputs unchanged" in r.message
    lossless_lost: list = []

    def duel(leader: Point, rival: Point, rate: float) -> Duel:  # the lossless point's own duel is not won
        lossless_lost.append(leader.index)
        won = leader.index == 1
        return Duel(leader.label, rival.label, rate, (won, won), (False, False))

    r = decide(base, [base, fp8, more], duel)
    assert r.decision == "tie" and r.recommended.index == 1 and lossless_lost == [1, 2]
    assert "broken by the point estimate of capacity" in r.message and "not confirmed" in r.message


def test_within_the_bracket_or_unconfirmed_head_to_head_is_no_change():
    base = point(0, 100, 110)
    assert decide(base, [base, point(1, 105, 115)], duel_that(True, False, [])).decision == "no_change_helps"
    r = decide(base, [base, point(1, 200, 220)], duel_that(True, True, []))  # the baseline passed there too
    assert r.decision == "no_change_helps" and "not confirmed" in r.message
    unbounded = point(0, 400, None, status="unbracketed")  # a baseline never seen failing cannot be beaten
    r = decide(unbounded, [unbounded, point(1, 800, None)], duel_that(True, False, []))
    assert r.decision == "no_change_helps" and "not bracketed" in r.message


def test_a_control_arm_never_wins_and_a_gain_of_one_is_a_warning():
    base = point(0, 100, 110)
    ctl = point(1, 400, 440, remedy="attention_kernel", field="attn_implementation", control=True)
    r = decide(base, [base, ctl], duel_that(True, False, []))
    assert r.decision == "no_change_helps" and "WARNING: the control arm attn_implementation=2" in r.message
    quiet = point(1, 100, 110, remedy="attention_kernel", field="attn_implementation", control=True)
    assert "WARNING" not in decide(base, [base, quiet], duel_that(True, False, [])).message


# ------------------------------------------------------------------------------------------ budget and sampler


def test_the_budget_goes_round_robin_over_the_levers():
    assert allocate([4, 3, 4], 3) == [1, 1, 1]
    assert allocate([4, 3, 4], 5) == [2, 2, 1]
    assert allocate([1, 3], 10) == [1, 3]
    assert allocate([4, 4], 0) == [0, 0]


def test_the_sampler_tries_k_distinct_values_seeded_and_all_on_a_grid():
    def run(values, k, seed):
        seen = []

        def evaluate(i, how):
            seen.append((i, how))
            return point(len(seen), 100.0 * (i + 1), 110.0 * (i + 1))

        select_points(values, k, evaluate, seed)
        return seen

    assert run((2, 4, 8, 16), 4, 0) == [(0, "grid"), (1, "grid"), (2, "grid"), (3, "grid")]
    picked = run((2, 4, 8, 16), 2, 0)
    assert len(picked) == 2 and len({i for i, _ in picked}) == 2 and {h for _, h in picked} <= {"tpe", "grid"}
    assert run((2, 4, 8, 16), 2, 0) == picked  # seeded
    assert len(run(("quanto-int4", "hqq-int4", "hqq-int8"), 2, 1)) == 2  # categorical values
    assert run((2, 4), 0, 0) == []


def test_pareto_keeps_the_undominated_points():
    import pandas as pd

    x, y = pd.Series([10.0, 20.0, 15.0, math.nan]), pd.Series([100.0, 200.0, 90.0, 300.0])
    assert pareto(x, y, x_lower_is_better=True).tolist() == [True, True, False, False]
    assert pareto(x, y, x_lower_is_better=False).tolist() == [False, True, False, False]
