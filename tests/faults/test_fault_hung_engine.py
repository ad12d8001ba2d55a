"""A hung engine cannot hold a trial forever, and a server that dies mid-trial fails the trial: a stream that never
answers ends every request as a timeout record; an engine call that never returns (a scrape) trips the run-level
deadline (RunDeadline: the trial failed, its records kept); an engine whose server exited during the trial
(`server_died` in its info, as the vLLM engine reports it) fails the trial instead of averaging its ok requests."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import faultkit
from faultkit import Wrapped

from inferopt.config import ConstantArrivals, FakeSystem, WorkloadConfig
from inferopt.measure.runner import RunTags
from inferopt.measure.session import run_system
from inferopt.records import read_records
from inferopt.workload import build_workload

TABLE = build_workload(WorkloadConfig(name="h", num_requests=20, arrival=ConstantArrivals(rate_per_s=40)))


def test_a_stream_that_never_answers_ends_every_request_as_a_timeout(tmp_path: Path) -> None:
    async def silent(_req: Any):
        await asyncio.sleep(3600)
        yield None

    path = tmp_path / "requests.jsonl"
    t0 = time.monotonic()
    run = run_system(
        FakeSystem(),
        TABLE,
        RunTags(arm="x"),
        timeout_s=1.0,
        records_path=path,
        wrap_engine=lambda e: Wrapped(e, stream=silent, fire=silent),
    )
    assert time.monotonic() - t0 < 10
    records = read_records(path)
    assert len(records) == len(TABLE) and {r.outcome for r in records} == {"timeout"}
    assert len(run.records) == len(TABLE)


def test_an_engine_call_that_never_returns_trips_the_run_deadline(tmp_path: Path) -> None:
    out = faultkit.hung_engine(tmp_path, deadline_s=3.0)
    assert out.survived and out.records_lost == 0, out.detail
    assert "RunDeadline: the trial passed its run-level deadline of 3 s" in out.detail


def test_a_server_that_died_mid_trial_fails_the_trial(tmp_path: Path) -> None:
    def died(inner: Any):
        return Wrapped(inner, info=lambda: {**inner.info(), "server_died": -9})

    path = tmp_path / "requests.jsonl"
    run = run_system(FakeSystem(), TABLE, RunTags(arm="x"), timeout_s=1.0, records_path=path, wrap_engine=died)
    assert run.failed and run.error.startswith("ServerDied: the server exited (code -9) during the trial")
    assert len(read_records(path)) == len(TABLE)  # what it served is kept on disk, not averaged
