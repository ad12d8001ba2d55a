"""Run one system on one workload: start its engine, replay the workload open-loop, stop the engine.

This is the unit every step reuses (measure, each ablation trial, each validation scenario). A crash anywhere —
the engine failing to load, the run dying — becomes a `MeasuredRun` with `failed` set and the error text, so the
caller can mark that arm failed and carry on. The run says where it failed (`failed_at`: "start" = the engine
could not be built or started, e.g. an ImportError for a GPU-only kernel; "run" = during the load) and the
exception's class names (`error_type`), so a caller can tell "cannot run here" from a crash. The phase join
(M3) happens here, between the replay and the engine stop (`_join`); `MeasuredRun.join` says which join ran and
how many requests it joined.

Deliberately not here: deciding what to run (steps do) and tracking (tasks/ log what comes back).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from inferopt.config import AnySystem
from inferopt.engines import EngineFactory, make_engine
from inferopt.engines.vllm.serve import vllm_metrics
from inferopt.measure.agentic import run_sessions
from inferopt.measure.history import SQLiteHistory
from inferopt.measure.join import aggregate_join, join_server_timings, rewrite_records
from inferopt.measure.phases import phase_table
from inferopt.measure.resources import ResourceSampler, load_window
from inferopt.measure.runner import LoadResult, RunTags, run_open_loop
from inferopt.measure.tool_turns import tool_turns_for
from inferopt.model.loading import resolve_model_dir
from inferopt.records import RecordSink, RecordWriteError, RequestRecord, clock_offset_s
from inferopt.transport.toolservice import ToolClient, ToolService
from inferopt.workload.output_lengths import run_mode
from inferopt.workload.sessions import has_sessions


@dataclass
class MeasuredRun:
    tags: RunTags
    records: list[RequestRecord] = field(default_factory=list)
    phases: pd.DataFrame = field(default_factory=pd.DataFrame)
    duration_s: float = 0.0
    engine_info: dict[str, Any] = field(default_factory=dict)
    server_metrics: dict[str, float] = field(default_factory=dict)
    warmup_declared: int = 0
    failed: bool = False
    error: str | None = None
    failed_at: str | None = None  # "start" (building or starting the engine) | "run" (replaying the load)
    error_type: str | None = None  # the exception's class and its bases, e.g. "ModuleNotFoundError,ImportError"
    join: dict[str, Any] = field(default_factory=dict)  # how server timings were joined (see module doc)
    aggregate_join: pd.DataFrame = field(default_factory=pd.DataFrame)  # per-run means when no per-request join
    # the serving process tree's peak RSS and CPU time over the measured load (+ NVML on GPUs, else a reason):
    # `inferopt.measure.resources.ResourceSampler.summary` — keys peak_rss_bytes, cpu_time_s, gpu, ...
    resources: dict[str, Any] = field(default_factory=dict)


DEADLINE_ALLOWANCE_S = 60.0  # beyond the schedule and request timeouts: the scrapes and the server-timings join


class RunDeadline(TimeoutError):
    """A trial ran past its run-level deadline: an engine call (a scrape, a join, a stream that ignores its
    request timeout) never returned. The trial is failed, never waited on forever."""


class ServerDied(RuntimeError):
    """The server an engine launched exited during the trial (killed, crashed)."""


def run_deadline_s(table: pd.DataFrame, timeout_s: float, warmup: int) -> float:
    """The longest a trial's load may take: its schedule, each warm-up and the last request given the whole
    request timeout, and `DEADLINE_ALLOWANCE_S` for the scrapes and the join."""
    span_s = float(table["arrival_offset_s"].max()) if len(table) else 0.0
    if has_sessions(table) and len(table):  # closed-loop turns: a session may take each turn's timeout, thinks, tools
        per_turn_s = timeout_s + (table["think_ms"] + table["tool_sleep_ms"].map(lambda t: sum(json.loads(t)))) / 1e3
        span_s += float(per_turn_s.groupby(table["session_id"]).sum().max()) - timeout_s
    return span_s + (warmup + 1) * timeout_s + DEADLINE_ALLOWANCE_S


class _StartFailed(Exception):
    """The engine could not be built or started (its cause is the engine's own exception)."""


def vocab_size_of(system: Any) -> int:
    """The vocabulary prompts are drawn below: the system's declared one, its pools' shared one, or its
    model's (`config.json`)."""
    caps = system.capabilities
    if caps.vocab_size is not None:
        return caps.vocab_size
    if caps.pools:  # prompts are built once for all pools: they must share a vocabulary
        sizes = {vocab_size_of(p) for p in caps.pools}
        if len(sizes) != 1:
            raise ValueError(
                f"pooled system {system.name!r}: its pools have different vocabularies {sorted(sizes)}; "
                "fix: serve one model (tokenizer) in every pool"
            )
        return sizes.pop()
    return int(json.loads((resolve_model_dir(caps.model) / "config.json").read_text())["vocab_size"])


async def _join(engine: Any, result: LoadResult) -> dict[str, Any]:
    """Per-request server timings from an engine that reports them after the stream; records replaced
    in `result` (warm-ups too). Returns the join's summary (kind "none": the engine has no such timings).

    An engine whose server timings arrive after the stream (`server_timings(request_ids)`, e.g. vLLM's
    OpenTelemetry spans) is asked for them and the records get their server fields (`inferopt.measure.join`);
    `run_system` then rewrites the records file atomically with the joined records (the streamed JSONL keeps
    the client-side records if the run dies first). An engine with only Prometheus histograms gets an
    aggregate join there instead (`MeasuredRun.aggregate_join`: per-run server means beside client means)."""
    offset_before = result.engine_info.get("_clock_offset_s")
    records = result.warmup_records + result.records
    ids = [r.request_id for r in records if r.outcome == "ok"]
    try:
        timings = await engine.server_timings(ids)
    except Exception as exc:  # noqa: BLE001 - a failed join leaves the client-side records, says why
        return {"kind": "per_request", "error": f"{type(exc).__name__}: {exc}", "n_ok": len(ids), "n_joined": 0}
    if timings is None:
        return {"kind": "none"}
    joined = join_server_timings(records, timings)
    nw = len(result.warmup_records)
    result.warmup_records, result.records = joined[:nw], joined[nw:]
    offset_after = clock_offset_s()
    out: dict[str, Any] = {
        "kind": "per_request",
        "source": "spans",
        "n_ok": len(ids),
        "n_joined": sum(1 for r in ids if r in timings),
        "missing": [r for r in ids if r not in timings][:20],
    }
    if offset_before is not None:
        out["clock_drift_ms"] = 1000.0 * (offset_after - offset_before)
    return out


async def _replay_sessions(
    engine: Any, table: pd.DataFrame, *, vocab_size: int, timeout_s: float, **kw: Any
) -> LoadResult:
    """A session table's replay with its services: a fresh SQLite history store (a temporary file) and the local
    tool service on 127.0.0.1, both stopped when the replay ends, however it ends."""
    with tempfile.TemporaryDirectory(prefix="inferopt-history-") as tmp, ToolService() as service:
        client = ToolClient(service.url, vocab_size, timeout_s=timeout_s)
        try:
            with SQLiteHistory(Path(tmp) / "history.sqlite") as store:
                return await run_sessions(
                    engine, table, vocab_size=vocab_size, timeout_s=timeout_s, tools=client, history=store, **kw
                )
        finally:
            await client.close()


async def _run(
    system: AnySystem,
    table: pd.DataFrame,
    tags: RunTags,
    sink: RecordSink | None,
    timeout_s: float,
    warmup: int,
    prompt_seed: int,
    wrap_engine: Callable[[Any], Any] | None = None,
    engine_factory: EngineFactory = make_engine,
    deadline_s: float | None = None,
) -> tuple[LoadResult, dict[str, Any]]:
    try:
        engine = engine_factory(system)
        if wrap_engine is not None:  # e.g. a client retry policy or a scheduled fault (inferopt.validation)
            engine = wrap_engine(engine)
        await engine.start()
    except Exception as exc:  # re-raised, marked as a start failure
        raise _StartFailed() from exc
    limit_s = deadline_s or run_deadline_s(table, timeout_s, warmup)
    deadline = asyncio.timeout(limit_s)
    try:
        async with deadline:
            return await _load_and_join(engine, system, table, tags, sink, timeout_s, warmup, prompt_seed)
    except TimeoutError:
        if not deadline.expired():
            raise
        raise RunDeadline(
            f"the trial passed its run-level deadline of {limit_s:.0f} s "
            "(schedule + request timeouts + allowance): an engine call never returned; the trial is failed"
        ) from None
    finally:
        await engine.stop()


async def _load_and_join(
    engine: Any,
    system: AnySystem,
    table: pd.DataFrame,
    tags: RunTags,
    sink: RecordSink | None,
    timeout_s: float,
    warmup: int,
    prompt_seed: int,
) -> tuple[LoadResult, dict[str, Any]]:
    offset_before = clock_offset_s()
    mode = run_mode(table, system.capabilities)
    replay = _replay_sessions if has_sessions(table) else run_open_loop
    extra = {"tool_turns": tool_turns_for(system)} if has_sessions(table) else {}
    result = await replay(
        engine,
        table,
        vocab_size=vocab_size_of(system),
        timeout_s=timeout_s,
        tags=tags,
        sink=sink,
        prompt_seed=prompt_seed,
        warmup_requests=warmup,
        force_lengths=mode == "forced",
        **extra,
    )
    info = {**result.engine_info, **engine.info(), "output_lengths": mode}
    result.engine_info = {**info, "_clock_offset_s": offset_before}
    if result.engine_info.get("server_died") is not None:  # its records stay in the stream file
        raise ServerDied(
            f"the server exited (code {result.engine_info['server_died']}) during the trial: the trial is failed, "
            "not averaged over the requests it served before"
        )
    join = await _join(engine, result)
    result.engine_info.pop("_clock_offset_s", None)
    return result, join


def run_system(
    system: AnySystem,
    table: pd.DataFrame,
    tags: RunTags,
    *,
    timeout_s: float,
    records_path: str | Path | None = None,
    warmup_requests: int = 0,
    prompt_seed: int = 0,
    wrap_engine: Callable[[Any], Any] | None = None,
    engine_factory: EngineFactory = make_engine,
    open_sink: Callable[[Path], RecordSink] = RecordSink,
    deadline_s: float | None = None,
) -> MeasuredRun:
    """Start, replay, stop. Never raises for engine or run failures: returns `failed=True` with the error; a
    record that cannot be written (disk full) raises RecordWriteError, with what was kept (`open_sink(path)`
    makes the sink; tests pass one that fails). Past `deadline_s` (default `run_deadline_s`) the trial is
    failed with RunDeadline: a hung engine call cannot hold the run forever.
    `engine_factory(system)` builds the engine (default `make_engine`; tests pass a fake); `wrap_engine(engine)`
    returns the engine the runner drives (a wrapper that delegates to it)."""
    before_bytes = Path(records_path).stat().st_size if records_path and Path(records_path).exists() else 0
    sink = open_sink(Path(records_path)) if records_path else None
    # only an engine that launches processes (vLLM, pools of them) needs its process tree scanned
    sampler = ResourceSampler(children=system.capabilities.launches_processes)
    try:
        with sampler:
            result, join = asyncio.run(
                _run(
                    system,
                    table,
                    tags,
                    sink,
                    timeout_s,
                    warmup_requests,
                    prompt_seed,
                    wrap_engine,
                    engine_factory,
                    deadline_s,
                )
            )
    except RecordWriteError:
        raise  # disk full: not a failed arm but a run that must stop, loudly, with what was kept
    except Exception as exc:  # noqa: BLE001 - an arm that crashes is a failed arm, not a failed run
        stage = "run"
        if isinstance(exc, _StartFailed) and exc.__cause__ is not None:
            stage, exc = "start", exc.__cause__
        kinds = ",".join(k.__name__ for k in type(exc).__mro__ if k not in (BaseException, Exception, object))
        tb = "".join(traceback.format_exception(exc, limit=5))
        return MeasuredRun(
            tags=tags,
            failed=True,
            error=f"{type(exc).__name__}: {exc}\n{tb}",
            failed_at=stage,
            error_type=kinds,
            resources=sampler.summary(),
        )
    finally:
        if sink:
            sink.close()
    if sink is not None and sink.error is not None:
        raise sink.error  # the background fsync failed: the records are not safely on disk
    if join.get("kind") == "per_request" and records_path:
        rewrite_records(records_path, result.warmup_records + result.records, keep_bytes=before_bytes)
    delta = {
        k: result.server_metrics_after.get(k, 0.0) - result.server_metrics_before.get(k, 0.0)
        for k in result.server_metrics_after
    }
    phases = phase_table(result.records)
    agg = pd.DataFrame()
    if join.get("kind") == "none" and delta:
        flat = vllm_metrics(delta) if any(k.startswith("vllm:") for k in delta) else delta
        agg = aggregate_join(phases, flat)
        if agg["server_count"].sum() > 0:
            join = {"kind": "aggregate", "source": "prometheus histograms (per-run means, not per request)"}
        else:
            agg = pd.DataFrame()
    return MeasuredRun(
        tags=tags,
        records=result.records,
        phases=phases,
        duration_s=result.duration_s,
        engine_info=result.engine_info,
        server_metrics=delta,
        warmup_declared=len(result.warmup_records),
        join=join,
        aggregate_join=agg,
        resources=sampler.summary(load_window(result.records)),
    )
