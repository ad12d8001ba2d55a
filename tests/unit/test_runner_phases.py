"""The open-loop runner and the phase join, on the fake engine: nothing lost, latency from the intended
time, and the M3 decomposition adds up on the records."""

from __future__ import annotations

import asyncio

import numpy as np
import pandas as pd
import pytest

from inferopt.config import BatchingKnobs, ConstantArrivals, FakeSystem, LengthConfig, WorkloadConfig
from inferopt.engines.base import EngineBase, FinishEvent, GenRequest, TokenEvent
from inferopt.measure.phases import concurrency_at_arrival, decomposition_check, phase_table
from inferopt.measure.runner import RunTags, run_open_loop
from inferopt.measure.session import run_system
from inferopt.measure.slices import add_slices, edges_from_workload, headline, summarize
from inferopt.records import RecordSink, ServerTimings, now_s, read_records
from inferopt.workload import build_workload


def _workload(n=30, rate=300.0, **kw) -> pd.DataFrame:
    return build_workload(
        WorkloadConfig(
            name="t",
            seed=1,
            num_requests=n,
            arrival=ConstantArrivals(rate_per_s=rate),
            lengths=LengthConfig(input_median=16, output_median=6, output_max=12),
            **kw,
        )
    )


def test_every_request_is_a_record_and_decomposition_adds_up(tmp_path) -> None:
    system = FakeSystem(error_rate=0.2, seed=3, batching=BatchingKnobs(max_batch_size=4, batch_wait_ms=1))
    table = _workload()
    run = run_system(system, table, RunTags(arm="a"), timeout_s=5, records_path=tmp_path / "r.jsonl", warmup_requests=2)
    assert not run.failed, run.error
    assert len(run.records) == len(table)
    assert {r.request_id for r in run.records} == set(table["request_id"])
    outcomes = {r.outcome for r in run.records}
    assert outcomes == {"ok", "error"}
    assert all(r.error for r in run.records if r.outcome == "error")
    on_disk = read_records(tmp_path / "r.jsonl")
    assert len(on_disk) == len(table) + 2 and sum(r.warmup for r in on_disk) == 2
    check = decomposition_check(run.phases)
    assert check["adds_up"], check
    ok = run.phases[run.phases["outcome"] == "ok"]
    assert (ok["queue_ms"] >= 0).all() and (ok["prefill_ms"] > 0).all()


def test_latency_counts_from_intended_time_not_send_time() -> None:
    """A slow engine does not delay the schedule: with a single slot and arrivals faster than service,
    later requests wait, and TTFT (from the intended time) grows with the queue."""
    system = FakeSystem(decode_step_ms=3.0, batching=BatchingKnobs(max_batch_size=1, batch_wait_ms=0))
    table = _workload(n=20, rate=1000.0)
    run = run_system(system, table, RunTags(), timeout_s=10)
    ph = run.phases.sort_values("request_id")
    intended = np.array([r.intended_s for r in sorted(run.records, key=lambda r: r.request_id)])
    assert np.allclose(np.diff(intended), 1 / 1000.0, atol=1e-6)  # the schedule, not the service
    assert ph["send_lag_ms"].max() < 20
    assert ph["ttft_ms"].iloc[-1] > 10 * ph["ttft_ms"].iloc[0]
    assert ph["queue_ms"].iloc[-1] > ph["queue_ms"].iloc[0]


class _BrokenEngine(EngineBase):
    """Rejects some, times out some, errors some — the runner must record all and raise nothing."""

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def info(self) -> dict:
        return {"engine": "broken"}

    async def server_metrics(self) -> dict:
        return {}

    async def stream(self, req: GenRequest):
        from inferopt.engines.base import RequestRejected

        i = int(req.request_id.split("-")[-1])
        if i % 4 == 0:
            raise RequestRejected("queue full")
        if i % 4 == 1:
            await asyncio.sleep(10)
        if i % 4 == 2:
            yield TokenEvent((5,), now_s())
            raise ConnectionError("engine died")
        t = now_s()
        yield TokenEvent((5, 6), t)
        yield FinishEvent(
            ServerTimings(
                arrival_s=t,
                admitted_s=t,
                context_ready_s=t,
                prefill_start_s=t,
                prefill_end_s=t,
                token_s=[t, t],
                done_s=t,
            )
        )


def test_failures_are_records_never_exceptions(tmp_path) -> None:
    table = _workload(n=12)
    with RecordSink(tmp_path / "r.jsonl") as sink:
        res = asyncio.run(run_open_loop(_BrokenEngine(), table, vocab_size=100, timeout_s=0.2, sink=sink))
    by = {r.request_id: r for r in res.records}
    assert len(by) == 12
    kinds = [by[f"t-{i:05d}"].outcome for i in range(4)]
    assert kinds == ["rejected", "timeout", "error", "ok"]
    assert "engine died" in by["t-00002"].error and by["t-00002"].output_len == 1
    assert len((tmp_path / "r.jsonl").read_text().splitlines()) == 12
    ph = phase_table(res.records)
    assert len(ph) == 12 and ph.loc[ph["outcome"] != "ok", "ttft_ms"].isna().sum() >= 6
    h = headline(ph, res.duration_s)
    assert h["rejected_rate"] == pytest.approx(0.25) and h["timeout_rate"] == pytest.approx(0.25)


def test_concurrency_at_arrival() -> None:
    start = np.array([0.0, 1.0, 2.0, 2.5])
    end = np.array([3.0, 1.5, 4.0, np.nan])
    assert concurrency_at_arrival(start, end).tolist() == [1, 2, 2, 3]


def test_slices_and_summary_are_tidy() -> None:
    system = FakeSystem(cached_prefix_fraction=1.0, batching=BatchingKnobs(max_batch_size=4, batch_wait_ms=1))
    from inferopt.config import PrefixConfig

    table = _workload(n=40, prefix=PrefixConfig(num_groups=1, prefix_len=8, share_fraction=0.6))
    run = run_system(system, table, RunTags(arm="x"), timeout_s=5)
    ph = add_slices(run.phases, edges_from_workload(table))
    assert set(ph["input_bucket"]) <= {"short", "medium", "long"}
    assert set(ph["cache_hit"]) == {"hit", "miss"}
    s = summarize(ph, group=("arm",))
    assert set(s.columns) == {"arm", "slice_dim", "slice_value", "metric", "stat", "value", "unit"}
    assert {"all", "input_bucket", "output_bucket", "concurrency_bucket", "cache_hit"} <= set(s["slice_dim"])
    p99 = s[(s.slice_dim == "all") & (s.metric == "ttft_ms") & (s.stat == "p99")]["value"].item()
    assert p99 == pytest.approx(np.quantile(ph.loc[ph.outcome == "ok", "ttft_ms"], 0.99))


def test_decomposition_check_catches_a_missing_phase() -> None:
    """A join that drops a phase (here: prefill) no longer adds up; client lag in the tail alone does."""
    system = FakeSystem(prefill_base_ms=25.0, batching=BatchingKnobs(max_batch_size=2, batch_wait_ms=1))
    run = run_system(system, _workload(n=30), RunTags(), timeout_s=5)
    ph = run.phases.copy()
    assert decomposition_check(ph)["adds_up"]
    lagged = ph.copy()
    lagged.loc[lagged.index[:2], "ttft_residual_ms"] += 25.0  # two requests received late by the client
    assert decomposition_check(lagged)["adds_up"]
    broken = ph.copy()
    broken["ttft_residual_ms"] = broken["ttft_residual_ms"] + broken["prefill_ms"]  # prefill not counted
    assert not decomposition_check(broken)["adds_up"]
