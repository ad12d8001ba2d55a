"""The `vllm serve` interface as plain data, no process involved: the flags (`serve_args`) and environment
(`server_env`) a `VLLMSystem` launches with, and what the server hands back as text — `/metrics` reduced to
the flat series the analysis reads (`vllm_metrics`) and the tail of its log (`log_tail`).

`serve_args` is unit-tested: every `VLLMSystem` knob maps to its `vllm serve` flag; `None` leaves vLLM's
default.

Deliberately not here: starting, waiting on or stopping the server, HTTP, spans (`inferopt.engines.vllm.engine`);
the launcher script run under vLLM's interpreter (`launch.py`); parsing the Prometheus text
(`inferopt.transport.prometheus`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from inferopt.config import VLLMSystem
from inferopt.transport.prometheus import metric_sum, split_key

__all__ = ["log_tail", "serve_args", "server_env", "vllm_metrics"]

LOG_TAIL_CHARS = 4000
DECODE_DELAY_ENV = "INFEROPT_DIAGNOSTIC_DECODE_DELAY_MS"  # read by our vLLM plugin (scripts/vllm_plugin)


def serve_args(
    system: VLLMSystem,
    model_dir: str | Path,
    port: int,
    *,
    otlp_traces_endpoint: str | None = None,
    host: str = "127.0.0.1",
) -> list[str]:
    """`vllm serve` flags for `system` (pure). Booleans that vLLM spells `--x/--no-x` are passed either way
    when set; `None` leaves the flag out (vLLM's default)."""
    s = system
    args = [
        "--model",
        str(model_dir),
        "--served-model-name",
        s.name,
        "--host",
        host,
        "--port",
        str(port),
        "--dtype",
        s.dtype,
        "--kv-cache-dtype",
        s.kv_cache_dtype,
        "--scheduling-policy",
        s.scheduling_policy,
        "--tensor-parallel-size",
        str(s.tensor_parallel_size),
    ]

    def opt(flag: str, value: Any) -> None:
        if value is not None:
            args.extend([flag, str(value)])

    def flag(name: str, value: bool | None) -> None:
        if value is not None:
            args.append(f"--{name}" if value else f"--no-{name}")

    opt("--max-model-len", s.max_model_len)
    opt("--max-num-seqs", s.max_num_seqs)
    opt("--max-num-batched-tokens", s.max_num_batched_tokens)
    flag("enable-chunked-prefill", s.enable_chunked_prefill)
    flag("enable-prefix-caching", s.enable_prefix_caching)
    opt("--max-num-queued-reqs", s.max_num_queued_reqs)
    opt("--quantization", s.quantization)
    if s.speculative_config is not None:
        args.extend(["--speculative-config", json.dumps(s.speculative_config, sort_keys=True, separators=(",", ":"))])
    if s.enforce_eager:
        args.append("--enforce-eager")
    opt("--kv-cache-memory-bytes", s.kv_cache_memory_bytes)
    opt("--gpu-memory-utilization", s.gpu_memory_utilization)
    opt("--block-size", s.block_size)
    # usage reports prompt_tokens_details.cached_tokens per request: the cache-hit dimension (M4) per record
    args.append("--enable-prompt-tokens-details")
    if otlp_traces_endpoint:
        # one span per finished request; no --collect-detailed-traces: vLLM 0.32's request span carries
        # no model forward/execute times whatever it says, so it would only add overhead
        args.extend(["--otlp-traces-endpoint", otlp_traces_endpoint])
    args.extend(s.extra_args)
    return args


def server_env(system: VLLMSystem, base: dict[str, str] | None = None) -> dict[str, str]:
    """The server's environment (pure given `base`): dev-mode routes on (prefix-cache reset), OTLP over
    HTTP/protobuf with a 100 ms batch delay (spans arrive while the run is still going), passive OpenMP
    waits (busy-waiting threads starve the client on a small CPU box), `VLLM_TARGET_DEVICE=cpu` for a CPU
    system (no platform guessing), the diagnostic decode delay when planted, then `system.extra_env`."""
    env = dict(os.environ if base is None else base)
    env.update(
        {
            "VLLM_SERVER_DEV_MODE": "1",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_SERVICE_NAME": f"inferopt-{system.name}",
            "PYTHONUNBUFFERED": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        }
    )
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if system.device == "cpu":
        env["VLLM_TARGET_DEVICE"] = "cpu"
    env.pop(DECODE_DELAY_ENV, None)  # planted only by the system's own diagnostic knob, never inherited
    if system.diagnostic_decode_delay_ms:
        env[DECODE_DELAY_ENV] = repr(float(system.diagnostic_decode_delay_ms))
    env.update(system.extra_env)
    return env


# the /metrics series the analysis reads: (our key, prometheus metric, kind)
_GAUGES = {
    "kv_cache_usage_perc": "vllm:kv_cache_usage_perc",
    "num_requests_running": "vllm:num_requests_running",
    "num_requests_waiting": "vllm:num_requests_waiting",
}
_COUNTERS = {
    "num_preemptions_total": "vllm:num_preemptions_total",
    "prefix_cache_hits_total": "vllm:prefix_cache_hits_total",
    "prefix_cache_queries_total": "vllm:prefix_cache_queries_total",
    "prompt_tokens_total": "vllm:prompt_tokens_total",
    "generation_tokens_total": "vllm:generation_tokens_total",
    "admission_rejections_total": "vllm:admission_rejections_total",
    "spec_decode_num_drafts": "vllm:spec_decode_num_drafts_total",  # speculative decoding (K5)
    "spec_decode_num_draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "spec_decode_num_accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
}
_HISTOGRAMS = {
    "queue_time_s": "vllm:request_queue_time_seconds",
    "prefill_time_s": "vllm:request_prefill_time_seconds",
    "decode_time_s": "vllm:request_decode_time_seconds",
    "inference_time_s": "vllm:request_inference_time_seconds",
    "ttft_s": "vllm:time_to_first_token_seconds",
    "itl_s": "vllm:inter_token_latency_seconds",
    "e2e_s": "vllm:e2e_request_latency_seconds",
}


def vllm_metrics(raw: dict[str, float]) -> dict[str, float]:
    """Parsed `/metrics` (`parse_prometheus` keys) -> a flat dict: gauges and counters summed over label
    sets, admission rejections also per `reason`, histograms as `<name>_sum` / `<name>_count`. Missing
    series are left out (not zero), so a renamed metric shows up as absent, not as 'nothing happened'."""
    names = {split_key(k)[0] for k in raw}
    out: dict[str, float] = {}
    for key, metric in {**_GAUGES, **_COUNTERS}.items():
        if metric in names:
            out[key] = metric_sum(raw, metric)
    for k, v in raw.items():
        name, labels = split_key(k)
        if name == "vllm:admission_rejections_total" and "reason" in labels:
            rk = f"admission_rejections_total.{labels['reason']}"
            out[rk] = out.get(rk, 0.0) + v
        elif name == "vllm:spec_decode_num_accepted_tokens_per_pos_total" and "position" in labels:
            rk = f"spec_decode_num_accepted_tokens_per_pos.{labels['position']}"
            out[rk] = out.get(rk, 0.0) + v
    for key, metric in _HISTOGRAMS.items():
        for part in ("sum", "count"):
            if f"{metric}_{part}" in names:
                out[f"{key}_{part}"] = metric_sum(raw, f"{metric}_{part}")
    return out


def log_tail(path: Path, chars: int = LOG_TAIL_CHARS) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return "(no log)"
    return data[-chars:].decode("utf-8", "replace")
