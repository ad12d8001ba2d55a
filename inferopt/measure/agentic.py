"""The session runner: sessions open-loop (each starts at its arrival), turns closed-loop within a session.

A turn is due at the session's arrival (turn 0) or when the previous turn completed plus its think time; its latency
counts from that due time (`intended_s`). At the due time the runner reads the session's history from the store
(timed: `history_s`, the client-side C_context), sends history + the new message as one prompt, and once the
answer is in makes the turn's tool calls to the local tool service (each timed around the real call; their sum is
`external_s`, T_external); the turn completes (`client_done_s`) when the last call returned. Then the turn's
messages (the new message, the model's actual output, the tools' results) are written to the store, so turn k+1's
prompt starts with turn k's whole prompt: a growing shared prefix. A turn with tool steps asks the model for the
call in the suite's format where the answer reads as text (`tool_turns.py`: scored into the record; the tools get
the model's arguments when valid). A failed turn (or tool call) ends its session; the turns not sent are counted
by the session table (`sessions.py`) through `session_turns`. Warm-up prompts are the first sessions' opening
messages drawn with another seed: they warm the engine, never its prefix cache for the measured prompts.
Deliberately not here: starting the tool service or the store (`session.py`).
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any, Protocol

import pandas as pd

from inferopt.engines.base import Engine, GenRequest
from inferopt.measure.runner import LoadResult, RunTags, send_one
from inferopt.measure.tool_turns import NO_TOOL_TURNS, ToolTurns
from inferopt.records import RecordSink, RequestRecord, now_s
from inferopt.transport.toolservice import ToolCall
from inferopt.workload.build import prompt_token_ids
from inferopt.workload.sessions import tool_sleeps_ms

SESSION_GROUP_BASE = 1 << 20  # later turns' prefix_group: base + the session's index (a script engine's cache key)
WARMUP_SEED_OFFSET = 1_000_003  # warm-up prompts use prompt_seed + this: same lengths, other ids


class ToolCaller(Protocol):
    async def call(self, sleep_ms: float, tokens: int, seed: int, args: dict[str, Any] | None = None) -> ToolCall: ...


class HistoryStore(Protocol):
    def load(self, session_id: str) -> tuple[list[int], float]: ...

    def append(self, session_id: str, turn: int, messages: list[tuple[str, list[int]]]) -> None: ...


def _seed_of(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def _request(
    row: dict[str, Any], history: list[int], new_ids: list[int], group: int, force: bool, floor: int | None = None
) -> GenRequest:
    """The turn's request; `floor` (a tool-call turn asked in words): at least that many tokens, stopping at EOS."""
    later = int(row["turn"]) > 0 and bool(history)
    return GenRequest(
        request_id=str(row["request_id"]),
        prompt_token_ids=history + new_ids,
        max_new_tokens=int(row["output_len"]) if floor is None else max(int(row["output_len"]), floor),
        tenant=str(row["tenant"]),
        priority=int(row["priority"]),
        prefix_group=group if later else int(row["prefix_group"]),
        prefix_len=len(history) if later else int(row["prefix_len"]),
        force_length=force and floor is None,
    )


async def _tools(
    rec: RequestRecord, row: dict[str, Any], tools: ToolCaller, args: dict[str, Any] | None
) -> list[list[int]]:
    """The turn's tool calls (each with `args`), each timed around the real call into `rec.external_s`; a failure
    fails the turn."""
    results: list[list[int]] = []
    n_tokens = int(row.get("tool_result_tokens", 0) or 0)
    for j, sleep_ms in enumerate(tool_sleeps_ms(row)):
        t0 = now_s()
        try:
            results.append((await tools.call(sleep_ms, n_tokens, _seed_of(f"{rec.request_id}/{j}"), args)).token_ids)
        except Exception as exc:  # noqa: BLE001 - a failed tool call is the turn's error record
            rec.outcome, rec.error = "error", f"tool call {j} failed: {type(exc).__name__}: {exc}"
            return results
        finally:
            rec.external_s += now_s() - t0
    return results


async def run_turn(
    engine: Engine,
    row: dict[str, Any],
    due_s: float,
    group: int,
    *,
    vocab_size: int,
    timeout_s: float,
    tags: RunTags,
    prompt_seed: int,
    tools: ToolCaller,
    history: HistoryStore,
    force_lengths: bool = False,
    tool_turns: ToolTurns = NO_TOOL_TURNS,
) -> RequestRecord:
    """One turn (see the module docstring); always returns its record."""
    sid = str(row["session_id"])
    past, read_s = history.load(sid)
    ask = tool_turns.ask(row, planned=bool(tool_sleeps_ms(row)))
    new_ids, floor = tool_turns.message(ask, prompt_token_ids(row, vocab_size, seed=prompt_seed))
    rec = await send_one(engine, _request(row, past, new_ids, group, force_lengths, floor), due_s, timeout_s, tags)
    rec.history_s, rec.session_id, rec.turn = read_s, sid, int(row["turn"])
    rec.session_turns = int(row.get("session_turns", 0) or 0)
    args = tool_turns.score(rec, ask) if ask is not None else None
    if rec.outcome != "ok":
        return rec
    results = await _tools(rec, row, tools, args)
    rec.client_done_s = now_s()
    history.append(
        sid, rec.turn, [("user", new_ids), ("assistant", list(rec.output_token_ids))] + [("tool", r) for r in results]
    )
    return rec


def session_plans(table: pd.DataFrame) -> list[list[dict[str, Any]]]:
    """The table's sessions, each its turns in order, sessions in order of first arrival (stable)."""
    rows = table.to_dict("records")
    by_session: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_session.setdefault(str(row["session_id"]), []).append(row)
    plans = [sorted(turns, key=lambda r: int(r["turn"])) for turns in by_session.values()]
    return sorted(plans, key=lambda p: float(p[0]["arrival_offset_s"]))


async def _warmup(engine: Engine, plans: list[list[dict[str, Any]]], n: int, kw: dict[str, Any]) -> list[RequestRecord]:
    out = []
    for i, plan in enumerate(plans[:n]):
        row = plan[0]
        ids = prompt_token_ids(row, kw["vocab_size"], seed=kw["prompt_seed"] + WARMUP_SEED_OFFSET)
        req = GenRequest(f"warmup-{i}-{row['request_id']}", ids, int(row["output_len"]), str(row["tenant"]))
        out.append(await send_one(engine, req, now_s(), kw["timeout_s"], kw["tags"], warmup=True))
    return out


async def run_sessions(
    engine: Engine,
    table: pd.DataFrame,
    *,
    vocab_size: int,
    timeout_s: float,
    tools: ToolCaller,
    history: HistoryStore,
    tags: RunTags | None = None,
    sink: RecordSink | None = None,
    prompt_seed: int = 0,
    warmup_requests: int = 0,
    lead_s: float = 0.05,
    force_lengths: bool = False,
    tool_turns: ToolTurns = NO_TOOL_TURNS,
) -> LoadResult:
    """Replay a session table (`inferopt.workload.sessions`) against a started engine; records as the open-loop
    runner's, plus each turn's session fields, history read and tool time."""
    plans = session_plans(table)
    kw = dict(vocab_size=vocab_size, timeout_s=timeout_s, tags=tags or RunTags(), prompt_seed=prompt_seed)
    force: dict[str, Any] = dict(force_lengths=force_lengths, tool_turns=tool_turns)
    result = LoadResult(records=[], engine_info=engine.info())
    result.warmup_records = await _warmup(engine, plans, warmup_requests, kw)
    for rec in result.warmup_records:
        if sink:
            sink.write(rec)
    result.server_metrics_before = await engine.server_metrics()
    t0 = now_s() + lead_s
    result.start_s = t0

    async def _session(index: int, plan: list[dict[str, Any]]) -> None:
        due = t0 + float(plan[0]["arrival_offset_s"])
        for row in plan:
            await asyncio.sleep(max(0.0, due - now_s()))
            rec = await run_turn(
                engine, row, due, SESSION_GROUP_BASE + index, tools=tools, history=history, **kw, **force
            )
            result.records.append(rec)
            if sink:
                sink.write(rec)
            if rec.outcome != "ok":
                return  # a failed turn ends its session
            due = float(rec.client_done_s or now_s()) + float(row.get("think_ms", 0.0) or 0.0) / 1000.0

    tasks = [asyncio.create_task(_session(i, plan)) for i, plan in enumerate(plans)]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            if not t.done():
                t.cancel()
        result.end_s = now_s()
    result.server_metrics_after = await engine.server_metrics()
    return result
