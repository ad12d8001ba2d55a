"""The seed's case (SPEC E): the decision on planted rows, the case config's errors, and the pooled engine
routing by tenant — on the fake engine (fast)."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from inferopt.config import FakeSystem, SLOConfig, load_case
from inferopt.config.case import CaseConfig
from inferopt.config.pooled import Pool, PooledSystem
from inferopt.measure.runner import RunTags
from inferopt.measure.session import run_system
from inferopt.validate.case_study import (
    CaseRow,
    case_json,
    case_requests,
    decide,
    format_table,
    run_case,
    slo_checks,
)

SLO = SLOConfig(ttft_p50_ms=500, ttft_p99_ms=2000, tpot_p95_ms=100)
NAN = float("nan")


def seed_rows() -> list[CaseRow]:
    """The seed's table (SPEC E)."""
    return [
        CaseRow("static small batch", 40.0, 520.0, 1800.0, 30.0),
        CaseRow("aggressive continuous batching", 78.0, 470.0, 3200.0, 58.0),
        CaseRow("pooled + chunked prefill", 70.0, 430.0, 1600.0, 40.0),
    ]


# --------------------------------------------------------------------------- the decision


def test_seed_table_chooses_pooled_over_the_faster_strategy_whose_p99_fails() -> None:
    d = decide(seed_rows(), SLO)
    assert d.chosen == "pooled + chunked prefill"
    assert d.meets_slo == {
        "static small batch": False,
        "aggressive continuous batching": False,
        "pooled + chunked prefill": True,
    }
    assert d.verdicts["aggressive continuous batching"].startswith("TTFT p99 3200 ms > 2000 ms")
    assert d.verdicts["pooled + chunked prefill"] == "meets every interactive SLO: chosen"
    # the seed's order: throughput ranking first, then the checks of the fastest, then the next
    assert d.steps[0].startswith("1. throughput, highest first: aggressive continuous batching 78.0")
    assert "pooled + chunked prefill 70.0" in d.steps[0].split(">")[1]
    assert d.steps[1].startswith("2. aggressive continuous batching") and d.steps[1].endswith("fails the SLO")
    assert d.steps[2].startswith("3. pooled + chunked prefill") and d.steps[2].endswith("chosen")
    assert len(d.steps) == 3  # the walk stops at the chosen one


def test_fastest_strategy_is_chosen_when_its_tail_holds() -> None:
    rows = seed_rows()
    rows[1] = CaseRow("aggressive continuous batching", 78.0, 470.0, 1900.0, 58.0)
    d = decide(rows, SLO)
    assert d.chosen == "aggressive continuous batching"
    assert d.verdicts["pooled + chunked prefill"].startswith("meets the SLO; 90 % of the best")


def test_p50_is_checked_before_p99() -> None:
    checks = slo_checks(CaseRow("x", 10.0, 900.0, 5000.0, 10.0), SLO)
    assert [t.split(" ")[1] for t, _ in checks[:3]] == ["p50", "p99", "p95"]
    d = decide([CaseRow("x", 10.0, 900.0, 5000.0, 10.0), CaseRow("y", 5.0, 100.0, 200.0, 10.0)], SLO)
    assert d.verdicts["x"].startswith("TTFT p50 900 ms > 500 ms") and d.chosen == "y"


def test_a_value_just_over_its_bound_is_shown_with_a_decimal() -> None:
    checks = dict(slo_checks(CaseRow("x", 10.0, 300.4, 1000.0, 10.0), SLO.model_copy(update={"ttft_p50_ms": 300})))
    assert checks["TTFT p50 300.4 ms > 300 ms"] is False


def test_no_strategy_meets_the_slo_chooses_nothing() -> None:
    rows = [CaseRow("a", 50.0, 600.0, 2500.0, 10.0), CaseRow("b", 60.0, 100.0, 100.0, 150.0)]
    d = decide(rows, SLO)
    assert d.chosen is None and d.steps[-1].endswith("nothing chosen")
    assert "TPOT p95 150 ms > 100 ms" in d.verdicts["b"]


def test_failure_rates_and_crashed_runs_fail_and_rank_last() -> None:
    rows = [
        CaseRow("lossy", 90.0, 100.0, 200.0, 10.0, timeout_rate=0.2),
        CaseRow("crashed", NAN, NAN, NAN, NAN, failed=True, error="VLLMStartError: boom"),
        CaseRow("ok", 20.0, 100.0, 200.0, 10.0),
    ]
    d = decide(rows, SLO)
    assert d.chosen == "ok"
    assert d.verdicts["lossy"].startswith("timeout rate 0.200 > 0.01")
    assert d.verdicts["crashed"] == "run failed: VLLMStartError: boom"
    assert d.steps[0].endswith("crashed nan tok/s")
    out = case_json(rows, d)
    assert out["chosen"] == "ok" and out["rows"][1]["throughput_tok_s"] is None and out["rows"][1]["meets_slo"] is False
    table = format_table(rows, d, SLO)
    assert "| crashed | — | — | — | — | run failed" in table


def test_equal_throughput_prefers_the_lower_p99() -> None:
    d = decide([CaseRow("a", 50.0, 100.0, 900.0, 10.0), CaseRow("b", 50.0, 100.0, 400.0, 10.0)], SLO)
    assert d.chosen == "b"


# --------------------------------------------------------------------------- config


def _wl(name: str, tenant: str, n: int, rate: float, inp: int, out: int) -> dict:
    return {
        "name": name,
        "seed": len(name),
        "num_requests": n,
        "arrival": {"kind": "poisson", "rate_per_s": rate},
        "lengths": {
            "input_median": inp,
            "input_sigma": 0.1,
            "output_median": out,
            "output_sigma": 0.1,
            "input_min": 4,
            "input_max": inp * 2,
            "output_min": 2,
            "output_max": out * 2,
        },
        "tenants": [{"name": tenant}],
        "timeout_s": 10,
    }


def fake_case(**strategies: dict) -> CaseConfig:
    fast = {"engine": "fake", "decode_step_ms": 0.5, "batching": {"max_batch_size": 8}}
    slow = {"engine": "fake", "decode_step_ms": 6.0, "batching": {"max_batch_size": 8}}
    return CaseConfig.model_validate(
        {
            "name": "t",
            "tenants": {
                "chat": {"workload": _wl("w-chat", "chat", 12, 40.0, 16, 4)},
                "jobs": {"workload": _wl("w-jobs", "jobs", 4, 10.0, 64, 12), "interactive": False},
            },
            "slo": {"ttft_p99_ms": 5000, "tpot_p95_ms": 1000},
            "warmup_requests": 0,
            "strategies": strategies
            or {
                "single": {"baseline": fast},
                "pooled": {
                    "pools": {
                        "interactive": {"tenants": ["chat"], "baseline": fast},
                        "offline": {"tenants": ["jobs"], "baseline": slow},
                    }
                },
            },
        }
    )


def test_case_config_errors_name_the_field_and_the_fix(tmp_path) -> None:
    with pytest.raises(ValueError, match="exactly one of `baseline`"):
        fake_case(a={"baseline": {"engine": "fake"}, "pools": {}}, b={"baseline": {"engine": "fake"}})
    with pytest.raises(ValueError, match=r"no pool serves tenants \['jobs'\]"):
        fake_case(
            a={"baseline": {"engine": "fake"}},
            b={"pools": {"p": {"tenants": ["chat"], "baseline": {"engine": "fake"}}}},
        )
    with pytest.raises(ValueError, match="at least two"):
        fake_case(a={"baseline": {"engine": "fake"}})
    with pytest.raises(ValueError, match="is not a field of the fake baseline"):
        fake_case(
            a={"baseline": {"engine": "fake"}, "changes": {"max_num_seqs": 9}}, b={"baseline": {"engine": "fake"}}
        )
    with pytest.raises(ValueError, match="listed by pools"):
        PooledSystem(
            pools=(
                Pool(name="a", tenants=("x",), system=FakeSystem()),
                Pool(name="b", tenants=("x",), system=FakeSystem()),
            )
        )
    bad = tmp_path / "case.yaml"
    bad.write_text(
        "name: x\ntenants: {chat: {workload: w.yaml}}\nslo: {ttft_p99_ms: 1, tpot_p95_ms: 1}\n"
        "strategies: {a: {baseline: {engine: fake}}, b: {baseline: {engine: fake}}}\n"
    )
    (tmp_path / "w.yaml").write_text("name: w\narrival: {kind: poisson, rate_per_s: 1}\ntenants: [{name: other}]\n")
    with pytest.raises(ValueError, match=r"tenants\.chat: its workload's tenants are \['other'\]; fix"):
        load_case(bad)


def test_shipped_case_config_loads_with_the_three_strategies() -> None:
    case = load_case("configs/case/case.yaml")
    assert list(case.strategies) == ["static small batch", "aggressive continuous batching", "pooled + chunked prefill"]
    aggressive = case.strategies["aggressive continuous batching"].system("a")
    assert aggressive.enable_chunked_prefill is False and aggressive.max_num_seqs > 16
    pooled = case.strategies["pooled + chunked prefill"].system("p")
    assert isinstance(pooled, PooledSystem) and all(p.system.enable_chunked_prefill for p in pooled.pools)
    assert pooled.pool_for("interactive") == "interactive" and pooled.pool_for("offline") == "offline"
    table = case_requests(case)
    means = table.groupby("tenant")["input_len"].mean()
    assert means["offline"] > 5 * means["interactive"]  # long offline vs short interactive
    assert table["arrival_offset_s"].is_monotonic_increasing and table["request_id"].is_unique


# --------------------------------------------------------------------------- the pooled engine


def test_pooled_strategy_routes_each_tenant_to_its_pool_and_keeps_every_record(tmp_path) -> None:
    case = fake_case()
    rows, runs = run_case(case, tmp_path)
    assert [r.strategy for r in rows] == ["single", "pooled"]
    pooled = runs[1]
    assert not pooled.failed and len(pooled.records) == 16 and {r.outcome for r in pooled.records} == {"ok"}
    assert set(pooled.engine_info["pools"]) == {"interactive", "offline"}
    tpot = pooled.phases.groupby("tenant")["tpot_ms"].median()
    single = runs[0].phases.groupby("tenant")["tpot_ms"].median()
    assert tpot["jobs"] > 3 * single["jobs"]  # the offline tenant went to the slow pool
    assert tpot["chat"] < tpot["jobs"] / 3  # the interactive tenant did not
    assert rows[1].interactive_requests == 12 and rows[1].requests == 16
    assert (tmp_path / "pooled" / "requests.jsonl").exists()
    assert not any(math.isnan(v) for v in (rows[1].throughput_tok_s, rows[1].ttft_p99_ms))


def test_pooled_engine_unrouted_tenant_is_an_error_record(tmp_path) -> None:
    system = PooledSystem(pools=(Pool(name="a", tenants=("chat",), system=FakeSystem()),))
    table = pd.DataFrame(
        {
            "request_id": ["r0", "r1"],
            "arrival_offset_s": [0.0, 0.01],
            "input_len": [8, 8],
            "output_len": [3, 3],
            "prefix_group": [-1, -1],
            "prefix_len": [0, 0],
            "tenant": ["chat", "stranger"],
            "priority": [0, 0],
        }
    )
    run = run_system(system, table, RunTags(), timeout_s=5.0)
    outcomes = {r.tenant: (r.outcome, r.error) for r in run.records}
    assert outcomes["chat"][0] == "ok"
    assert outcomes["stranger"][0] == "error" and "no pool serves tenant 'stranger'" in outcomes["stranger"][1]


def test_workload_of_fake_case_is_merged_on_one_timeline() -> None:
    table = case_requests(fake_case())
    assert table["tenant"].value_counts().to_dict() == {"chat": 12, "jobs": 4}
    assert table["arrival_offset_s"].is_monotonic_increasing


def test_pooled_metrics_sum_counts_and_keep_the_fullest_pool_usage() -> None:
    import asyncio

    from inferopt.engines import make_engine
    from inferopt.engines.pooled import PooledEngine

    class _Pool:
        def __init__(self, m: dict[str, float]) -> None:
            self.m = m

        async def server_metrics(self) -> dict[str, float]:
            return self.m

    eng = PooledEngine(
        PooledSystem(
            pools=(
                Pool(name="a", tenants=("x",), system=FakeSystem()),
                Pool(name="b", tenants=("y",), system=FakeSystem()),
            )
        ),
        make_engine,
    )
    eng.engines = {
        "a": _Pool({"num_preemptions_total": 2.0, "kv_cache_usage_perc": 0.5}),
        "b": _Pool({"num_preemptions_total": 3.0, "kv_cache_usage_perc": 0.25}),
    }
    assert asyncio.run(eng.server_metrics()) == {"num_preemptions_total": 5.0, "kv_cache_usage_perc": 0.5}
