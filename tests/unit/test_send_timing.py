"""Client-side timing: the runner takes `sent_s` from an engine's SentEvent, records one entry per chunk
(and one per token), and its send timers never fire early."""

from __future__ import annotations

import asyncio

import pandas as pd
import pytest

from inferopt.engines.base import EngineBase, FinishEvent, GenRequest, SentEvent, TokenEvent
from inferopt.measure.runner import run_open_loop
from inferopt.records import ServerTimings, now_s
from inferopt.transport.timer import LoopTimer, PreciseTimer, make_timer


class _ChunkyEngine(EngineBase):
    """Says it sent each request 1 ms after stream() was called, then sends chunks of 2 and 3 tokens."""

    def __init__(self) -> None:
        self.called_s: dict[str, float] = {}

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def info(self) -> dict:
        return {"engine": "chunky"}

    async def server_metrics(self) -> dict:
        return {}

    async def stream(self, req: GenRequest):
        self.called_s[req.request_id] = t = now_s()
        await asyncio.sleep(0.002)
        yield SentEvent(t + 0.001)
        yield TokenEvent((7, 8))
        await asyncio.sleep(0.001)
        yield TokenEvent((9, 10, 11))
        yield FinishEvent(ServerTimings(finish_reason="length"))


def _table(n: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "request_id": [f"r-{i}" for i in range(n)],
            "arrival_offset_s": [0.004 * i for i in range(n)],
            "input_len": 4,
            "output_len": 5,
            "prefix_group": -1,
            "prefix_len": 0,
            "tenant": "default",
            "priority": 0,
        }
    )


def test_sent_event_and_chunk_records() -> None:
    engine = _ChunkyEngine()
    res = asyncio.run(run_open_loop(engine, _table(5), vocab_size=50, timeout_s=5))
    assert len(res.records) == 5
    for r in res.records:
        assert r.outcome == "ok" and r.sent_s == pytest.approx(engine.called_s[r.request_id] + 0.001)
        assert r.sent_s >= r.intended_s
        assert r.client_chunk_tokens == [2, 3] and r.output_token_ids == [7, 8, 9, 10, 11]
        assert r.client_token_s == [r.client_chunk_s[0]] * 2 + [r.client_chunk_s[1]] * 3
        assert r.output_len == 5 and r.finish_reason == "length"


class _FiringEngine(_ChunkyEngine):
    """Has `fire`: the runner must call it from its timer callback (no loop pass in between) and use the
    chunks' own receive stamps; one request's fire raises."""

    def __init__(self) -> None:
        super().__init__()
        self.fired_s: dict[str, float] = {}
        self.streamed = 0

    def fire(self, req: GenRequest):
        self.fired_s[req.request_id] = t = now_s()
        if req.request_id == "r-2":
            raise ConnectionError("refused at send")

        async def events():
            yield SentEvent(t)
            yield TokenEvent((7,), received_s=t + 0.0005)
            await asyncio.sleep(0.003)
            yield FinishEvent(ServerTimings(finish_reason="stop"))

        return events()

    async def stream(self, req: GenRequest):
        self.streamed += 1
        async for ev in self.fire(req):
            yield ev


def test_fire_is_called_in_the_timer_callback_and_its_stamps_are_kept() -> None:
    engine = _FiringEngine()
    res = asyncio.run(run_open_loop(engine, _table(5), vocab_size=50, timeout_s=5))
    recs = {r.request_id: r for r in res.records}
    assert len(recs) == 5 and engine.streamed == 0 and set(engine.fired_s) == set(recs)
    assert recs["r-2"].outcome == "error" and "refused at send" in recs["r-2"].error
    for rid, r in recs.items():
        assert r.intended_s <= engine.fired_s[rid]
        if rid != "r-2":
            assert r.outcome == "ok" and r.sent_s == engine.fired_s[rid]
            assert r.client_chunk_s == [r.sent_s + 0.0005]  # the engine's receive stamp, not the consume time


@pytest.mark.parametrize("kind", ["loop", "precise"])
def test_timers_never_fire_early_and_rearm_replaces(kind: str) -> None:
    if kind == "precise" and not PreciseTimer.available():
        pytest.skip("no timerfd on this OS")

    async def run() -> list[float]:
        loop = asyncio.get_running_loop()
        timer = LoopTimer(loop) if kind == "loop" else PreciseTimer(loop)
        lags: list[float] = []
        try:
            for _ in range(20):
                target = now_s() + 0.003
                done = loop.create_future()
                timer.arm(now_s() + 10, lambda d=done: d.set_result("wrong"))  # replaced below
                timer.arm(target, lambda t=target, d=done: (lags.append(now_s() - t), d.set_result("ok")))
                assert await asyncio.wait_for(done, 5) == "ok"
        finally:
            timer.close()
        return lags

    lags = asyncio.run(run())
    # the loop's own timer may wake a hair early by its clock; ours must not be early beyond float noise
    assert min(lags) >= (-0.0011 if kind == "loop" else -1e-6)


def test_make_timer_prefers_the_precise_one() -> None:
    async def kind() -> type:
        t = make_timer()
        t.close()
        return type(t)

    assert asyncio.run(kind()) is (PreciseTimer if PreciseTimer.available() else LoopTimer)
