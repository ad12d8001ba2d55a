"""The vllm engine's pure parts and the phase join, without a server: `vllm serve` argument building, the
server environment, /metrics flattening, the OTLP receiver (real protobuf over HTTP), the span ->
ServerTimings mapping, the per-request join in `run_system` (a stub engine with `server_timings`), the
aggregate join, and process-group stopping."""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
import math
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from inferopt.config import (
    ConstantArrivals,
    FakeSystem,
    ModelSpec,
    VLLMSystem,
    WorkloadConfig,
)
from inferopt.config.loader import load_config
from inferopt.engines.base import EngineBase, FinishEvent, GenRequest, TokenEvent
from inferopt.engines.vllm.engine import terminate_group
from inferopt.engines.vllm.serve import serve_args, server_env, vllm_metrics
from inferopt.engines.vllm.spans import timings_from_vllm_span, vllm_request_id
from inferopt.measure.join import aggregate_join, join_server_timings, rewrite_records
from inferopt.measure.phases import decomposition_check, phase_table
from inferopt.records import RequestRecord, ServerTimings, now_s, read_records
from inferopt.transport.otel import OTLPReceiver, SpanRecord, decode_export_request

ROOT = Path(__file__).resolve().parents[2]


def _sys(**kw: Any) -> VLLMSystem:
    return VLLMSystem(model=ModelSpec(path="builtin:tiny-llama"), **kw)


def _pairs(args: list[str]) -> dict[str, str]:
    return {a: b for a, b in itertools.pairwise(args) if a.startswith("--") and not b.startswith("--")}


# ------------------------------------------------------------------------------------------ serve args


def test_serve_args_maps_every_knob() -> None:
    s = _sys(
        name="arm",
        dtype="bfloat16",
        max_model_len=4096,
        max_num_seqs=8,
        max_num_batched_tokens=512,
        enable_chunked_prefill=True,
        enable_prefix_caching=False,
        kv_cache_dtype="fp8",
        scheduling_policy="priority",
        max_num_queued_reqs=5,
        quantization="fp8",
        speculative_config={"method": "ngram", "num_speculative_tokens": 4},
        enforce_eager=True,
        kv_cache_memory_bytes=1 << 30,
        gpu_memory_utilization=0.8,
        tensor_parallel_size=2,
        block_size=32,
        extra_args=("--seed", "7"),
    )
    args = serve_args(s, "/m", 1234, otlp_traces_endpoint="http://127.0.0.1:9/v1/traces")
    kv = _pairs(args)
    assert kv["--model"] == "/m" and kv["--port"] == "1234" and kv["--host"] == "127.0.0.1"
    assert kv["--served-model-name"] == "arm"
    assert kv["--dtype"] == "bfloat16" and kv["--max-model-len"] == "4096" and kv["--max-num-seqs"] == "8"
    assert kv["--max-num-batched-tokens"] == "512" and kv["--kv-cache-dtype"] == "fp8"
    assert kv["--scheduling-policy"] == "priority" and kv["--max-num-queued-reqs"] == "5"
    assert kv["--quantization"] == "fp8" and kv["--kv-cache-memory-bytes"] == str(1 << 30)
    assert kv["--gpu-memory-utilization"] == "0.8" and kv["--tensor-parallel-size"] == "2"
    assert kv["--block-size"] == "32"
    assert json.loads(kv["--speculative-config"]) == {"method": "ngram", "num_speculative_tokens": 4}
    assert "--enable-chunked-prefill" in args and "--no-enable-prefix-caching" in args
    assert "--enforce-eager" in args and "--enable-prompt-tokens-details" in args
    assert kv["--otlp-traces-endpoint"] == "http://127.0.0.1:9/v1/traces"
    assert args[-2:] == ["--seed", "7"]  # extra args last, verbatim


def test_serve_args_none_leaves_vllm_defaults() -> None:
    s = _sys(max_model_len=None, kv_cache_memory_bytes=None, enforce_eager=False)
    args = serve_args(s, "/m", 1)
    for flag in (
        "--max-model-len",
        "--max-num-seqs",
        "--max-num-batched-tokens",
        "--max-num-queued-reqs",
        "--quantization",
        "--speculative-config",
        "--kv-cache-memory-bytes",
        "--gpu-memory-utilization",
        "--block-size",
        "--otlp-traces-endpoint",
        "--enforce-eager",
    ):
        assert flag not in args
    assert not any("chunked-prefill" in a or "prefix-caching" in a for a in args)


def test_server_env() -> None:
    env = server_env(_sys(extra_env={"FOO": "1", "OTEL_BSP_SCHEDULE_DELAY": "50"}), base={"PATH": "/bin"})
    assert env["VLLM_SERVER_DEV_MODE"] == "1"  # /reset_prefix_cache is a dev-mode route
    assert env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
    assert env["OTEL_BSP_SCHEDULE_DELAY"] == "50" and env["FOO"] == "1" and env["PATH"] == "/bin"
    assert env["VLLM_TARGET_DEVICE"] == "cpu" and env["OMP_WAIT_POLICY"] == "PASSIVE"


def test_shipped_vllm_configs_validate() -> None:
    tiny = load_config(ROOT / "configs/systems/vllm-tiny.yaml", kind="system")
    gpu = load_config(ROOT / "configs/systems/vllm-gpu.yaml", kind="system")
    assert isinstance(tiny, VLLMSystem) and tiny.enforce_eager and tiny.device == "cpu"
    assert isinstance(gpu, VLLMSystem) and gpu.device == "cuda" and gpu.kv_cache_memory_bytes is None


METRICS = {
    'vllm:kv_cache_usage_perc{engine="0",model_name="m"}': 0.25,
    'vllm:num_requests_running{engine="0",model_name="m"}': 3.0,
    'vllm:num_requests_waiting{engine="0",model_name="m"}': 7.0,
    'vllm:num_preemptions_total{engine="0",model_name="m"}': 1.0,
    'vllm:prefix_cache_hits_total{engine="0",model_name="m"}': 128.0,
    'vllm:prefix_cache_queries_total{engine="0",model_name="m"}': 400.0,
    'vllm:admission_rejections_total{engine="0",model_name="m",reason="max_num_queued_reqs"}': 4.0,
    'vllm:admission_rejections_total{engine="0",model_name="m",reason="max_num_queued_tokens"}': 1.0,
    'vllm:request_queue_time_seconds_sum{engine="0",model_name="m"}': 2.0,
    'vllm:request_queue_time_seconds_count{engine="0",model_name="m"}': 10.0,
    'vllm:request_queue_time_seconds_bucket{engine="0",le="+Inf",model_name="m"}': 10.0,
    'vllm:e2e_request_latency_seconds_sum{engine="0",model_name="m"}': 9.0,
    'vllm:e2e_request_latency_seconds_count{engine="0",model_name="m"}': 10.0,
}


def test_vllm_metrics_flattens() -> None:
    m = vllm_metrics(METRICS)
    assert m["kv_cache_usage_perc"] == 0.25 and m["num_requests_running"] == 3 and m["num_requests_waiting"] == 7
    assert m["num_preemptions_total"] == 1 and m["prefix_cache_hits_total"] == 128
    assert m["admission_rejections_total"] == 5 and m["admission_rejections_total.max_num_queued_reqs"] == 4
    assert m["queue_time_s_sum"] == 2 and m["queue_time_s_count"] == 10 and m["e2e_s_count"] == 10
    assert "prefill_time_s_sum" not in m  # absent stays absent, not 0


# ------------------------------------------------------------------------------------------ receiver


def _export_body(spans: list[dict[str, Any]]) -> bytes:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    def kv(k: str, v: Any) -> KeyValue:
        if isinstance(v, str):
            return KeyValue(key=k, value=AnyValue(string_value=v))
        if isinstance(v, int):
            return KeyValue(key=k, value=AnyValue(int_value=v))
        return KeyValue(key=k, value=AnyValue(double_value=float(v)))

    pb = [
        Span(
            name=s["name"],
            trace_id=b"\x01" * 16,
            span_id=b"\x02" * 8,
            start_time_unix_nano=s["start"],
            end_time_unix_nano=s["end"],
            attributes=[kv(k, v) for k, v in s["attrs"].items()],
        )
        for s in spans
    ]
    return ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=pb)])]
    ).SerializeToString()


def _post(url: str, body: bytes, headers: dict[str, str] | None = None) -> int:
    req = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": "application/x-protobuf", **(headers or {})}
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


SPAN_ATTRS = {
    "gen_ai.request.id": "cmpl-r1-0",
    "gen_ai.latency.time_in_queue": 0.5,
    "gen_ai.latency.time_in_model_prefill": 0.2,
    "gen_ai.latency.time_to_first_token": 0.75,
    "gen_ai.latency.e2e": 1.5,
    "gen_ai.latency.time_in_model_decode": 0.7,
    "gen_ai.usage.prompt_tokens": 100,
    "gen_ai.usage.completion_tokens": 8,
}


def test_receiver_decodes_real_protobuf_posts() -> None:
    with OTLPReceiver() as rx:
        assert rx.endpoint.startswith("http://127.0.0.1:")
        t0 = 1_800_000_000_000_000_000
        body = _export_body(
            [
                {"name": "llm_request", "start": t0, "end": t0 + 1_500_000_000, "attrs": SPAN_ATTRS},
                {"name": "Load weights", "start": t0, "end": t0 + 1, "attrs": {"code.lineno": "3"}},
            ]
        )
        assert _post(rx.endpoint, body) == 200
        attrs2 = {**SPAN_ATTRS, "gen_ai.request.id": "cmpl-r2-0"}
        assert (
            _post(
                rx.endpoint,
                gzip.compress(_export_body([{"name": "llm_request", "start": t0, "end": t0, "attrs": attrs2}])),
                {"Content-Encoding": "gzip"},
            )
            == 200
        )
        assert _post(rx.endpoint, b"\xff\x00 not protobuf") == 400
        assert _post(rx.endpoint.replace("/v1/traces", "/v1/metrics"), body) == 404
        assert rx.wait_for(lambda spans: {"cmpl-r1-0", "cmpl-r2-0"} <= spans.keys(), 5.0)
        spans = rx.spans()
        sp = spans["cmpl-r1-0"]
        assert (
            sp.name == "llm_request" and sp.start_unix_ns == t0 and sp.attributes["gen_ai.usage.prompt_tokens"] == 100
        )
        assert sp.attributes["gen_ai.latency.e2e"] == 1.5
        assert len(rx.other_spans) == 1 and rx.decode_errors == 1
        assert not rx.wait_for(lambda spans: "never" in spans, 0.05)
    rx.stop()  # a second stop is harmless


def test_decode_export_request_empty() -> None:
    assert decode_export_request(b"") == []


# ------------------------------------------------------------------------------------------ span -> timings


def test_vllm_request_id_format() -> None:
    assert vllm_request_id("abc") == "cmpl-abc-0"


def test_timings_from_vllm_span() -> None:
    sp = SpanRecord(name="llm_request", start_unix_ns=1_000_000_000_500_000_000, end_unix_ns=0, attributes=SPAN_ATTRS)
    t = timings_from_vllm_span(sp, offset_s=1_000_000_000.0)
    assert t.arrival_s == pytest.approx(0.5)
    assert t.admitted_s == pytest.approx(1.0) and t.context_ready_s == t.admitted_s == t.prefill_start_s
    assert t.prefill_end_s == pytest.approx(1.2)
    assert t.token_s == [pytest.approx(1.25)]
    assert t.done_s == pytest.approx(2.0)


def test_timings_from_span_missing_phases_stay_none() -> None:
    sp = SpanRecord(
        name="llm_request",
        start_unix_ns=2_000_000_000,
        end_unix_ns=0,
        attributes={"gen_ai.request.id": "x", "gen_ai.latency.e2e": "nan"},
    )
    t = timings_from_vllm_span(sp)
    assert t.arrival_s == pytest.approx(2.0)
    assert t.admitted_s is None and t.prefill_end_s is None and t.token_s == [] and t.done_s is None


def _client_record(rid: str, intended: float, n_tokens: int, outcome: str = "ok") -> RequestRecord:
    toks = [intended + 1.3 + 0.1 * i for i in range(n_tokens)] if outcome == "ok" else []
    return RequestRecord(
        request_id=rid,
        outcome=outcome,
        intended_s=intended,
        sent_s=intended + 0.01,
        client_token_s=toks,
        client_done_s=(toks[-1] if toks else intended) + 0.02,
        output_len=n_tokens,
        cached_tokens=64,
        finish_reason="length",
    )


def test_join_fills_server_fields_and_decomposition_adds_up() -> None:
    # server: arrival 10 ms after send, queue 0.5 s, prefill 0.2 s, first token 0.75 s after arrival
    recs = [_client_record("r1", 100.0, 8), _client_record("r2", 101.0, 0, outcome="rejected")]
    t = ServerTimings(
        arrival_s=100.02,
        admitted_s=100.52,
        context_ready_s=100.52,
        prefill_start_s=100.52,
        prefill_end_s=100.72,
        token_s=[100.77],
        done_s=101.02,
    )
    joined = join_server_timings(recs, {"r1": t})
    assert joined[0].arrival_s == 100.02 and joined[0].token_s == [100.77]
    assert joined[0].cached_tokens == 64 and joined[0].finish_reason == "length"  # kept from the stream
    assert joined[1] is recs[1] and recs[0].arrival_s is None  # inputs untouched
    ph = phase_table(joined)
    assert len(ph) == 2
    row = ph.iloc[0]
    assert row["queue_ms"] == pytest.approx(500) and row["prefill_ms"] == pytest.approx(200)
    assert row["context_ms"] == pytest.approx(0) and row["first_ms"] == pytest.approx(50)
    assert row["ttft_residual_ms"] == pytest.approx(1300 - 10 - 750)  # transport both ways, not hidden
    assert row["decode_ms"] == pytest.approx(250)  # done - first token (the span has no per-token times)
    check = decomposition_check(ph)
    assert math.isfinite(check["ttft_residual_ms_p50"]) and check["n_ok"] == 1


def test_rewrite_records_is_atomic_replace(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    path.write_text(_client_record("old", 0.0, 1).to_json() + "\n")
    rewrite_records(path, [_client_record("a", 0.0, 2), _client_record("b", 1.0, 3)])
    assert [r.request_id for r in read_records(path)] == ["a", "b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["requests.jsonl"]  # no temp file left


# ------------------------------------------------------------------------------------------ run_system


class _SpanEngine(EngineBase):
    """A stub engine: answers every request with 3 tokens, and reports server timings after the stream
    (like the vllm engine's spans) for every request but the last."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[float, float, float]] = {}
        self.asked: list[str] = []
        self.stopped = 0

    async def start(self) -> None: ...

    async def stop(self) -> None:
        self.stopped += 1

    def info(self) -> dict[str, Any]:
        return {"engine": "stub", "prefix_cache_reset": True}

    async def server_metrics(self) -> dict[str, float]:
        return {}

    async def stream(self, request: GenRequest) -> AsyncIterator[TokenEvent | FinishEvent]:
        arrival = now_s()
        await asyncio.sleep(0.002)
        first = now_s()
        yield TokenEvent((5,))
        await asyncio.sleep(0.001)
        yield TokenEvent((6, 7))
        self.seen[request.request_id] = (arrival, first, now_s())
        yield FinishEvent(ServerTimings(finish_reason="length"))

    async def server_timings(self, request_ids: list[str]) -> dict[str, ServerTimings]:
        self.asked = list(request_ids)
        out = {}
        for rid in request_ids[:-1]:
            a, f, d = self.seen[rid]
            out[rid] = ServerTimings(
                arrival_s=a, admitted_s=a, context_ready_s=a, prefill_start_s=a, prefill_end_s=f, token_s=[f], done_s=d
            )
        return out


def test_run_system_joins_per_request_and_rewrites_records(tmp_path: Path) -> None:
    from inferopt.measure import session
    from inferopt.measure.runner import RunTags
    from inferopt.workload import build_workload

    engine = _SpanEngine()
    table = build_workload(WorkloadConfig(name="j", num_requests=6, arrival=ConstantArrivals(rate_per_s=200)))
    path = tmp_path / "requests.jsonl"
    run = session.run_system(
        FakeSystem(),
        table,
        RunTags(arm="a"),
        timeout_s=10,
        records_path=path,
        warmup_requests=1,
        engine_factory=lambda system: engine,
    )
    assert not run.failed, run.error
    assert run.join["kind"] == "per_request" and run.join["n_ok"] == 7 and run.join["n_joined"] == 6
    assert abs(run.join["clock_drift_ms"]) < 50
    assert engine.stopped == 1 and len(engine.asked) == 7
    on_disk = read_records(path)
    assert len(on_disk) == 7 and sum(r.warmup for r in on_disk) == 1
    joined = [r for r in on_disk if r.arrival_s is not None]
    assert len(joined) == 6 and all(len(r.token_s) == 1 for r in joined)
    assert len(run.phases) == 6 and run.phases["queue_ms"].notna().sum() >= 5
    assert run.aggregate_join.empty

    # a second trial streaming into the same file (as the ablation's arms do): its rewrite keeps the first's
    again = session.run_system(
        FakeSystem(),
        table,
        RunTags(arm="a", trial=1),
        timeout_s=10,
        records_path=path,
        warmup_requests=1,
        engine_factory=lambda system: _SpanEngine(),
    )
    assert not again.failed, again.error
    both = read_records(path)
    assert len(both) == 14 and [r.trial for r in both].count(0) == 7 and [r.trial for r in both].count(1) == 7
    assert sum(r.arrival_s is not None for r in both if r.trial == 0) == 6  # the first trial's join kept


def test_aggregate_join() -> None:
    phases = pd.DataFrame(
        {
            "outcome": ["ok", "ok", "rejected"],
            "ttft_ms": [100.0, 300.0, math.nan],
            "e2e_ms": [1000.0, 1200.0, 5.0],
            "queue_ms": [math.nan] * 3,
        }
    )
    delta = {
        "queue_time_s_sum": 0.5,
        "queue_time_s_count": 5.0,
        "ttft_s_sum": 0.9,
        "ttft_s_count": 5.0,
        "e2e_s_sum": 5.0,
        "e2e_s_count": 5.0,
    }
    agg = aggregate_join(phases, delta).set_index("phase")
    assert (agg["join"] == "aggregate").all()
    assert agg.loc["queue", "server_mean_ms"] == pytest.approx(100) and math.isnan(agg.loc["queue", "client_mean_ms"])
    assert agg.loc["ttft", "client_mean_ms"] == pytest.approx(200) and agg.loc["ttft", "gap_ms"] == pytest.approx(20)
    assert agg.loc["e2e", "client_count"] == 2 and agg.loc["e2e", "gap_ms"] == pytest.approx(100)
    assert math.isnan(agg.loc["prefill", "server_mean_ms"]) and agg.loc["prefill", "server_count"] == 0


# ------------------------------------------------------------------------------------------ stopping


def _running(pid: int) -> bool:
    """Alive and not a zombie (an orphan's reaper may be slow inside a container)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def test_terminate_group_kills_children_and_is_idempotent() -> None:
    # a leader that ignores SIGTERM and a child in its group: SIGKILL after the grace period gets both
    code = (
        "import signal,subprocess,time,sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "p=subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)']); print(p.pid, flush=True); "
        "time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    t0 = time.monotonic()
    rc = terminate_group(proc, grace_s=0.5)
    assert rc is not None and time.monotonic() - t0 < 10
    time.sleep(0.2)
    assert not _running(child)
    assert terminate_group(proc, grace_s=0.1) == rc


def test_launcher_is_inert_on_import_and_patches_version() -> None:
    code = (
        "import importlib.metadata as m, runpy, sys; g = runpy.run_path(sys.argv[1], run_name='not_main'); "
        "g['_patch_version_lookup'](); print(m.version('pip') != '')"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(ROOT / "inferopt/engines/vllm/launch.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True"
    assert "import inferopt" not in (ROOT / "inferopt/engines/vllm/launch.py").read_text()
