"""The opt-in client retry policy (`inferopt.transport.retry`): Retry-After honoured against a scripted server,
bounded attempts, backoff with jitter, and every attempt kept as a sub-record while the request keeps one
record with its final outcome."""

from __future__ import annotations

import asyncio
import email.utils
import random
import time

import pandas as pd
from fake_openai_server import FakeOpenAIServer

from inferopt.config import ConstantArrivals, LengthConfig, OpenAISystem, WorkloadConfig
from inferopt.engines.openai import OpenAIEngine
from inferopt.engines.retrying import RetryingEngine
from inferopt.measure.runner import RunTags, run_open_loop
from inferopt.transport.retry import RetryPolicy, attempts_frame, parse_retry_after_s, retry_wait_s
from inferopt.workload import build_workload


def test_retry_after_parses_seconds_and_http_dates() -> None:
    assert parse_retry_after_s("2") == 2.0 and parse_retry_after_s(" 0.5 ") == 0.5
    assert parse_retry_after_s(None) is None and parse_retry_after_s("soon") is None
    now = time.time()
    date = email.utils.formatdate(now + 10, usegmt=True)
    assert 8.0 <= parse_retry_after_s(date, now_epoch_s=now) <= 10.5
    assert parse_retry_after_s(email.utils.formatdate(now - 100, usegmt=True), now_epoch_s=now) == 0.0


def test_waits_follow_retry_after_else_capped_jittered_backoff() -> None:
    rng = random.Random(0)
    p = RetryPolicy(max_attempts=5, base_backoff_s=0.5, max_backoff_s=2.0)
    assert retry_wait_s(p, 1, 3.0, rng) == (3.0, None)
    waits = [[retry_wait_s(p, k, None, rng)[0] for _ in range(200)] for k in (1, 2, 3, 4)]
    for k, ws in zip((1, 2, 3, 4), waits, strict=False):
        cap = min(2.0, 0.5 * 2 ** (k - 1))
        assert all(0.0 <= w <= cap for w in ws) and max(ws) > 0.8 * cap  # full jitter spans [0, cap]
    assert retry_wait_s(RetryPolicy(jitter="none", base_backoff_s=0.5), 2, None, rng) == (1.0, None)
    assert retry_wait_s(p, 5, 1.0, rng)[0] is None  # attempts exhausted
    wait, why = retry_wait_s(RetryPolicy(max_retry_after_s=5.0), 1, 60.0, rng)
    assert wait is None and "exceeds" in why  # a caller that will not wait that long
    assert retry_wait_s(RetryPolicy(honour_retry_after=False, jitter="none", base_backoff_s=0.1), 1, 60.0, rng) == (
        0.1,
        None,
    )


def _table(n: int) -> pd.DataFrame:
    cfg = WorkloadConfig(
        name="rt",
        seed=3,
        num_requests=n,
        arrival=ConstantArrivals(rate_per_s=50.0),
        lengths=LengthConfig(
            input_median=12, output_median=4, output_sigma=0.0, output_min=4, output_max=4, input_min=4, input_max=40
        ),
    )
    return build_workload(cfg)


async def _replay(policy: RetryPolicy, n: int = 3, busy: tuple[int, ...] = (0,), **server_kw):
    table = _table(n)
    ids = list(table["request_id"])
    async with FakeOpenAIServer(modes={ids[i]: "busy" for i in busy}, **server_kw) as srv:
        engine = RetryingEngine(
            OpenAIEngine(OpenAISystem(base_url=srv.base_url, served_model="m", vocab_size=500)), policy
        )
        await engine.start()
        try:
            res = await run_open_loop(engine, table, vocab_size=500, timeout_s=10.0, tags=RunTags(arm="a"))
        finally:
            await engine.stop()
    return ids, res, srv, engine


def test_client_honours_retry_after_and_keeps_every_attempt() -> None:
    ids, res, srv, engine = asyncio.run(_replay(RetryPolicy(max_attempts=3), retry_after="0.3", busy_first=2))
    rec = {r.request_id: r for r in res.records}
    assert len(res.records) == 3 and all(r.outcome == "ok" for r in res.records)  # one record per request
    busy = ids[0]
    assert srv.calls[busy] == 3  # two 429s, then served
    gaps = [b - a for a, b in zip(srv.call_s[busy], srv.call_s[busy][1:], strict=False)]
    assert all(g >= 0.29 for g in gaps), gaps  # waited as the server asked
    att = attempts_frame(engine.attempts)
    mine = att[att["request_id"] == busy].sort_values("attempt")
    assert list(mine["outcome"]) == ["rejected", "rejected", "ok"]
    assert list(mine["retry_after_s"][:2]) == [0.3, 0.3] and list(mine["wait_s"][:2]) == [0.3, 0.3]
    assert (att[att["request_id"] != busy]["attempt"] == 1).all()
    # latency counts from the intended send: the retry waits are in the request's TTFT and send lag
    r = rec[busy]
    assert r.client_token_s[0] - r.intended_s >= 0.6 and r.sent_s - r.intended_s >= 0.6


def test_retries_are_bounded_and_the_final_outcome_is_the_requests() -> None:
    ids, res, srv, engine = asyncio.run(_replay(RetryPolicy(max_attempts=2), retry_after="0.05", busy_first=5))
    rec = {r.request_id: r for r in res.records}
    assert rec[ids[0]].outcome == "rejected" and srv.calls[ids[0]] == 2
    att = attempts_frame(engine.attempts)
    mine = att[att["request_id"] == ids[0]]
    assert list(mine["outcome"]) == ["rejected", "rejected"] and "max_attempts" in mine["gave_up"].iloc[-1]
    # without the policy the same server's 429 is one rejected record, one call
    ids2, res2, srv2, _ = asyncio.run(_replay(RetryPolicy(max_attempts=1), retry_after="0.05", busy_first=5))
    assert {r.request_id: r.outcome for r in res2.records}[ids2[0]] == "rejected" and srv2.calls[ids2[0]] == 1
