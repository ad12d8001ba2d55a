"""vLLM's per-request OpenTelemetry span (`llm_request`, vLLM 0.32) read as `ServerTimings` on our clock.

`vllm_request_id` is the id vLLM gives a request sent with `X-Request-Id` (the join key); `timings_from_vllm_span`
maps the span's latency attributes onto the phases — the mapping and its approximations are described in
`inferopt.measure.join`, which puts these timings onto the client's records.

Deliberately not here: receiving spans (`inferopt.transport.otel`) or joining them with records
(`inferopt.measure.join`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from inferopt.records import ServerTimings
from inferopt.transport.otel import SpanRecord

__all__ = ["VLLM_SPAN_ATTRIBUTES", "timings_from_vllm_span", "vllm_request_id"]

VLLM_SPAN_ATTRIBUTES = {
    "request_id": "gen_ai.request.id",
    "queue_s": "gen_ai.latency.time_in_queue",
    "prefill_s": "gen_ai.latency.time_in_model_prefill",
    "decode_s": "gen_ai.latency.time_in_model_decode",
    "inference_s": "gen_ai.latency.time_in_model_inference",
    "ttft_s": "gen_ai.latency.time_to_first_token",
    "e2e_s": "gen_ai.latency.e2e",
    "prompt_tokens": "gen_ai.usage.prompt_tokens",
    "completion_tokens": "gen_ai.usage.completion_tokens",
}


def vllm_request_id(x_request_id: str, prompt_index: int = 0) -> str:
    """The id vLLM's /v1/completions gives a request sent with header `X-Request-Id: x_request_id`."""
    return f"cmpl-{x_request_id}-{prompt_index}"


def _num(attrs: Mapping[str, Any], key: str) -> float | None:
    v = attrs.get(VLLM_SPAN_ATTRIBUTES[key])
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def timings_from_vllm_span(span: SpanRecord, offset_s: float = 0.0) -> ServerTimings:
    """One vLLM `llm_request` span -> `ServerTimings` on our clock (wall-clock seconds - `offset_s`).
    Phases the span lacks stay None (the mapping and its approximations: `inferopt.measure.join`)."""
    a = span.attributes
    arrival = span.start_unix_ns / 1e9 - offset_s
    queue, prefill, ttft, e2e = _num(a, "queue_s"), _num(a, "prefill_s"), _num(a, "ttft_s"), _num(a, "e2e_s")
    admitted = arrival + queue if queue is not None else None
    prefill_end = admitted + prefill if admitted is not None and prefill is not None else None
    first = arrival + ttft if ttft is not None and ttft > 0 else None
    done = arrival + e2e if e2e is not None else None
    return ServerTimings(
        arrival_s=arrival,
        admitted_s=admitted,
        context_ready_s=admitted,
        prefill_start_s=admitted,
        prefill_end_s=prefill_end,
        token_s=[first] if first is not None else [],
        done_s=done,
    )
