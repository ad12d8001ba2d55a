"""The `openai` engine against a scripted local server, through the public path (`run_open_loop`):
token counts from usage, multi-token chunks, rejections (HTTP and in-stream), errors, a server dying
mid-stream, timeouts — every request sent ends as exactly one record."""

from __future__ import annotations

import asyncio
import json

import pandas as pd
import pytest
from fake_openai_server import FakeOpenAIServer

from inferopt.config import ConstantArrivals, LengthConfig, OpenAISystem, WorkloadConfig
from inferopt.engines import make_engine
from inferopt.engines.base import GenRequest
from inferopt.engines.openai import OpenAIEngine
from inferopt.measure.runner import RunTags, run_open_loop
from inferopt.records import RecordSink, read_records, records_to_frame
from inferopt.workload import build_workload


def _table(n: int, rate: float = 200.0, out: int = 5) -> pd.DataFrame:
    cfg = WorkloadConfig(
        name="oa",
        seed=3,
        num_requests=n,
        arrival=ConstantArrivals(rate_per_s=rate),
        lengths=LengthConfig(
            input_median=12,
            output_median=out,
            output_sigma=0.0,
            output_min=out,
            output_max=out,
            input_min=4,
            input_max=40,
        ),
    )
    return build_workload(cfg)


def _system(server: FakeOpenAIServer, **kw) -> OpenAISystem:
    return OpenAISystem(base_url=server.base_url, served_model="m", vocab_size=500, **kw)


async def _replay(
    modes_by_index: dict[int, str],
    n: int,
    *,
    timeout_s: float = 5.0,
    sink: RecordSink | None = None,
    metrics: bool = True,
    extra_body: dict | None = None,
    **server_kw,
):
    table = _table(n)
    ids = list(table["request_id"])
    async with FakeOpenAIServer(
        modes={ids[i]: m for i, m in modes_by_index.items()}, metrics=metrics, **server_kw
    ) as srv:
        engine = OpenAIEngine(_system(srv), extra_body=extra_body)
        await engine.start()
        try:
            res = await run_open_loop(
                engine, table, vocab_size=500, timeout_s=timeout_s, tags=RunTags(arm="a"), sink=sink
            )
        finally:
            await engine.stop()
    return table, res, srv


def _by_id(res) -> dict:
    return {r.request_id: r for r in res.records}


def test_normal_stream_counts_tokens_from_usage_and_sends_the_right_body() -> None:
    table, res, srv = asyncio.run(_replay({}, 4))
    assert len(res.records) == 4 and all(r.outcome == "ok" for r in res.records), [r.error for r in res.records]
    for r in res.records:
        assert r.output_len == 5 and r.output_token_ids == [-1] * 5
        assert r.client_chunk_tokens == [1] * 5 and len(r.client_chunk_s) == 5
        assert r.finish_reason == "length" and r.cached_tokens == 2
        assert r.intended_s <= r.sent_s <= r.client_chunk_s[0] <= r.client_done_s
        body = srv.bodies[r.request_id]
        assert body["prompt"] and all(isinstance(t, int) for t in body["prompt"]) and len(body["prompt"]) == r.input_len
        assert body["max_tokens"] == 5 and body["stream"] is True
        assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
        assert "ignore_eos" not in body and "min_tokens" not in body
        assert body["temperature"] == 0.0  # greedy, like the hf engine (servers default to sampling)
    frame = records_to_frame(res.records)
    assert "client_chunk_s" not in frame and (frame["n_client_chunks"] == 5).all()
    assert set(srv.bodies) == set(table["request_id"])  # X-Request-Id carried the request id
    assert res.server_metrics_before['vllm:num_preemptions_total{model_name="m"}'] == 3.0


def test_multi_token_chunks_and_returned_ids() -> None:
    table, res, _ = asyncio.run(_replay({0: "multi", 1: "ids"}, 2))
    recs = _by_id(res)
    multi, ids = recs[table["request_id"][0]], recs[table["request_id"][1]]
    assert multi.outcome == "ok" and multi.client_chunk_tokens == [3, 2] and multi.output_len == 5
    assert len(multi.client_token_s) == 5 and multi.client_token_s[:3] == [multi.client_chunk_s[0]] * 3
    assert ids.outcome == "ok" and ids.output_token_ids == [100, 101, 102, 103, 104]


def test_server_without_continuous_usage_counts_text_chunks() -> None:
    _, res, _ = asyncio.run(_replay({0: "nousage"}, 1))
    (r,) = res.records
    assert r.outcome == "ok" and r.output_len == 5 and r.client_chunk_tokens == [1] * 5


@pytest.mark.parametrize(
    "mode,outcome,text",
    [
        ("http429", "rejected", "HTTP 429"),
        ("http503", "rejected", "HTTP 503"),
        ("sse503", "rejected", "code 503"),
        ("sse500", "error", "code 500"),
        ("die", "error", "mid-stream"),
        ("nodone", "error", "without [DONE]"),
    ],
)
def test_failures_become_records(mode: str, outcome: str, text: str, tmp_path) -> None:
    with RecordSink(tmp_path / "r.jsonl") as sink:
        table, res, _ = asyncio.run(_replay({1: mode}, 3, sink=sink))
    recs = _by_id(res)
    assert len(res.records) == 3 and len(read_records(tmp_path / "r.jsonl")) == 3
    bad = recs[table["request_id"][1]]
    assert bad.outcome == outcome and text in bad.error, bad.error
    assert all(recs[table["request_id"][i]].outcome == "ok" for i in (0, 2))


def test_per_request_timeout_is_a_timeout_record() -> None:
    table, res, _ = asyncio.run(_replay({0: "slow"}, 2, timeout_s=0.3, slow_s=1.0))
    recs = _by_id(res)
    assert recs[table["request_id"][0]].outcome == "timeout"
    assert recs[table["request_id"][1]].outcome == "ok"


def test_no_metrics_endpoint_gives_empty_metrics() -> None:
    _, res, _ = asyncio.run(_replay({}, 1, metrics=False))
    assert res.server_metrics_before == {} and res.records[0].outcome == "ok"


def test_forced_request_carries_ignore_eos_and_min_tokens_and_a_natural_one_does_not() -> None:
    engine = OpenAIEngine(OpenAISystem(base_url="http://127.0.0.1:9", served_model="m", vocab_size=10))
    req = GenRequest("r1", [3, 4, 5], 7, force_length=True)
    body = json.loads(engine._body(req))
    assert body["ignore_eos"] is True and body["min_tokens"] == 7 == body["max_tokens"]
    natural = json.loads(engine._body(GenRequest("r2", [3, 4, 5], 7)))
    assert "ignore_eos" not in natural and "min_tokens" not in natural


def test_endpoint_declares_whether_it_can_force_lengths() -> None:
    plain = OpenAISystem(base_url="http://127.0.0.1:9", served_model="m", vocab_size=10)
    assert not plain.capabilities.forces_lengths
    assert plain.model_copy(update={"forced_length_params": True}).capabilities.forces_lengths


def test_refuses_undeclared_output_length_forcing_and_unreachable_servers() -> None:
    with pytest.raises(ValueError, match="undeclared forced output length.*workload.output_lengths: forced"):
        OpenAIEngine(
            OpenAISystem(base_url="http://127.0.0.1:9", served_model="m", vocab_size=10),
            extra_body={"ignore_eos": True},
        )

    async def start_dead() -> None:
        await make_engine(OpenAISystem(base_url="http://127.0.0.1:9", served_model="m", vocab_size=10)).start()

    with pytest.raises(ConnectionError, match="fix: start it"):
        asyncio.run(start_dead())


def test_info_hides_header_values() -> None:
    e = OpenAIEngine(
        OpenAISystem(
            base_url="http://127.0.0.1:9", served_model="m", vocab_size=10, headers={"Authorization": "Bearer secret"}
        )
    )
    assert "secret" not in repr(e.info()) and e.info()["engine"] == "openai"


def test_priority_is_sent_only_when_nonzero_and_enabled() -> None:
    from inferopt.engines.base import GenRequest

    async def run() -> dict:
        async with FakeOpenAIServer() as srv:
            for send in (True, False):
                engine = OpenAIEngine(_system(srv, send_priority=send))
                await engine.start()
                try:
                    for rid, prio in ((f"p1-{send}", 1), (f"p0-{send}", 0)):
                        async for _ in engine.stream(GenRequest(rid, [5, 6, 7], 2, priority=prio)):
                            pass
                finally:
                    await engine.stop()
            return srv.bodies

    bodies = asyncio.run(run())
    assert bodies["p1-True"]["priority"] == 1
    assert "priority" not in bodies["p0-True"] and "priority" not in bodies["p1-False"]
