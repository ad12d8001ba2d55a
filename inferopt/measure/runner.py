"""The open-loop load runner: send each request at its intended time, record everything, raise nothing.

Latency counts from the *intended* send time, not from when the client got round to sending (no
coordinated omission): a slow engine cannot slow the arrival schedule down. Every request ends as a
`RequestRecord` — ok, timeout, rejected or error with its message — written to the sink the moment it
finishes, so a killed run keeps every finished request on disk.

Deliberately not here: metrics (`phases.py` derives them from the records) and HTTP (engines own transport).
"""

from __future__ import annotations

import asyncio
import gc
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from inferopt.engines.base import Engine, FinishEvent, GenRequest, RequestRejected, SentEvent, TokenEvent
from inferopt.records import RecordSink, RequestRecord, now_s
from inferopt.transport.timer import make_timer
from inferopt.workload.build import prompt_token_ids


@dataclass(frozen=True)
class RunTags:
    """Who this run is, copied onto every record."""

    run_tag: str = ""
    arm: str = ""
    trial: int = 0
    scenario: str = ""


@dataclass
class LoadResult:
    records: list[RequestRecord]
    warmup_records: list[RequestRecord] = field(default_factory=list)
    start_s: float = 0.0
    end_s: float = 0.0
    engine_info: dict[str, Any] = field(default_factory=dict)
    server_metrics_before: dict[str, float] = field(default_factory=dict)
    server_metrics_after: dict[str, float] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


def materialize(
    table: pd.DataFrame, vocab_size: int, prompt_seed: int = 0, force_lengths: bool = False
) -> list[GenRequest]:
    """GenRequests for every row (done before the clock starts: prompt building is not the engine's cost);
    `force_lengths`: each asks to run to its `output_len` past EOS (`workload.output_lengths: forced`)."""
    return [
        GenRequest(
            request_id=str(row["request_id"]),
            prompt_token_ids=prompt_token_ids(row, vocab_size, seed=prompt_seed),
            max_new_tokens=int(row["output_len"]),
            tenant=str(row["tenant"]),
            priority=int(row["priority"]),
            prefix_group=int(row["prefix_group"]),
            prefix_len=int(row["prefix_len"]),
            force_length=force_lengths,
        )
        for row in table.to_dict("records")
    ]


async def send_one(
    engine: Engine,
    req: GenRequest,
    intended_s: float,
    timeout_s: float,
    tags: RunTags,
    warmup: bool = False,
    fired: Any = None,
) -> RequestRecord:
    """Send one request, collect its tokens; always returns a record, never raises.

    `fired`: what `engine.fire(req)` returned (its event iterator, or the exception it raised) when the
    runner already sent the request from its timer callback; else `stream` is called here.
    `sent_s` is the engine's `SentEvent` when it yields one (HTTP: the request written to the socket),
    else the moment `stream` was called. Each received chunk adds one `client_chunk_s`/`client_chunk_tokens`
    entry and one `client_token_s` entry per token in it, at the chunk's receive time (the event's
    `received_s` when the engine stamps it off the socket, else when it is consumed here).
    """
    rec = RequestRecord(
        request_id=req.request_id,
        outcome="error",
        input_len=len(req.prompt_token_ids),
        target_output_len=req.max_new_tokens,
        tenant=req.tenant,
        priority=req.priority,
        prefix_group=req.prefix_group,
        intended_s=intended_s,
        run_tag=tags.run_tag,
        arm=tags.arm,
        trial=tags.trial,
        scenario=tags.scenario,
        warmup=warmup,
    )
    chunk_s, chunk_tokens = rec.client_chunk_s, rec.client_chunk_tokens
    token_s, token_ids = rec.client_token_s, rec.output_token_ids
    try:
        async with asyncio.timeout_at(asyncio.get_running_loop().time() + max(0.0, intended_s + timeout_s - now_s())):
            rec.sent_s = now_s()
            if isinstance(fired, BaseException):
                raise fired
            async for event in fired if fired is not None else engine.stream(req):
                if isinstance(event, TokenEvent):
                    t = event.received_s if event.received_s is not None else now_s()
                    n = len(event.token_ids)
                    if n:
                        chunk_s.append(t)
                        chunk_tokens.append(n)
                        token_s.extend([t] * n)
                        token_ids.extend(event.token_ids)
                elif isinstance(event, SentEvent):
                    rec.sent_s = event.sent_s
                elif isinstance(event, FinishEvent):
                    rec.with_server(event.server)
        rec.outcome = "ok"
    except RequestRejected as exc:
        rec.outcome, rec.error = "rejected", f"rejected: {exc}"
    except TimeoutError:
        rec.outcome, rec.error = "timeout", f"not complete within {timeout_s:g} s of its intended send time"
    except asyncio.CancelledError:
        # the run is being stopped: this request still ends as a record (the task ends right after)
        rec.outcome, rec.error = "error", "cancelled: the run was stopped"
    except Exception as exc:  # noqa: BLE001 - every failure becomes a record
        rec.outcome, rec.error = "error", f"{type(exc).__name__}: {exc}"
    rec.client_done_s = now_s()
    rec.output_len = len(token_s)
    return rec


async def run_open_loop(
    engine: Engine,
    table: pd.DataFrame,
    *,
    vocab_size: int,
    timeout_s: float,
    tags: RunTags = RunTags(),
    sink: RecordSink | None = None,
    prompt_seed: int = 0,
    warmup_requests: int = 0,
    lead_s: float = 0.05,
    force_lengths: bool = False,
) -> LoadResult:
    """Replay `table` (a workload) open-loop against a started engine.

    Warm-up: the first `warmup_requests` prompts are sent one at a time before the clock starts; their
    records are kept (flag `warmup=True`) and excluded from metrics. `force_lengths`: every request asks to
    run to its target length (`materialize`).

    Send-time precision: sends are started by a timer callback (`inferopt.transport.timer`: a timerfd,
    ~0.1 ms and no spinning, where the OS has one; else the loop's timer, ~1 ms) that starts every request
    that is due and re-arms itself for the next one; each is sent with the engine's `fire(request)` inside
    that callback, so an HTTP engine has the request on the socket before the loop does anything else (the
    protocol's default `fire` is `stream`, which sends when consumed). The engine's `prepare(requests)`
    gets every request before the clock starts (HTTP engines encode their bodies there, as prompts are
    built here). Objects alive before the clock starts are frozen out of the garbage collector's scans so
    collections during the run stay short.
    """
    requests = materialize(table, vocab_size, prompt_seed, force_lengths)
    engine.prepare(requests)
    offsets = table["arrival_offset_s"].to_numpy(dtype=float)
    result = LoadResult(records=[], engine_info=engine.info())
    for i, req in enumerate(requests[:warmup_requests]):
        wreq = GenRequest(**{**req.__dict__, "request_id": f"warmup-{i}-{req.request_id}"})
        rec = await send_one(engine, wreq, now_s(), timeout_s, tags, warmup=True)
        result.warmup_records.append(rec)
        if sink:
            sink.write(rec)
    result.server_metrics_before = await engine.server_metrics()

    def _finish(rec: RequestRecord) -> RequestRecord:
        result.records.append(rec)
        if sink:
            sink.write(rec)
        return rec

    async def _timed(req: GenRequest, intended: float, fired: Any) -> None:
        _finish(await send_one(engine, req, intended, timeout_s, tags, fired=fired))

    gc.collect()
    gc.freeze()
    t0 = now_s() + lead_s
    result.start_s = t0
    tasks: list[asyncio.Task[None]] = []
    intended_s = (t0 + offsets).tolist()
    loop = asyncio.get_running_loop()
    all_started: asyncio.Future[None] = loop.create_future()
    timer = make_timer(loop)
    nxt = 0
    fire = engine.fire  # HTTP engines send right here, in the timer callback

    def _dispatch() -> None:
        # start every request that is due, then wake up again for the next one
        nonlocal nxt
        try:
            now = now_s()
            if sink is not None and sink.error is not None:  # disk full: stop sending, the run ends loudly
                nxt = len(requests)
            while nxt < len(requests) and intended_s[nxt] <= now:
                fired: Any
                try:
                    fired = fire(requests[nxt])
                except Exception as exc:  # noqa: BLE001 - becomes the request's error record
                    fired = exc
                tasks.append(loop.create_task(_timed(requests[nxt], intended_s[nxt], fired)))
                nxt += 1
            if nxt < len(requests):
                timer.arm(intended_s[nxt], _dispatch)
            elif not all_started.done():
                all_started.set_result(None)
        except BaseException as exc:  # noqa: BLE001 - surface it in the run instead of the loop's log
            if not all_started.done():
                all_started.set_exception(exc)

    try:
        _dispatch()
        await all_started
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        timer.close()
        for t in tasks:
            if not t.done():
                t.cancel()
        result.end_s = now_s()
        gc.unfreeze()
    if sink is not None and sink.error is not None:
        raise sink.error  # a record not on disk stops the run (RecordWriteError), never a silent gap
    result.server_metrics_after = await engine.server_metrics()
    return result
