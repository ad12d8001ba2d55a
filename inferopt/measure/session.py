"""Run one system on one workload: start its engine, replay the workload open-loop, stop the engine.

This is the unit every step reuses (measure, each ablation trial, each validation scenario). A crash
anywhere — the engine failing to load, the run dying — becomes a `MeasuredRun` with `failed` set and the
error text, so the caller can mark that arm failed and carry on. The run says where it failed (`failed_at`:
"start" = the engine could not be built or started, e.g. an ImportError for a GPU-only kernel; "run" = during
the load) and the exception's class names (`error_type`), so a caller can tell "cannot run here" from a crash.

Deliberately not here: deciding what to run (steps do) and tracking (tasks/ log what comes back).
"""

from __future__ import annotations

import asyncio
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from inferopt.config import AnySystem, FakeSystem, OpenAISystem
from inferopt.engines import make_engine
from inferopt.measure.phases import phase_table
from inferopt.measure.runner import LoadResult, RunTags, run_open_loop
from inferopt.records import RecordSink, RequestRecord


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
    failed_at: str | None = None        # "start" (building or starting the engine) | "run" (replaying the load)
    error_type: str | None = None       # the exception's class and its bases, e.g. "ModuleNotFoundError,ImportError"


class _StartFailed(Exception):
    """The engine could not be built or started (its cause is the engine's own exception)."""


def vocab_size_of(system: AnySystem) -> int:
    if isinstance(system, (FakeSystem, OpenAISystem)):
        return system.vocab_size
    import json

    from inferopt.model.loading import resolve_model_dir

    return int(json.loads((resolve_model_dir(system.model) / "config.json").read_text())["vocab_size"])


async def _run(system: AnySystem, table: pd.DataFrame, tags: RunTags, sink: RecordSink | None,
               timeout_s: float, warmup: int, prompt_seed: int) -> LoadResult:
    try:
        engine = make_engine(system)
        await engine.start()
    except Exception as exc:  # re-raised, marked as a start failure
        raise _StartFailed() from exc
    try:
        return await run_open_loop(engine, table, vocab_size=vocab_size_of(system), timeout_s=timeout_s, tags=tags,
                                   sink=sink, prompt_seed=prompt_seed, warmup_requests=warmup)
    finally:
        await engine.stop()


def run_system(system: AnySystem, table: pd.DataFrame, tags: RunTags, *, timeout_s: float,
               records_path: str | Path | None = None, warmup_requests: int = 0, prompt_seed: int = 0) -> MeasuredRun:
    """Start, replay, stop. Never raises for engine or run failures: returns `failed=True` with the error."""
    sink = RecordSink(records_path) if records_path else None
    try:
        result = asyncio.run(_run(system, table, tags, sink, timeout_s, warmup_requests, prompt_seed))
    except Exception as exc:  # noqa: BLE001 - an arm that crashes is a failed arm, not a failed run
        stage = "run"
        if isinstance(exc, _StartFailed) and exc.__cause__ is not None:
            stage, exc = "start", exc.__cause__
        kinds = ",".join(k.__name__ for k in type(exc).__mro__ if k not in (BaseException, Exception, object))
        tb = "".join(traceback.format_exception(exc, limit=5))
        return MeasuredRun(tags=tags, failed=True, error=f"{type(exc).__name__}: {exc}\n{tb}", failed_at=stage,
                           error_type=kinds)
    finally:
        if sink:
            sink.close()
    delta = {k: result.server_metrics_after.get(k, 0.0) - result.server_metrics_before.get(k, 0.0)
             for k in result.server_metrics_after}
    return MeasuredRun(
        tags=tags, records=result.records, phases=phase_table(result.records), duration_s=result.duration_s,
        engine_info=result.engine_info, server_metrics=delta, warmup_declared=len(result.warmup_records),
    )
