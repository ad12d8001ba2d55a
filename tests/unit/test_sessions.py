"""Multi-turn sessions on the fake engine: the session table, closed-loop turns over a growing history, the real tool
service and SQLite store timed into T_external and C_context, the decompositions, session outcomes, cost per session."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

from inferopt.config import (
    BatchingKnobs,
    DelayConfig,
    FakeSystem,
    PoissonArrivals,
    SessionsConfig,
    SLOConfig,
    ToolConfig,
    TraceConfig,
    TurnsConfig,
    WorkloadConfig,
)
from inferopt.engines.fake import FakeEngine
from inferopt.gate.judge import cost_table
from inferopt.locate.hardware import HardwareProfile
from inferopt.measure.agentic import run_sessions
from inferopt.measure.history import SQLiteHistory
from inferopt.measure.phases import decomposition_check, phase_table
from inferopt.measure.runner import RunTags
from inferopt.measure.session import run_system
from inferopt.measure.session_table import session_check, session_outcomes, session_table
from inferopt.measure.slo import RequestSLO
from inferopt.report.rundir import RunData, StepData
from inferopt.report.sections import session_latency as report_session_latency
from inferopt.report.sections import sessions as report_sessions
from inferopt.transport.toolservice import ToolCall, ToolClient, ToolService
from inferopt.workload import build_workload, workload_hash
from inferopt.workload.sessions import has_sessions, sample_delay_ms

SYSTEM = FakeSystem(seed=1, jitter_cv=0.0, batching=BatchingKnobs(max_batch_size=4, batch_wait_ms=0))


def _workload(**sessions) -> WorkloadConfig:
    sc = dict(
        num_sessions=4,
        turns=TurnsConfig(min=2, max=4),
        think=DelayConfig(kind="constant", mean_ms=20.0),
        tools=ToolConfig(probability=1.0, max_steps=2, latency=DelayConfig(kind="constant", mean_ms=15.0)),
    )
    return WorkloadConfig(
        name="s", seed=5, arrival=PoissonArrivals(rate_per_s=50.0), sessions=SessionsConfig(**(sc | sessions))
    )


class _Recorder(FakeEngine):
    """The fake engine that also notes each request's prompt and the moment it was sent."""

    def __init__(self, system: FakeSystem) -> None:
        super().__init__(system)
        self.sent: dict[str, tuple[float, list[int]]] = {}

    def stream(self, request):  # noqa: ANN001, ANN201 - the engine protocol
        self.sent[request.request_id] = (time.perf_counter(), list(request.prompt_token_ids))
        return super().stream(request)


class _Tools:
    """A tool caller that sleeps as asked (no HTTP: the runner's own timing is what is tested)."""

    async def call(self, sleep_ms: float, tokens: int, seed: int, args: dict | None = None) -> ToolCall:
        t0 = time.perf_counter()
        await asyncio.sleep(sleep_ms / 1000.0)
        return ToolCall(token_ids=[7] * tokens, measured_s=time.perf_counter() - t0)


def _replay(table: pd.DataFrame, tmp_path, history=None, tools=None):  # noqa: ANN001, ANN202
    engine, tools = _Recorder(SYSTEM), tools or _Tools()

    async def go():  # noqa: ANN202
        await engine.start()
        try:
            with history or SQLiteHistory(tmp_path / "h.sqlite") as store:
                return await run_sessions(engine, table, vocab_size=288, timeout_s=5.0, tools=tools, history=store)
        finally:
            await engine.stop()

    return asyncio.run(go()), engine, tools


def test_session_table_is_deterministic_and_planned_per_turn() -> None:
    a, b = build_workload(_workload()), build_workload(_workload())
    pd.testing.assert_frame_equal(a, b)
    assert has_sessions(a) and a.attrs["content_hash"] == workload_hash(b)
    assert build_workload(_workload(num_sessions=5)).attrs["content_hash"] != a.attrs["content_hash"]
    for sid, turns in a.groupby("session_id"):
        assert list(turns["turn"]) == list(range(len(turns))) and 2 <= len(turns) <= 4
        assert (turns["session_turns"] == len(turns)).all() and turns["arrival_offset_s"].nunique() == 1
        assert turns["think_ms"].iloc[-1] == 0.0 and (turns["think_ms"].iloc[:-1] == 20.0).all()
        steps = [json.loads(t) for t in turns["tool_sleep_ms"]]
        assert all(1 <= len(s) <= 2 and set(s) == {15.0} for s in steps), sid
    # a request cap keeps whole sessions
    capped = build_workload(_workload(), num_requests=5)
    assert capped.groupby("session_id").size().eq(capped["session_turns"].groupby(capped["session_id"]).first()).all()
    assert len(capped) <= 5


def test_delays_keep_their_mean() -> None:
    rng = np.random.default_rng(0)
    for kind in ("constant", "exponential", "lognormal"):
        x = sample_delay_ms(DelayConfig(kind=kind, mean_ms=40.0, sigma=0.6), 20000, rng)
        assert abs(x.mean() - 40.0) < 1.5 and (x >= 0).all(), kind


def test_sessions_refuse_a_trace_and_bad_turns() -> None:
    with pytest.raises(ValidationError, match="sessions"):
        WorkloadConfig(trace=TraceConfig(path="t.csv"), sessions=SessionsConfig())
    with pytest.raises(ValidationError, match="turns.min"):
        TurnsConfig(min=5, max=2)


def test_turns_are_closed_loop_over_a_growing_prefix(tmp_path) -> None:
    table = build_workload(_workload())
    result, engine, tools = _replay(table, tmp_path)
    recs = {r.request_id: r for r in result.records}
    assert len(recs) == len(table) and all(r.outcome == "ok" for r in recs.values())
    for _, turns in table.groupby("session_id"):
        ids = list(turns["request_id"])
        for prev, nxt in zip(ids[:-1], ids[1:], strict=True):
            p, n = recs[prev], recs[nxt]
            sent_prev, prompt_prev = engine.sent[prev]
            sent_next, prompt_next = engine.sent[nxt]
            # history = previous prompt + its actual output + the tool results, then the new message
            grown = prompt_prev + p.output_token_ids
            assert prompt_next[: len(grown)] == grown and len(prompt_next) > len(grown)
            assert n.intended_s == pytest.approx(
                p.client_done_s + 0.020, abs=1e-6
            )  # done (tools included) + think time
            assert n.sent_s >= n.intended_s and sent_next > sent_prev
            assert p.external_s >= 0.015 and p.client_done_s >= p.client_token_s[-1] + 0.015


def test_tool_service_latency_is_measured_and_it_stops(tmp_path) -> None:
    async def calls(url: str) -> list[ToolCall]:
        client = ToolClient(url, vocab_size=100)
        try:
            await client.call(0.0, 1, 0)  # connect once
            t0 = time.perf_counter()
            out = await asyncio.gather(*(client.call(250.0, 5, s) for s in range(3)))
            assert time.perf_counter() - t0 < 0.7  # the calls overlapped at the service (one after another: 0.75 s)
            return out
        finally:
            await client.close()

    with ToolService() as service:
        assert service.url.startswith("http://127.0.0.1:")
        out = asyncio.run(calls(service.url))
    assert all(0.250 <= c.measured_s < 0.7 for c in out)
    assert all(len(c.token_ids) == 5 and all(3 <= t < 100 for t in c.token_ids) for c in out)
    assert out[0].token_ids != out[1].token_ids
    assert not [t for t in threading.enumerate() if t.name == "tool-service"]


class _SlowHistory(SQLiteHistory):
    def load(self, session_id: str) -> tuple[list[int], float]:
        t0 = time.perf_counter()
        ids, _ = super().load(session_id)
        time.sleep(0.03)  # a slow store: its read time must land in C_context, not in the send lag
        return ids, time.perf_counter() - t0


def test_history_read_is_c_context(tmp_path) -> None:
    table = build_workload(_workload(num_sessions=2))
    result, _, _ = _replay(table, tmp_path, history=_SlowHistory(tmp_path / "slow.sqlite"))
    ph = phase_table(result.records)
    assert (ph["history_ms"] >= 30.0).all()
    assert (ph["context_ms"] >= ph["history_ms"]).all() and (ph["send_lag_ms"] < 25.0).all()
    assert decomposition_check(ph)["adds_up"]


def test_sqlite_history_round_trip(tmp_path) -> None:
    with SQLiteHistory(tmp_path / "h.sqlite") as h:
        assert h.load("a")[0] == []
        h.append("a", 0, [("user", [4, 5]), ("assistant", [6])])
        h.append("b", 0, [("user", [9])])
        h.append("a", 1, [("user", [7]), ("tool", [8, 8])])
        ids, read_s = h.load("a")
    assert ids == [4, 5, 6, 7, 8, 8] and 0.0 < read_s < 0.5
    with pytest.raises(FileExistsError, match="already exists"):
        SQLiteHistory(tmp_path / "h.sqlite")


def test_decomposition_adds_up_with_external_time_per_request_and_session(tmp_path) -> None:
    table = build_workload(_workload())
    run = run_system(SYSTEM, table, RunTags(arm="a"), timeout_s=5, records_path=tmp_path / "r.jsonl")
    assert not run.failed, run.error
    ph = run.phases
    dec = decomposition_check(ph)
    assert dec["adds_up"] and dec["n_with_external"] == len(ph) and dec["external_ms_p50_nonzero"] >= 15.0
    sessions = session_table(run.records, ph, RequestSLO().meets_slo(ph))
    check = session_check(sessions)
    assert check["session_adds_up"] and check["sessions_checked"] == table["session_id"].nunique()
    assert (sessions["tool_ms"] >= 15.0 * sessions["turns_planned"]).all()
    # dropping the external term breaks both checks: it is measured, not a free parameter
    broken = ph.assign(e2e_residual_ms=ph["e2e_residual_ms"] + ph["external_ms"])
    assert not decomposition_check(broken)["adds_up"]
    assert not session_check(sessions.assign(residual_ms=sessions["residual_ms"] + sessions["tool_ms"]))[
        "session_adds_up"
    ]


def _phases(rows: list[tuple[str, int, int, str, float]]) -> pd.DataFrame:
    """(session, turn, planned turns, outcome, ttft_ms) -> a minimal phase table."""
    return pd.DataFrame(
        [
            {"session_id": s, "turn": t, "session_turns": n, "outcome": o, "ttft_ms": ttft, "tpot_ms": 5.0,
             "e2e_ms": ttft + 50, "arm": "a", "trial": 0, "tenant": "x", "priority": 0, "output_len": 4,
             "external_ms": 10.0, "history_ms": 1.0}
            for s, t, n, o, ttft in rows
        ]
    )  # fmt: skip


def test_session_outcome_rules() -> None:
    ph = _phases(
        [("ok", 0, 2, "ok", 50), ("ok", 1, 2, "ok", 60)]
        + [("err", 0, 2, "ok", 50), ("err", 1, 2, "timeout", np.nan)]
        + [("slow", 0, 2, "ok", 50), ("slow", 1, 2, "ok", 900)]
        + [("cut", 0, 3, "ok", 50), ("cut", 1, 3, "ok", 50)]
    )
    slo = RequestSLO(ttft_ms=500.0)
    out = session_outcomes(ph, slo.meets_slo(ph)).set_index("session_id")
    assert out.loc["ok", "outcome"] == "ok" and out.loc["ok", "reason"] == ""
    assert out.loc["err", "outcome"] == "failed" and "timeout" in out.loc["err", "reason"]
    assert out.loc["slow", "outcome"] == "failed" and "missed its SLO" in out.loc["slow", "reason"]
    assert out.loc["cut", "outcome"] == "failed" and "never sent" in out.loc["cut", "reason"]
    assert out.loc["cut", "turns_planned"] == 3 and out.loc["cut", "turns_sent"] == 2


def test_cost_counts_the_session_as_the_task() -> None:
    ph = _phases([("a", 0, 2, "ok", 50), ("a", 1, 2, "ok", 60), ("b", 0, 1, "ok", 50), ("c", 0, 1, "error", 50)])
    ph["concurrency"], ph["input_len"] = 1, 10
    trials = pd.DataFrame([{"arm": "baseline", "failed": False, "duration_s": 3600.0, "phases": ph, "resources": {}}])
    hw = HardwareProfile("cpu", "cpu", "float32", 1e11, 1e10, 1e10, 100.0, 2.0, False, "test")
    slo = SLOConfig(ttft_p99_ms=500, tpot_p95_ms=40)
    row = cost_table(trials, slo, hw, {"baseline": 1}).iloc[0]
    assert row["task_unit"] == "session" and row["tasks"] == 3 and row["successful"] == 2
    assert row["cost_per_successful_session_usd"] == pytest.approx(row["total_cost_usd"] / 2)
    single = cost_table(trials.assign(phases=[ph.assign(session_id="")]), slo, hw, {"baseline": 1}).iloc[0]
    assert (
        single["task_unit"] == "request"
        and single["successful"] == 3
        and "cost_per_successful_session_usd" not in single
    )


def test_report_shows_session_latency_and_cost_per_session() -> None:
    sessions = pd.DataFrame(
        {"session_id": ["a", "b"], "arm": "baseline", "trial": 0, "task_ms": [100.0, 300.0], "tool_ms": [10.0, 30.0],
         "history_ms": [1.0, 2.0], "think_ms": [5.0, 6.0], "outcome": ["ok", "failed"]}
    )  # fmt: skip
    dec = {"decomposition": {"session_adds_up": True, "sessions_checked": 1, "session_share_within_tol": 1.0}}
    measure = StepData("1-measure", tables={"sessions": sessions}, docs={"measure": dec})
    cost = pd.DataFrame(
        {"arm": ["baseline"], "tasks": [2], "successful": [1], "cost_per_successful_session_usd": [2e-6]}
    )
    run = RunData("r", steps={"measure": measure, "gate": StepData("6-gate", tables={"cost": cost})})
    html = " ".join(p.html for p in report_sessions(measure, run, set()))
    assert "session latency" in html and "cost per successful session" in html and "2.000e-06" in html
    assert report_session_latency(sessions).iloc[0]["success rate"] == 0.5
    no_gate = " ".join(p.html for p in report_sessions(measure, RunData("r", steps={"measure": measure}), set()))
    assert "the gate did not run" in no_gate


def test_slice_edges_of_a_session_load_come_from_the_prompts_the_turns_will_send(tmp_path) -> None:
    from inferopt.measure.slices import edges_from_workload
    from inferopt.workload.sessions import expected_prompt_len

    table = build_workload(_workload())
    planned = expected_prompt_len(table)
    result, _, _ = _replay(table, tmp_path)
    sent = pd.Series({r.request_id: r.input_len for r in result.records})
    # the fake engine answers every budget in full, so the plan is exactly what each record carries
    assert (sent.loc[table["request_id"]].to_numpy() == planned.to_numpy()).all()
    assert (planned[table["turn"] > 0] > table["input_len"][table["turn"] > 0]).all()  # later turns carry history
    q = np.quantile(planned.to_numpy(float), [1 / 3, 2 / 3])
    assert edges_from_workload(table).input_len == tuple(float(x) for x in np.unique(q))
