"""Other load generators' per-request result files as our request records, so past runs of GuideLLM or AIPerf
enter the same analysis (phases, slices, statistics, Benchmark Reports) as ours:

- GuideLLM (0.7+, report schema v2): the benchmarks JSON (`--output kind=json`); each benchmark's
  `requests.successful / errored / incomplete` carry per-request timings (`info.timings`, epoch seconds).
- AIPerf (0.13): `profile_export.jsonl` (`--export-level records`): one record per line, `metadata` with
  epoch-nanosecond timestamps (`credit_issued_ns`, `request_start_ns`, `request_end_ns`) and `metrics`
  (`time_to_first_token`, `inter_chunk_latency`, `output_sequence_length`, ...).

Mapping: the intended send time is the tool's scheduled time (GuideLLM `targeted_start`, AIPerf
`credit_issued_ns`), the send time its request start, the first token its first-token time, the last token at
the end of the stream; tokens between them are spread evenly (neither file stamps every token), so TPOT is
exact and per-token gaps are not. Server-side timestamps stay empty: these tools see only the client.
Deliberately not here: files without per-request data (summary-only exports are refused with the reason).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from inferopt.records import RequestRecord

NS = 1e-9


def token_times_s(first_s: float | None, last_s: float | None, n: int) -> list[float]:
    """`n` token arrival times: the first at `first_s`, the rest evenly up to `last_s`."""
    if first_s is None or n <= 0:
        return []
    if n == 1 or last_s is None or last_s <= first_s:
        return [first_s] * n
    step = (last_s - first_s) / (n - 1)
    return [first_s + i * step for i in range(n)]


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _guidellm_record(req: dict[str, Any], status: str, bench: int, run_tag: str) -> RequestRecord:
    info = req.get("info") or {}
    t = info.get("timings") or {}
    out_tokens = int((req.get("output_metrics") or {}).get("text_tokens") or 0)
    first, last = _num(t.get("first_token_iteration")), _num(t.get("last_token_iteration"))
    outcome = "ok" if status == "successful" else "error"
    error = None if outcome == "ok" else str(info.get("error") or f"guidellm: request {status}")
    tokens = token_times_s(first, last, out_tokens)  # none when no token came (first is None)
    return RequestRecord(
        request_id=str(req.get("request_id") or info.get("request_id")),
        outcome=outcome,
        error=error,
        input_len=int((req.get("input_metrics") or {}).get("text_tokens") or 0),
        target_output_len=out_tokens,
        intended_s=_num(t.get("targeted_start")) or _num(t.get("scheduled_at")) or _num(t.get("request_start")) or 0.0,
        sent_s=_num(t.get("request_start")),
        client_token_s=tokens,
        client_chunk_s=tokens,
        client_chunk_tokens=[1] * len(tokens),
        client_done_s=_num(t.get("request_end")),
        output_len=len(tokens),
        run_tag=run_tag,
        arm="guidellm",
        trial=bench,
        scenario=status if status != "successful" else "guidellm",
    )


def read_guidellm(path: str | Path) -> list[RequestRecord]:
    """Every per-request entry of a GuideLLM benchmarks JSON (`trial` = the benchmark's index)."""
    doc = json.loads(Path(path).read_text())
    benches = doc.get("benchmarks") if isinstance(doc, dict) else None
    if not benches:
        raise ValueError(f"{path}: no 'benchmarks' list: not a GuideLLM benchmarks JSON")
    out = []
    for i, bench in enumerate(benches):
        reqs = bench.get("requests") or {}
        for status in ("successful", "errored", "incomplete"):
            out += [_guidellm_record(r, status, i, Path(path).stem) for r in reqs.get(status) or []]
    if not out:
        raise ValueError(f"{path}: its benchmarks hold no per-request entries (saved without requests?)")
    return out


def _metric(metrics: dict[str, Any], name: str) -> Any:
    entry = metrics.get(name)
    return entry.get("value") if isinstance(entry, dict) else None


def _aiperf_tokens(meta: dict[str, Any], metrics: dict[str, Any], n: int) -> list[float]:
    start, ttft_ms = _num(meta.get("request_start_ns")), _num(_metric(metrics, "time_to_first_token"))
    if start is None or ttft_ms is None:
        return []
    first = start * NS + ttft_ms / 1000.0
    gaps = _metric(metrics, "inter_chunk_latency") or []
    last = first + sum(float(g) for g in gaps) / 1000.0 if isinstance(gaps, list) else None
    return token_times_s(first, last, n)


def aiperf_record(line: dict[str, Any], run_tag: str) -> RequestRecord:
    """One `profile_export.jsonl` record."""
    meta, metrics = line.get("metadata") or {}, line.get("metrics") or {}
    error = line.get("error")
    n = int(_metric(metrics, "output_sequence_length") or _metric(metrics, "output_token_count") or 0)
    tokens = [] if error else _aiperf_tokens(meta, metrics, n)
    cancelled = bool(meta.get("was_cancelled"))
    outcome = "error" if error else ("timeout" if cancelled else "ok")
    message = f"{error.get('type') or 'error'} {error.get('code') or ''}: {error.get('message')}" if error else None
    return RequestRecord(
        request_id=str(meta.get("x_request_id") or f"aiperf-{meta.get('session_num')}"),
        outcome=outcome,
        error=message or ("aiperf: request cancelled" if cancelled else None),
        input_len=int(_metric(metrics, "input_sequence_length") or 0),
        target_output_len=n,
        intended_s=(_num(meta.get("credit_issued_ns")) or _num(meta.get("request_start_ns")) or 0.0) * NS,
        sent_s=(_num(meta.get("request_start_ns")) or 0.0) * NS or None,
        client_token_s=tokens,
        client_chunk_s=tokens,
        client_chunk_tokens=[1] * len(tokens),
        client_done_s=(_num(meta.get("request_end_ns")) or 0.0) * NS or None,
        output_len=len(tokens),
        run_tag=run_tag,
        arm="aiperf",
        trial=int(meta.get("profiling_index") or 0),
        scenario=str(meta.get("phase_name") or meta.get("benchmark_phase") or "aiperf"),
        warmup=meta.get("benchmark_phase") == "warmup",
    )


def read_aiperf(path: str | Path) -> list[RequestRecord]:
    """Every record of an AIPerf `profile_export.jsonl`."""
    p = Path(path)
    lines = [json.loads(raw) for raw in p.read_text().splitlines() if raw.strip()]
    if not lines or not all(isinstance(x, dict) and "metadata" in x for x in lines):
        raise ValueError(f"{p}: not an AIPerf profile_export.jsonl (one JSON record with 'metadata' per line)")
    return [aiperf_record(x, p.stem) for x in lines]


def read_peer_file(path: str | Path) -> list[RequestRecord]:
    """A GuideLLM benchmarks JSON or an AIPerf profile_export.jsonl, told apart by their content."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except ValueError:  # several JSON documents: JSON lines
        return read_aiperf(p)
    if isinstance(doc, dict) and "benchmarks" in doc:
        return read_guidellm(p)
    if isinstance(doc, dict) and "metadata" in doc:  # a one-record jsonl
        return read_aiperf(p)
    raise ValueError(f"{p}: neither a GuideLLM benchmarks JSON nor an AIPerf profile_export.jsonl")
