"""The phase join (SPEC M3): server-side timings onto client-side records, per request (spans) or per run
(histograms).

Per request: vLLM's OpenTelemetry `llm_request` span (vLLM 0.32 `OutputProcessor.do_tracing`, one per finished
request, keyed by `X-Request-Id`) mapped to `ServerTimings` on our clock (`timings_from_vllm_span`, which
states the mapping and its approximations; `clock_offset_s` states the clock bound). Per run, when an engine
gives only Prometheus histograms: `aggregate_join`, server means beside client means, labelled `aggregate` and
never written into per-request fields.

Deliberately not here: receiving spans (`inferopt.transport.otel`), launching servers (engines), phase
arithmetic (`inferopt.measure.phases`).
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from inferopt.records import RequestRecord, ServerTimings, now_s
from inferopt.transport.otel import SpanRecord

__all__ = [
    "VLLM_SPAN_ATTRIBUTES",
    "aggregate_join",
    "clock_offset_s",
    "join_server_timings",
    "rewrite_records",
    "timings_from_vllm_span",
    "vllm_request_id",
]

# The span's attributes we read (seconds unless noted). The span starts at arrival (front-end `time.time()` when
# the request reached the engine client, after the HTTP handler parsed it) and ends when it was made (~ e2e).
VLLM_SPAN_ATTRIBUTES = {
    "request_id": "gen_ai.request.id",  # `cmpl-<X-Request-Id>-<i>` (i = prompt index, 0 for us)
    "queue_s": "gen_ai.latency.time_in_queue",  # scheduled - queued (engine-core monotonic clock)
    "prefill_s": "gen_ai.latency.time_in_model_prefill",  # first token - scheduled (engine core)
    "decode_s": "gen_ai.latency.time_in_model_decode",  # last token - first token (engine core)
    "inference_s": "gen_ai.latency.time_in_model_inference",  # last token - scheduled (engine core)
    "ttft_s": "gen_ai.latency.time_to_first_token",  # first output processed - arrival (front-end wall clock)
    "e2e_s": "gen_ai.latency.e2e",  # finished output processed - arrival (front-end wall clock)
    "prompt_tokens": "gen_ai.usage.prompt_tokens",  # count
    "completion_tokens": "gen_ai.usage.completion_tokens",  # count
}


def vllm_request_id(x_request_id: str, prompt_index: int = 0) -> str:
    """The id vLLM's /v1/completions gives a request sent with header `X-Request-Id: x_request_id`."""
    return f"cmpl-{x_request_id}-{prompt_index}"


def clock_offset_s() -> float:
    """time.time() - now_s(): add to a `now_s()` time to get wall-clock epoch seconds.

    Span times are the server's wall clock, records are on `now_s()` (monotonic, anchored to the epoch at
    import); on one host both read the same system clock. The join's error is the drift of the wall clock
    against the monotonic clock between our anchoring and the run (NTP steps; slewing moves both alike):
    this offset measured before and after a run bounds it, and it is reported (`clock_drift_ms`, typically
    microseconds). Across hosts the join needs synchronised clocks (NTP: ~ms)."""
    return time.time() - now_s()


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

    arrival = span start; admitted = arrival + queue; context_ready = prefill_start = admitted (vLLM has no
    separate context phase for token-id prompts: C_context = 0); prefill_end = admitted + prefill; token_s =
    [arrival + TTFT] (the only per-token server time a span gives); done = arrival + e2e. Phases the span
    lacks stay None. Approximations, documented not hidden: (1) the front end -> engine core hand-off (IPC)
    is not in the queue interval, so `admitted` and `prefill_end` are early by it and T_first absorbs it plus
    the hand-off back (outputs, detokenisation): "server-internal transport + emission", not a model step;
    (2) engine-core monotonic intervals are placed on the front end's wall-clock axis; (3) spans carry no
    cached-token count (the record keeps the stream's); (4) no per-token times: `decode_ms` for such records
    is done - first token (`phases.phase_table`)."""
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


def join_server_timings(records: Iterable[RequestRecord], timings: Mapping[str, ServerTimings]) -> list[RequestRecord]:
    """New records with server fields from `timings` (by request_id) where there is one; others unchanged.
    What the stream already knew and the span does not carry (cached tokens, finish reason, batch size)
    is kept."""
    out = []
    for r in records:
        t = timings.get(r.request_id)
        if t is None:
            out.append(r)
            continue
        keep = {
            "cached_tokens": t.cached_tokens or r.cached_tokens,
            "finish_reason": t.finish_reason or r.finish_reason,
            "batch_size_at_admit": t.batch_size_at_admit
            if t.batch_size_at_admit is not None
            else r.batch_size_at_admit,
        }
        new = replace(r, token_s=list(r.token_s))
        new.with_server(replace(t, **keep))
        out.append(new)
    return out


def rewrite_records(path: str | Path, records: Iterable[RequestRecord]) -> None:
    """Replace the JSONL at `path` with `records`, atomically (temp file in the same folder + rename):
    a crash mid-rewrite leaves the streamed client-side file intact."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            for r in records:
                fh.write(r.to_json() + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# ------------------------------------------------------------------------------------------ aggregate

# flat metric names (as `inferopt.engines.vllm.serve.vllm_metrics` writes them) -> the client/phase column
AGGREGATE_PHASES = (
    ("queue_ms", "queue_time_s"),
    ("prefill_ms", "prefill_time_s"),
    ("decode_ms", "decode_time_s"),
    ("ttft_ms", "ttft_s"),
    ("e2e_ms", "e2e_s"),
)


def aggregate_join(phases: pd.DataFrame, metrics_delta: Mapping[str, float]) -> pd.DataFrame:
    """Per-run means: server histograms (delta of `<m>_sum` / delta of `<m>_count` over the run) beside the
    client-side means of ok requests — an aggregate join, not per request. One row per phase:
    phase, server_mean_ms, server_count, client_mean_ms (NaN where the client cannot see the phase),
    client_count, gap_ms (client - server: transport + client-side lag for TTFT/E2E), join='aggregate'."""
    ok = phases[phases["outcome"] == "ok"] if "outcome" in phases else phases
    rows = []
    for col, metric in AGGREGATE_PHASES:
        s, c = metrics_delta.get(f"{metric}_sum"), metrics_delta.get(f"{metric}_count")
        server_ms = 1000.0 * s / c if s is not None and c else math.nan
        client = (
            pd.to_numeric(ok[col], errors="coerce").dropna() if col in ok and col in ("ttft_ms", "e2e_ms") else None
        )
        client_ms = float(client.mean()) if client is not None and len(client) else math.nan
        rows.append(
            {
                "phase": col.removesuffix("_ms"),
                "server_mean_ms": server_ms,
                "server_count": float(c or 0.0),
                "client_mean_ms": client_ms,
                "client_count": len(client) if client is not None else 0,
                "gap_ms": client_ms - server_ms,
                "join": "aggregate",
            }
        )
    return pd.DataFrame(rows)
