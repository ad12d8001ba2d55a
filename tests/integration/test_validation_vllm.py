"""Overload and node failure on real vLLM servers (tiny model, CPU): `--max-num-queued-reqs` rejections
counted against an unbounded queue, and two replicas behind nginx with one SIGKILLed mid-run.

Slow (each vLLM start is 30-80 s here). Run them under the box's vLLM lock, e.g.
`flock /tmp/inferopt-vllm.lock .venv/bin/python -m pytest -q tests/integration/test_validation_vllm.py`
(the node-failure test holds it for both replicas). They skip without .venv-vllm or nginx, saying why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from inferopt.config import (
    ModelSpec,
    PoissonArrivals,
    ScenarioConfig,
    SLOConfig,
    TenantConfig,
    VLLMSystem,
    WorkloadConfig,
)
from inferopt.config.models import LengthConfig
from inferopt.records import read_records
from inferopt.validate.loadbalancer import nginx_binary
from inferopt.validate.scenarios import validate

ROOT = Path(__file__).resolve().parents[2]
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not VLLM_PY.exists(), reason=f"no vLLM virtualenv at {VLLM_PY}; fix: bash scripts/setup_vllm.sh"
    ),
]


def _system(**kw: Any) -> VLLMSystem:
    base: dict[str, Any] = {
        "name": "vllm-tiny-val",
        "model": ModelSpec(path="builtin:tiny-llama"),
        "dtype": "float32",
        "max_model_len": 1024,
        "kv_cache_memory_bytes": 128 << 20,
        "enforce_eager": True,
        "startup_timeout_s": 300,
        "tracing": False,
    }
    return VLLMSystem(**{**base, **kw})


def _workload(n: int, rate: float) -> WorkloadConfig:
    return WorkloadConfig(
        name="val",
        seed=5,
        num_requests=n,
        arrival=PoissonArrivals(rate_per_s=rate),
        lengths=LengthConfig(input_median=48, output_median=24, output_sigma=0.3, output_min=8, output_max=48),
        tenants=(TenantConfig(name="chat", weight=3), TenantConfig(name="batch", weight=1)),
        timeout_s=60,
    )


def test_vllm_overload_rejects_with_max_num_queued_reqs_and_the_unbounded_queue_grows(tmp_path: Path) -> None:
    system = _system(max_num_seqs=2)
    sc = ScenarioConfig(name="overload", kind="overload", rate_scale=1.0, admission_limit=4)
    slo = SLOConfig(ttft_p99_ms=5000, tpot_p95_ms=500)
    (res,) = validate(system, _workload(60, 40.0), (sc,), slo, tmp_path)
    print("\n".join(res.reasons))
    assert not res.run.failed, res.run.error
    m = res.metrics
    assert m["requests"] == 60 and len(res.run.records) == 60
    assert m["rejected_rate"] > 0.2, res.reasons  # vLLM's 503s, counted as rejections
    assert any("503" in (r.error or "") for r in res.run.records if r.outcome == "rejected")
    assert m["error_rate"] == 0 and m["timeout_rate"] == 0
    free = res.extra_runs[0]
    assert not free.failed and m["unbounded.rejected_rate"] == 0
    assert m["unbounded.ttft_ms_p99"] > 2 * m["ttft_ms_p99"], res.reasons
    assert (
        res.tables["unbounded_queue_growth"]["in_flight_median"].iloc[-1]
        > res.tables["queue_growth"]["in_flight_median"].iloc[-1]
    )
    assert res.reasons[0].startswith("admission control (queue bound 4) held p99 TTFT")
    assert res.fairness is not None and len(res.fairness.table) == 3  # two tenants, one priority level


@pytest.mark.skipif(nginx_binary() is None, reason="no nginx for the load balancer; fix: bash scripts/setup_nginx.sh")
def test_vllm_node_failure_behind_nginx_loses_no_record_and_reports_recovery(tmp_path: Path) -> None:
    system = _system(max_num_seqs=8)
    sc = ScenarioConfig(name="node-failure", kind="node_failure", kill_at_s=6.0, max_recovery_s=15.0)
    slo = SLOConfig(ttft_p99_ms=5000, tpot_p95_ms=500)
    (res,) = validate(system, _workload(60, 4.0), (sc,), slo, tmp_path, warmup_requests=2)
    print("\n".join(res.reasons))
    assert not res.run.failed, res.run.error
    m = res.metrics
    on_disk = [r for r in read_records(tmp_path / "requests.jsonl") if r.scenario == "node-failure" and not r.warmup]
    assert m["sent"] == m["records"] == len(on_disk) == 60  # no record lost
    assert m["kill_at_s"] == pytest.approx(6.0, abs=1.0)
    assert m["recovery_s"] == m["recovery_s"] and m["first_ok_after_kill_s"] == m["first_ok_after_kill_s"]
    assert m["served_by_killed_after_kill"] == 0 and m["sent_after_kill"] > 10
    assert any(r.startswith("time to recover") for r in res.reasons)
