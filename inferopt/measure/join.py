"""The phase join (SPEC M3): server-side timings onto client-side records, per request (spans) or per run
(histograms).

Per request: vLLM's OpenTelemetry `llm_request` span (vLLM 0.32 `OutputProcessor.do_tracing`, one per finished
request, keyed by `X-Request-Id`) mapped to `ServerTimings` on our clock (`inferopt.engines.vllm.spans`, which
states the mapping and its approximations; `inferopt.records.clock_offset_s` states the clock bound). Per run,
when an engine gives only Prometheus histograms: `aggregate_join`, server means beside client means, labelled
`aggregate` and never written into per-request fields.

Deliberately not here: receiving spans (`inferopt.transport.otel`), launching servers (engines), phase
arithmetic (`inferopt.measure.phases`).
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

import pandas as pd

from inferopt.records import RequestRecord, ServerTimings

__all__ = ["aggregate_join", "join_server_timings", "rewrite_records"]


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


def rewrite_records(path: str | Path, records: Iterable[RequestRecord], keep_bytes: int = 0) -> None:
    """Replace this run's part of the JSONL at `path` with `records`, atomically (temp file in the same folder +
    rename): the first `keep_bytes` (what the file held before this run: earlier trials sharing the stream) are
    kept as they are; a crash mid-rewrite leaves the streamed client-side file intact."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            if keep_bytes:
                with path.open("rb") as old:
                    fh.write(old.read(keep_bytes))
            for r in records:
                fh.write((r.to_json() + "\n").encode("utf-8"))
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
