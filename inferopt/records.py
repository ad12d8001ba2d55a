"""RequestRecord: what happened to one request, as raw timestamps plus its outcome — nothing derived.

All `*_s` timestamps are seconds on one clock: `now_s()`, a monotonic clock anchored to the Unix epoch
at import, so in-process engines, the load runner and (later) server-side spans can be compared.
Metrics (TTFT, TPOT, Q, T_prefill, residuals) are pure functions of these fields in `inferopt.measure.phases`.

`RecordSink` appends each finished record as one JSON line and flushes, so killing a run mid-way leaves
every finished request on disk (fsync runs on a background thread, off the event loop); a record it cannot
write (disk full) stops the run with RecordWriteError. Failures are records too (M2): outcome + error.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Literal

import numpy as np
import pandas as pd

Outcome = Literal["ok", "timeout", "rejected", "error"]
OUTCOMES: tuple[str, ...] = ("ok", "timeout", "rejected", "error")

_EPOCH_ANCHOR = time.time() - time.perf_counter()


def now_s() -> float:
    """Epoch seconds from the monotonic high-resolution clock (safe to subtract, comparable across threads)."""
    return _EPOCH_ANCHOR + time.perf_counter()


def clock_offset_s() -> float:
    """time.time() - now_s(): add to a `now_s()` time to get wall-clock epoch seconds."""
    return time.time() - now_s()


@dataclass
class ServerTimings:
    """What the engine itself saw for one request (server side). None = that phase never happened."""

    arrival_s: float | None = None  # engine received the request
    admitted_s: float | None = None  # left the queue: picked into a batch
    context_ready_s: float | None = None  # prompt tokenized / context assembled (C_context ends)
    prefill_start_s: float | None = None
    prefill_end_s: float | None = None  # prefill forward done (logits for the first token exist)
    token_s: list[float] = field(default_factory=list)  # emission time of each output token
    done_s: float | None = None
    cached_tokens: int = 0  # prompt tokens served from a prefix cache
    batch_size_at_admit: int | None = None  # sequences in the batch this request joined
    finish_reason: str | None = None  # "eos", "length", "cancelled", ...
    spec_drafted: list[int] = field(default_factory=list)  # speculative decoding: tokens drafted per verify round
    spec_accepted: list[int] = field(default_factory=list)  # ... and accepted by the target, per round


@dataclass
class RequestRecord:
    """One request's life, client and server side. Column names carry units (`_s` epoch seconds)."""

    request_id: str
    outcome: Outcome
    error: str | None = None
    # workload facts
    input_len: int = 0
    target_output_len: int = 0
    tenant: str = "default"
    priority: int = 0
    prefix_group: int = -1
    # client side
    intended_s: float = 0.0  # when the open-loop schedule said to send
    sent_s: float | None = None  # when the request actually left the client (HTTP: headers written)
    client_token_s: list[float] = field(default_factory=list)  # receive time of each token
    client_chunk_s: list[float] = field(
        default_factory=list
    )  # receive time of each chunk (one may hold several tokens)
    client_chunk_tokens: list[int] = field(default_factory=list)  # tokens in each chunk (same length as client_chunk_s)
    client_done_s: float | None = None
    external_s: float = 0.0  # T_external: tool calls / transport the client spent outside the engine
    history_s: float = 0.0  # client-side C_context: the session history's read from its store before the send
    # multi-turn sessions (empty / -1 / 0 for a single request): its session, its turn, the session's planned turns
    session_id: str = ""
    turn: int = -1
    session_turns: int = 0
    # a session turn that leads to a tool call: the model is asked for the call in the quality suite's format
    # (`inferopt.measure.tool_turns`); "" / None when the turn asked for none or the answer cannot be read as text
    tool_ask_id: str = ""  # the ask (a suite-format tool prompt), "" when the turn asked for no call
    tool_lang: str = ""
    tool_expected: str = ""  # the expected call (JSON text)
    tool_answer: str | None = None  # the model's answer as text, up to EOS (None: no text to read)
    tool_json_valid: bool | None = None  # None: not applicable (see `tool_note`)
    tool_args_ok: bool | None = None  # its arguments equal the expected ones
    tool_numbers_ok: bool | None = None  # order id and amount exactly
    tool_args_source: str = ""  # what the tool service was called with: "model" (parsed, valid) | "expected"
    tool_note: str = ""  # why the answer was not scored (not applicable), else ""
    output_len: int = 0
    # server side
    arrival_s: float | None = None
    admitted_s: float | None = None
    context_ready_s: float | None = None
    prefill_start_s: float | None = None
    prefill_end_s: float | None = None
    token_s: list[float] = field(default_factory=list)
    done_s: float | None = None
    cached_tokens: int = 0
    batch_size_at_admit: int | None = None
    finish_reason: str | None = None
    spec_drafted: list[int] = field(default_factory=list)  # speculative decoding, per verify round (else empty)
    spec_accepted: list[int] = field(default_factory=list)
    output_token_ids: list[int] = field(default_factory=list)
    # context of the run (set by whoever runs it)
    run_tag: str = ""
    arm: str = ""
    trial: int = 0
    scenario: str = ""
    warmup: bool = False  # warm-up requests are recorded but excluded from metrics

    def with_server(self, server: ServerTimings) -> "RequestRecord":
        for f in fields(ServerTimings):
            setattr(self, f.name, getattr(server, f.name))
        return self

    def to_json(self) -> str:
        # the fields are plain values and lists of them: no need for asdict's deep copy
        return json.dumps(vars(self), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RequestRecord":
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


class RecordWriteError(OSError):
    """A record could not be written (disk full, read-only, I/O error): the run must stop, not go on without it."""


class RecordSink:
    """Append-only JSONL file of finished records.

    Each line is written (one `write` on an unbuffered descriptor) the moment its record finishes, so a killed
    process leaves every finished request in the file. With `fsync` (the default) a background thread also
    forces the file to disk, coalescing lines that arrive while it syncs: an fsync costs ~0.3-2 ms, and done
    inline on the event loop it would delay sends and token timestamps. `close()` syncs once more.

    A failed write (ENOSPC, EROFS, EIO) cuts the file back to its last complete line, keeps the error in
    `error` and raises it as RecordWriteError; every later write raises it again, so the run stops loudly with
    `written` records kept, never a torn line. `write_bytes(fd, data)` is `os.write` (tests inject faults).
    """

    def __init__(
        self, path: str | Path, fsync: bool = True, write_bytes: Callable[[int, bytes], int] = os.write
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._good_bytes = os.fstat(self._fd).st_size
        self._write_bytes = write_bytes
        self.written = 0
        self.error: RecordWriteError | None = None
        self._closed = False
        self._fsync = fsync
        self._dirty = threading.Event()
        self._closing = False
        self._syncer: threading.Thread | None = None
        if fsync:
            self._syncer = threading.Thread(target=self._sync_loop, name=f"fsync-{self.path.name}", daemon=True)
            self._syncer.start()

    def _sync_loop(self) -> None:
        while True:
            self._dirty.wait()
            self._dirty.clear()
            if self._closing:
                return
            try:
                os.fsync(self._fd)
            except OSError as exc:
                self.error = self.error or self._error(exc)
                return

    def _error(self, exc: OSError) -> RecordWriteError:
        return RecordWriteError(
            exc.errno,
            f"{self.path}: writing request records failed ({exc.strerror or exc}); the run stops here. "
            f"Kept: {self.written} finished records written before it (complete lines only); "
            f"fix: free space or make {self.path.parent} writable, then run again (or --resume)",
        )

    def write(self, record: RequestRecord) -> None:
        if self.error is not None:
            raise self.error
        data = (record.to_json() + "\n").encode("utf-8")
        try:
            done = 0
            while done < len(data):
                done += self._write_bytes(self._fd, data[done:])
        except OSError as exc:
            self.error = self._error(exc)
            try:  # no torn line: back to the last complete record
                os.ftruncate(self._fd, self._good_bytes)
            except OSError:
                pass
            raise self.error from exc
        self._good_bytes += len(data)
        self.written += 1
        if self._fsync:
            self._dirty.set()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._syncer is not None:
            self._closing = True
            self._dirty.set()
            self._syncer.join()
        try:
            if self._fsync:
                os.fsync(self._fd)
        except OSError as exc:
            self.error = self.error or self._error(exc)
        finally:
            os.close(self._fd)

    def __enter__(self) -> "RecordSink":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_records(path: str | Path) -> list[RequestRecord]:
    """Read a JSONL sink back; a torn last line (killed mid-write) is skipped."""
    out = []
    with Path(path).open(encoding="utf-8") as fh:
        for line in fh:
            try:
                out.append(RequestRecord.from_dict(json.loads(line)))
            except json.JSONDecodeError:
                continue
    return out


_LIST_COLUMNS = (
    "client_token_s",
    "client_chunk_s",
    "client_chunk_tokens",
    "token_s",
    "output_token_ids",
    "spec_drafted",
    "spec_accepted",
)


def records_to_frame(records: Iterable[RequestRecord]) -> pd.DataFrame:
    """requests table: one row per request, scalar columns only (token lists go to `tokens_to_frame`).
    Adds first/last token timestamps so per-request metrics need no list columns."""
    rows = []
    for r in records:
        d = asdict(r)
        for col in _LIST_COLUMNS:
            d.pop(col)
        d["first_token_s"] = r.token_s[0] if r.token_s else None
        d["last_token_s"] = r.token_s[-1] if r.token_s else None
        d["client_first_token_s"] = r.client_token_s[0] if r.client_token_s else None
        d["client_last_token_s"] = r.client_token_s[-1] if r.client_token_s else None
        d["n_client_tokens"] = len(r.client_token_s)
        d["n_client_chunks"] = len(r.client_chunk_s)
        d.update(itl_stats_ms(r.client_token_s, r.client_chunk_tokens))
        d["spec_rounds"] = len(r.spec_accepted)
        d["spec_accepted_tokens"] = sum(r.spec_accepted)
        rows.append(d)
    columns = [f.name for f in fields(RequestRecord) if f.name not in _LIST_COLUMNS] + [
        "first_token_s",
        "last_token_s",
        "client_first_token_s",
        "client_last_token_s",
        "n_client_tokens",
        "n_client_chunks",
        *ITL_COLUMNS,
        "spec_rounds",
        "spec_accepted_tokens",
    ]
    return pd.DataFrame(rows, columns=columns)


ITL_COLUMNS = ("itl_ms_p50", "itl_ms_p95", "itl_ms_p99", "itl_ms_max", "max_chunk_tokens")


def itl_stats_ms(client_token_s: list[float], chunk_tokens: list[int]) -> dict[str, float]:
    """One request's inter-token latency distribution as the client saw it (gaps between received tokens,
    ms: p50/p95/p99/max) and its burstiness (the most tokens that arrived in one chunk). Tokens of one chunk
    share a receive time, so a burst shows as zero gaps followed by one long one."""
    gaps = np.diff(np.asarray(client_token_s, dtype=float)) * 1000.0 if len(client_token_s) > 1 else np.array([])
    out = {c: float("nan") for c in ITL_COLUMNS}
    if gaps.size:
        p50, p95, p99 = np.quantile(gaps, [0.5, 0.95, 0.99])
        out.update(itl_ms_p50=float(p50), itl_ms_p95=float(p95), itl_ms_p99=float(p99), itl_ms_max=float(gaps.max()))
    out["max_chunk_tokens"] = float(max(chunk_tokens)) if chunk_tokens else (1.0 if client_token_s else float("nan"))
    return out


def smoothed_gaps_ms(chunk_s: list[float], chunk_tokens: list[int]) -> np.ndarray:
    """Per-token gaps of a stream paced evenly within each chunk (ms): the interval before chunk i spread over
    its tokens (interval / tokens, once per token), what a client that smooths a speculative round's burst
    shows. The first chunk's tokens have no interval before them (they end the TTFT) and give no gap."""
    t = np.asarray(chunk_s, dtype=float)
    n = np.asarray(chunk_tokens, dtype=float)
    if t.size < 2 or n.size != t.size:
        return np.array([])
    per_token = np.diff(t) * 1000.0 / np.maximum(n[1:], 1.0)
    return np.repeat(per_token, np.maximum(n[1:], 1).astype(int))


def pooled_itl_ms(records: Iterable[RequestRecord]) -> dict[str, float]:
    """The run's ITL distribution: every gap between consecutive tokens of every ok, non-warm-up request, as
    received (raw: the tokens of one chunk share a time, so a burst is zero gaps then a long one) and smoothed
    within each chunk (`smoothed_gaps_ms`): the two differ where tokens arrive in bursts (speculative rounds)."""
    recs = [r for r in records if r.outcome == "ok" and not r.warmup and len(r.client_token_s) > 1]
    raw = [np.diff(np.asarray(r.client_token_s, dtype=float)) * 1000.0 for r in recs]
    allg = np.concatenate(raw) if raw else np.array([])
    if not allg.size:
        return {}
    out = _gap_quantiles(allg, "itl_ms")
    smooth = [smoothed_gaps_ms(r.client_chunk_s, r.client_chunk_tokens) for r in recs]
    smooth_all = np.concatenate(smooth) if smooth else np.array([])
    if smooth_all.size:
        out |= _gap_quantiles(smooth_all, "itl_smoothed_ms")
    chunks = [max(r.client_chunk_tokens) for r in recs if r.client_chunk_tokens]
    out["max_chunk_tokens"] = float(max(chunks)) if chunks else 1.0
    return out


def _gap_quantiles(gaps_ms: np.ndarray, prefix: str) -> dict[str, float]:
    p50, p95, p99 = np.quantile(gaps_ms, [0.5, 0.95, 0.99])
    return {
        f"{prefix}_p50": float(p50),
        f"{prefix}_p95": float(p95),
        f"{prefix}_p99": float(p99),
        f"{prefix}_max": float(gaps_ms.max()),
    }


def tokens_to_frame(records: Iterable[RequestRecord]) -> pd.DataFrame:
    """tokens table: one row per output token (request_id, arm, trial, scenario, index, server_s, client_s)."""
    rows = []
    for r in records:
        n = max(len(r.token_s), len(r.client_token_s))
        for i in range(n):
            rows.append(
                {
                    "request_id": r.request_id,
                    "arm": r.arm,
                    "trial": r.trial,
                    "scenario": r.scenario,
                    "index": i,
                    "token_id": r.output_token_ids[i] if i < len(r.output_token_ids) else None,
                    "server_s": r.token_s[i] if i < len(r.token_s) else None,
                    "client_s": r.client_token_s[i] if i < len(r.client_token_s) else None,
                }
            )
    return pd.DataFrame(
        rows, columns=["request_id", "arm", "trial", "scenario", "index", "token_id", "server_s", "client_s"]
    )
