"""Measurement that counts every failure (SPEC M5): goodput and SLO attainment per run, slice and tenant with
failures in the denominator, and the inter-token latency distribution per request and per run (a chunk that
carries several tokens is a burst: zero gaps, then one long one)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from inferopt.config import SLOConfig
from inferopt.measure.phases import phase_table
from inferopt.measure.slices import headline, summarize
from inferopt.measure.slo import RequestSLO
from inferopt.records import RequestRecord, itl_stats_ms, pooled_itl_ms


def _rec(i: int, tenant: str, tokens_s: list[float], outcome: str = "ok", chunks: list[int] | None = None):
    return RequestRecord(
        request_id=f"r{i}",
        outcome=outcome,
        tenant=tenant,
        input_len=8,
        output_len=len(tokens_s),
        intended_s=0.0,
        sent_s=0.0,
        client_token_s=tokens_s,
        client_chunk_s=tokens_s,
        client_chunk_tokens=chunks or [1] * len(tokens_s),
        client_done_s=tokens_s[-1] if tokens_s else 1.0,
    )


def test_itl_per_request_shows_a_burst() -> None:
    steady = itl_stats_ms([0.0, 0.01, 0.02, 0.03, 0.04], [1] * 5)
    assert steady["itl_ms_p50"] == pytest.approx(10.0) and steady["itl_ms_max"] == pytest.approx(10.0)
    # speculative-style: 3 tokens in one chunk, then a 40 ms wait
    burst = itl_stats_ms([0.0, 0.04, 0.04, 0.04, 0.08], [1, 3, 1])
    assert burst["itl_ms_p50"] == pytest.approx(20.0) and burst["itl_ms_max"] == pytest.approx(40.0)  # 40, 0, 0, 40
    assert burst["max_chunk_tokens"] == 3
    assert np.isnan(itl_stats_ms([0.0], [1])["itl_ms_p50"])


def test_goodput_and_attainment_count_failures_per_run_slice_and_tenant() -> None:
    recs = [_rec(i, "a", [0.1, 0.11, 0.12]) for i in range(6)]  # TTFT 100 ms, TPOT 10 ms: within the SLO
    recs += [_rec(10 + i, "b", [0.9, 0.91, 0.92]) for i in range(2)]  # TTFT 900 ms: served, SLO missed
    recs += [_rec(20 + i, "b", [], outcome="timeout") for i in range(2)]
    phases = phase_table(recs)
    assert {"itl_ms_p50", "itl_ms_p99", "itl_ms_max", "max_chunk_tokens"} <= set(phases.columns)
    slo = RequestSLO.from_slo(SLOConfig(ttft_p99_ms=500, tpot_p95_ms=50))
    head = headline(phases, duration_s=2.0, slo=slo)
    assert head["slo_attainment"] == pytest.approx(0.6) and head["goodput_req_per_s"] == pytest.approx(3.0)
    assert head["ok_req_per_s"] == pytest.approx(4.0)  # served is not goodput
    summary = summarize(phases, group=(), slo=slo, duration_s=2.0)
    per_tenant = summary[(summary["slice_dim"] == "tenant") & (summary["metric"] == "slo_attainment")]
    assert dict(zip(per_tenant["slice_value"], per_tenant["value"], strict=True)) == {"a": 1.0, "b": 0.0}
    assert set(summary["metric"]) >= {"slo_ttft_share", "slo_tpot_share", "goodput_tok_per_s", "itl_ms_p99"}
    pooled = pooled_itl_ms(recs)
    assert pooled["itl_ms_p50"] == pytest.approx(10.0, abs=1e-6)


def test_a_planted_transport_delay_is_flagged_by_the_decomposition_check(tmp_path) -> None:
    """The engine's clock against the client's, each measured on its own: a delay between the engine and the
    client (not in the table) shows as the TTFT residual and the check fails; without it the check passes."""
    from inferopt.config import FakeSystem, LengthConfig, PoissonArrivals, WorkloadConfig
    from inferopt.measure.phases import decomposition_check
    from inferopt.measure.runner import RunTags
    from inferopt.measure.session import run_system
    from inferopt.workload.build import build_workload

    wl = WorkloadConfig(
        name="t",
        seed=2,
        num_requests=30,
        arrival=PoissonArrivals(rate_per_s=40.0),
        lengths=LengthConfig(input_median=16, output_median=8, output_max=16),
    )
    table = build_workload(wl)
    checks = {}
    for delay in (0.0, 40.0):
        run = run_system(FakeSystem(transport_delay_ms=delay), table, RunTags(arm=f"d{delay:g}"), timeout_s=10)
        checks[delay] = decomposition_check(run.phases)
    assert checks[0.0]["adds_up"] and abs(checks[0.0]["ttft_residual_ms_p50"]) < 5
    assert not checks[40.0]["adds_up"] and checks[40.0]["ttft_residual_ms_p50"] == pytest.approx(40.0, abs=8.0)


def test_littles_law_holds_on_a_steady_run_and_counts_unanswered_requests() -> None:
    from inferopt.measure.phases import littles_law

    rng = np.random.default_rng(3)
    starts = np.cumsum(rng.exponential(0.1, 400))  # 10 req/s for ~40 s, each 0.5 s in the system
    recs = [
        RequestRecord(request_id=f"r{i}", outcome="ok", intended_s=s, client_done_s=s + 0.5)
        for i, s in enumerate(starts)
    ]
    law = littles_law(recs)
    assert law["littles_holds"] and law["littles_L"] == pytest.approx(5.0, rel=0.15)
    lost = recs[:200] + [
        RequestRecord(request_id=f"x{i}", outcome="timeout", intended_s=s) for i, s in enumerate(starts[200:])
    ]
    assert littles_law(lost)["littles_L"] > law["littles_L"]  # never answered: in flight until the window closes


def test_cache_hits_from_the_engine_counters_beside_our_records() -> None:
    import pandas as pd

    from inferopt.measure.slices import cache_hits

    phases = pd.DataFrame(
        {"outcome": ["ok", "ok", "ok", "error"], "input_len": [300, 300, 100, 50], "cached_tokens": [256, 0, 0, 0]}
    )
    rep = cache_hits(phases, {"prefix_cache_hits_total": 512.0, "prefix_cache_queries_total": 2048.0})
    assert rep["engine_cache_hit_rate"] == pytest.approx(0.25)
    assert rep["cached_token_share"] == pytest.approx(256 / 700) and rep["cache_hit_request_share"] == pytest.approx(
        1 / 3
    )
    assert "engine_cache_hit_rate" not in cache_hits(phases, {})  # an engine without the counters: ours only


def test_an_engine_without_a_prefix_cache_has_no_misses_only_not_applicable() -> None:
    import pandas as pd

    from inferopt.config import HFSystem, ModelSpec
    from inferopt.measure.slices import NO_CACHE, SliceEdges, add_slices

    phases = pd.DataFrame(
        {"input_len": [10, 20], "target_output_len": [5, 5], "concurrency": [1, 2], "cache_hit": [False, False]}
    )
    edges = SliceEdges(input_len=(12.0, 15.0), output_len=(4.0, 6.0))
    assert HFSystem(model=ModelSpec(path="builtin:tiny-llama")).capabilities.prefix_cache is False
    assert set(add_slices(phases, edges, prefix_cache=False)["cache_hit"]) == {NO_CACHE}
    assert set(add_slices(phases, edges, prefix_cache=True)["cache_hit"]) == {"miss"}


def _steady(rng: np.random.Generator, n: int, gap_s: float, engine_s: float, transport_s: float) -> list:
    """Requests every ~gap_s, each `engine_s` inside the engine and `transport_s` more on the client's clock."""
    starts = np.cumsum(rng.exponential(gap_s, n))
    return [
        RequestRecord(
            request_id=f"r{i}",
            outcome="ok",
            intended_s=s,
            arrival_s=s + transport_s / 2,
            done_s=s + transport_s / 2 + engine_s,
            client_done_s=s + engine_s + transport_s,
        )
        for i, s in enumerate(starts)
    ]


def test_littles_law_takes_L_from_the_engines_clock_and_lambda_w_from_the_clients() -> None:
    from inferopt.measure.phases import littles_law

    rng = np.random.default_rng(5)
    law = littles_law(_steady(rng, 400, 0.1, engine_s=0.5, transport_s=0.002))
    assert law["littles_L_clock"] == "server" and law["littles_status"] == "holds"
    assert law["littles_L"] == pytest.approx(5.0, rel=0.15)
    # the engine saw each request for 0.3 s, the client for 0.5 s: the clocks disagree and the check says so
    skewed = littles_law(_steady(rng, 400, 0.1, engine_s=0.3, transport_s=0.2))
    assert skewed["littles_status"] == "fails" and skewed["littles_ratio"] == pytest.approx(0.6, abs=0.08)


def test_littles_law_says_not_stationary_when_arrivals_outpace_departures() -> None:
    from inferopt.measure.phases import littles_law

    # one server, 0.2 s per request, arrivals every 0.1 s: the queue grows through the run
    starts = np.arange(200) * 0.1
    done = 0.2 * (np.arange(200) + 1)
    recs = [
        RequestRecord(request_id=f"q{i}", outcome="ok", intended_s=s, arrival_s=s, done_s=d, client_done_s=d)
        for i, (s, d) in enumerate(zip(starts, done, strict=True))
    ]
    law = littles_law(recs)
    assert law["littles_status"] == "not stationary" and not law["littles_holds"]
    assert law["littles_departures_per_arrival"] == pytest.approx(0.5, abs=0.1)


def test_itl_raw_shows_the_speculative_bursts_and_smoothed_spreads_each_round() -> None:
    from types import SimpleNamespace

    from inferopt.ablate.speculative_arms import speculative_table
    from inferopt.config import BatchingKnobs, HFSystem, ModelSpec
    from inferopt.records import smoothed_gaps_ms

    # rounds of 3 tokens every 30 ms (a speculative stream) against one token every 10 ms (plain)
    chunk_s = [0.0, 0.03, 0.06, 0.09]
    spec = RequestRecord(
        request_id="s",
        outcome="ok",
        client_chunk_s=chunk_s,
        client_chunk_tokens=[1, 3, 3, 3],
        client_token_s=[0.0] + [t for t in chunk_s[1:] for _ in range(3)],
    )
    assert smoothed_gaps_ms(spec.client_chunk_s, spec.client_chunk_tokens) == pytest.approx([10.0] * 9)
    itl = pooled_itl_ms([spec])
    assert itl["itl_ms_p50"] == pytest.approx(0.0) and itl["itl_ms_max"] == pytest.approx(30.0)  # the bursts
    assert itl["itl_smoothed_ms_p50"] == pytest.approx(10.0) and itl["itl_smoothed_ms_max"] == pytest.approx(10.0)
    assert itl["max_chunk_tokens"] == 3.0
    system = HFSystem(
        model=ModelSpec(path="builtin:tiny-llama"),
        batching=BatchingKnobs(max_batch_size=1),
        speculative={"draft_model": "layers:1"},
    )
    arm = SimpleNamespace(name="candidate", system=system)
    run = SimpleNamespace(tags=SimpleNamespace(arm="candidate"), failed=False, server_metrics={}, records=[spec])
    row = speculative_table([arm], [run], pd.DataFrame()).iloc[0]
    assert row["itl_ms_p99"] > 25.0 and row["itl_smoothed_ms_p99"] == pytest.approx(10.0)
    assert row["max_chunk_tokens"] == 3.0
