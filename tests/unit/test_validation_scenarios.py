"""Validation scenarios beyond steady/burst, on the fake engine and scripted replicas (fast): overload with
and without admission control, fairness on planted starvation, the scenario config's checks, and node
failure behind a real nginx (skips without nginx)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from inferopt.config import (
    FakeSystem,
    LengthConfig,
    PoissonArrivals,
    ScenarioConfig,
    SLOConfig,
    TenantConfig,
    WorkloadConfig,
)
from inferopt.config.settings import ValidationSettings
from inferopt.config.systems import BatchingKnobs
from inferopt.validate.fairness import fairness_report, jain_index
from inferopt.validate.loadbalancer import nginx_binary
from inferopt.validate.scenarios import scenario_table, validate

HERE = Path(__file__).resolve().parent

# capacity ~55 req/s (batches of 2, 8 decode steps of ~2 ms); offered 4 x 100 req/s
SYSTEM = FakeSystem(decode_step_ms=2.0, batching=BatchingKnobs(max_batch_size=2, batch_wait_ms=0))
WORKLOAD = WorkloadConfig(
    name="ov",
    seed=1,
    num_requests=60,
    arrival=PoissonArrivals(rate_per_s=100.0),
    lengths=LengthConfig(input_median=16, output_median=8, output_sigma=0, output_min=8, output_max=8),
    tenants=(TenantConfig(name="a", weight=3), TenantConfig(name="b", weight=1, priority=1)),
    timeout_s=10,
)
SLO = SLOConfig(ttft_p99_ms=150, tpot_p95_ms=20)


def _phases(groups: dict[str, tuple[int, int, float]]) -> pd.DataFrame:
    """tenant -> (served, rejected, queue wait ms of the served)."""
    rows = []
    for tenant, (ok, rejected, wait) in groups.items():
        prio = 0 if tenant == "a" else 1
        rows += [
            {
                "tenant": tenant,
                "priority": prio,
                "outcome": "ok",
                "queue_ms": wait,
                "ttft_ms": wait + 5.0,
                "output_len": 10,
            }
            for _ in range(ok)
        ]
        rows += [
            {
                "tenant": tenant,
                "priority": prio,
                "outcome": "rejected",
                "queue_ms": np.nan,
                "ttft_ms": np.nan,
                "output_len": 0,
            }
            for _ in range(rejected)
        ]
    return pd.DataFrame(rows)


def test_jain_index() -> None:
    assert jain_index([1, 1, 1]) == pytest.approx(1.0)
    assert jain_index([1, 0, 0, 0]) == pytest.approx(0.25)
    assert np.isnan(jain_index([0, 0]))


def test_fairness_flags_planted_starvation_and_not_a_fair_run() -> None:
    fair = fairness_report(_phases({"a": (30, 0, 5.0), "b": (10, 0, 6.0)}), duration_s=2.0, max_wait_ms=100.0)
    assert not fair.starved and fair.jain_tenant == pytest.approx(1.0)
    # b: most requests shed while a is served in full, and what b got waited 5 s
    starved = fairness_report(
        _phases({"a": (30, 0, 5.0), "b": (2, 18, 5000.0)}),
        duration_s=2.0,
        max_wait_ms=100.0,
        weights={"a": 3.0, "b": 1.0},
    )
    t = starved.table.set_index(["group_by", "group"])
    assert bool(t.loc[("tenant", "b"), "starved"]) and not bool(t.loc[("tenant", "a"), "starved"])
    assert "offered share" in t.loc[("tenant", "b"), "why"]  # 2 served: too few for the wait test
    assert bool(t.loc[("priority", "1"), "starved"])
    assert t.loc[("tenant", "a"), "weight_share"] == pytest.approx(0.75)
    assert starved.jain_tenant < 0.75 and any(s.startswith("tenant=b") for s in starved.starved)
    # a shortfall chance explains (13 served in all) is not starvation
    lucky = fairness_report(_phases({"a": (13, 49, 5.0), "b": (0, 18, 0.0)}), duration_s=1.0, max_wait_ms=100.0)
    assert not lucky.starved


def test_overload_with_admission_control_holds_p99_and_the_unbounded_queue_blows_up(tmp_path: Path) -> None:
    scs = (
        ScenarioConfig(name="overload", kind="overload", rate_scale=4, admission_limit=4),
        ScenarioConfig(name="no-admission", kind="overload", rate_scale=4),
    )
    bounded, free = validate(SYSTEM, WORKLOAD, scs, SLO, tmp_path)
    m = bounded.metrics
    assert m["rejected_rate"] > 0.3 and m["timeout_rate"] == 0  # load shed at admission
    assert bounded.passed, bounded.reasons
    assert bounded.reasons[0].startswith("admission control (queue bound 4) held p99 TTFT at")
    assert m["unbounded.ttft_ms_p99"] > 3 * m["ttft_ms_p99"]  # same load, no bound
    g = bounded.tables["unbounded_queue_growth"]
    assert g["ttft_ms_p99"].iloc[-1] > 2 * g["ttft_ms_p99"].iloc[0]  # grows with the run
    assert g["in_flight_median"].iloc[-1] > g["in_flight_median"].iloc[0]  # ... as the queue does
    assert bounded.extra_runs and len(bounded.extra_runs[0].records) == WORKLOAD.num_requests
    assert not free.passed and "no admission control (unbounded queue)" in free.reasons[0]
    assert free.metrics["rejected_rate"] == 0
    table = scenario_table([bounded, free])
    assert list(table["passed"]) == [True, False] and table["jain_tenant"].notna().all()


def test_overload_with_client_retries_keeps_every_attempt(tmp_path: Path) -> None:
    sc = ScenarioConfig(
        name="overload-retry",
        kind="overload",
        rate_scale=4,
        admission_limit=4,
        compare_unbounded=False,
        retry={"max_attempts": 3, "base_backoff_s": 0.01, "max_backoff_s": 0.05},
    )
    (res,) = validate(SYSTEM, WORKLOAD, (sc,), SLO, tmp_path)
    att = res.tables["attempts"]
    assert len(res.run.records) == WORKLOAD.num_requests  # one record per request
    assert len(att) > WORKLOAD.num_requests and att["attempt"].max() <= 3  # bounded retries, each kept
    final = att.sort_values("attempt").groupby("request_id").last()
    outcomes = {r.request_id: r.outcome for r in res.run.records}
    assert all(final.loc[rid, "outcome"] == ("ok" if o == "ok" else "rejected") for rid, o in outcomes.items())
    assert res.metrics["retried_request_rate"] > 0


def test_scenario_config_names_misplaced_fields() -> None:
    with pytest.raises(ValidationError, match="kill_at_s` applies to kind: node_failure"):
        ScenarioConfig(name="s", kind="steady", kill_at_s=3)
    with pytest.raises(ValidationError, match="admission_limit` applies to kind: overload"):
        ScenarioConfig(name="s", kind="node_failure", admission_limit=3)
    with pytest.raises(ValidationError, match="kill_replica < replicas"):
        ScenarioConfig(name="s", kind="node_failure", kill_replica=2)
    with pytest.raises(ValidationError, match="unique"):
        ValidationSettings(scenarios=[{"name": "a", "kind": "steady"}, {"name": "a", "kind": "burst"}])


def test_node_failure_on_a_fake_engine_says_it_needs_vllm(tmp_path: Path) -> None:
    (res,) = validate(SYSTEM, WORKLOAD, (ScenarioConfig(name="nf", kind="node_failure"),), SLO, tmp_path)
    assert not res.passed and ("engine: vllm" in res.reasons[0] or "nginx" in res.reasons[0])


@pytest.mark.skipif(nginx_binary() is None, reason="no nginx; fix: bash scripts/setup_nginx.sh")
def test_node_failure_behind_nginx_loses_no_record_and_reports_recovery(tmp_path: Path) -> None:
    from inferopt.transport.ports import free_port
    from inferopt.validate.judge import ScenarioLoad
    from inferopt.validate.node_failure import (
        ProcessReplica,
        ReplicaPlan,
        run_node_failure,
    )
    from inferopt.validate.scenarios import scenario_requests, scenario_workload

    def make(i: int, log_dir: Path) -> ProcessReplica:
        port = free_port()
        return ProcessReplica(
            f"fake-r{i}",
            [sys.executable, str(HERE / "sse_replica.py"), str(port), "0.02"],
            port,
            log_dir / f"r{i}.log",
            startup_timeout_s=30,
        )

    wl = WORKLOAD.model_copy(
        update={
            "num_requests": 100,
            "arrival": PoissonArrivals(rate_per_s=40.0),
            "tenants": (TenantConfig(name="default"),),
        }
    )
    sc = ScenarioConfig(name="nf", kind="node_failure", kill_at_s=1.0)
    load = ScenarioLoad(
        sc, scenario_workload(wl, sc), scenario_requests(wl, sc), tmp_path, arm="c", run_tag="", warmup_requests=1
    )
    res = run_node_failure(SYSTEM, load, SLOConfig(ttft_p99_ms=500, tpot_p95_ms=100), plan=ReplicaPlan(make, "m", 500))
    m = res.metrics
    assert m["sent"] == m["records"] == m["records_on_disk"] == 100, res.reasons  # nothing lost
    assert m["kill_at_s"] == pytest.approx(1.0, abs=0.2)
    assert m["failed_requests"] >= 1 and m["failed_in_flight_at_kill"] >= 1  # streams cut by the kill
    assert m["recovery_s"] == m["recovery_s"] and m["recovery_s"] <= sc.max_recovery_s
    assert m["served_by_killed_after_kill"] == 0 and m["sent_after_kill"] > 0
    assert set(res.tables["segments"]["segment"]) == {"before", "during", "after"}
    assert res.passed, res.reasons
    assert any(r.startswith("time to recover") for r in res.reasons)


def test_failover_arithmetic_on_a_planted_timeline() -> None:
    from inferopt.validate.failover import failover_summary, segment_table

    # one request every 0.1 s from t=0 to 2.9 s, each takes 0.25 s; kill at 1.0 s
    sent = np.arange(30) * 0.1
    outcome = ["ok"] * 30
    for i in (8, 9):  # in flight at the kill, cut
        outcome[i] = "error"
    for i in (11, 13):  # sent after the kill, routed to the dead replica before nginx marked it down
        outcome[i] = "error"
    frame = pd.DataFrame(
        {
            "request_id": [f"r{i}" for i in range(30)],
            "intended_s": sent,
            "client_done_s": sent + 0.25,
            "outcome": outcome,
            "ttft_ms": 20.0,
        }
    )
    s = failover_summary(frame, kill_s=1.0)
    assert s["failed_requests"] == 4 and s["failed_in_flight_at_kill"] == 2 and s["failed_sent_after_kill"] == 2
    assert s["baseline_failure_rate"] == 0.0
    assert s["recovery_s"] == pytest.approx(0.4)  # request 14 (sent at 1.4 s) is the first of an all-ok tail
    assert s["first_ok_after_kill_s"] == pytest.approx(0.25)  # request 10: sent at the kill, done 0.25 s later
    seg = segment_table(frame, 1.0, s["recovery_s"]).set_index("segment")
    assert seg.loc["before", "failed"] == 0 and seg.loc["during", "failed"] == 4 and seg.loc["after", "failed"] == 0
    assert seg["requests"].sum() == 30
    # never back to baseline: the last request failed
    frame.loc[29, "outcome"] = "error"
    assert failover_summary(frame, kill_s=1.0)["recovery_s"] is None


@pytest.mark.skipif(nginx_binary() is None, reason="no nginx; fix: bash scripts/setup_nginx.sh")
def test_nginx_runs_from_a_relative_workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """results/<run>/... is relative: nginx would resolve it against its own -p prefix a second time."""
    from inferopt.validate.loadbalancer import NginxBalancer

    monkeypatch.chdir(tmp_path)
    with NginxBalancer([1], workdir="rel/nginx") as lb:  # the upstream need not answer for nginx to start
        assert lb.workdir == (tmp_path / "rel/nginx").resolve() and lb.port > 0
    assert (tmp_path / "rel/nginx/nginx.conf").is_file()
