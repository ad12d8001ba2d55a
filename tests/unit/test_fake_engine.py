"""FakeEngine: static batching, batch-wait window, admission, timestamps, errors, determinism (ms-scale)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from inferopt.config import BatchingKnobs, FakeSystem
from inferopt.engines import FinishEvent, GenRequest, RequestRejected, make_engine
from inferopt.engines.fake import FakeEngine
from inferopt.records import ServerTimings


@dataclass
class Outcome:
    request_id: str
    kind: str = "ok"  # ok / rejected / error
    tokens: list[int] = field(default_factory=list)
    server: ServerTimings | None = None
    error: str | None = None


def _req(i: int, prompt_len: int = 8, max_new: int = 4, **kw) -> GenRequest:
    return GenRequest(
        request_id=f"r{i}", prompt_token_ids=[1] + [10 + j for j in range(prompt_len - 1)], max_new_tokens=max_new, **kw
    )


async def _consume(engine: FakeEngine, req: GenRequest) -> Outcome:
    out = Outcome(req.request_id)
    try:
        async for ev in engine.stream(req):
            if isinstance(ev, FinishEvent):
                out.server = ev.server
            else:
                out.tokens.extend(ev.token_ids)
    except RequestRejected as exc:
        out.kind, out.error = "rejected", str(exc)
    except RuntimeError as exc:
        out.kind, out.error = "error", str(exc)
    return out


async def _run(system: FakeSystem, requests: list[GenRequest], gaps_s: list[float] | None = None) -> list[Outcome]:
    engine = make_engine(system)
    assert isinstance(engine, FakeEngine)
    await engine.start()
    try:
        tasks = []
        for i, req in enumerate(requests):
            if gaps_s and i:
                await asyncio.sleep(gaps_s[i - 1])
            tasks.append(asyncio.create_task(_consume(engine, req)))
        return await asyncio.gather(*tasks)
    finally:
        await engine.stop()


FAST = {
    "context_ms": 0.1,
    "prefill_base_ms": 0.5,
    "prefill_ms_per_token": 0.01,
    "decode_step_ms": 0.5,
    "decode_ms_per_seq": 0.05,
}


def test_concurrent_arrivals_are_grouped_up_to_max_batch_size() -> None:
    system = FakeSystem(**FAST, batching=BatchingKnobs(max_batch_size=3, batch_wait_ms=50))
    outs = asyncio.run(_run(system, [_req(i) for i in range(7)]))
    assert all(o.kind == "ok" for o in outs)
    sizes = [o.server.batch_size_at_admit for o in outs]
    assert sizes == [3, 3, 3, 3, 3, 3, 1]
    # members of one batch share admission and prefill times
    assert len({o.server.admitted_s for o in outs[:3]}) == 1
    assert len({o.server.prefill_end_s for o in outs[:3]}) == 1
    # B1: the second batch starts only after the first batch finished
    assert outs[3].server.admitted_s >= max(o.server.done_s for o in outs[:3])


def test_batch_wait_window_delays_a_lone_request() -> None:
    wait_ms = 40.0
    system = FakeSystem(**FAST, batching=BatchingKnobs(max_batch_size=4, batch_wait_ms=wait_ms))
    (out,) = asyncio.run(_run(system, [_req(0)]))
    queued_s = out.server.admitted_s - out.server.arrival_s
    assert queued_s >= wait_ms / 1000 * 0.95
    assert queued_s < wait_ms / 1000 + 0.5
    system0 = FakeSystem(**FAST, batching=BatchingKnobs(max_batch_size=4, batch_wait_ms=0))
    (out0,) = asyncio.run(_run(system0, [_req(0)]))
    assert out0.server.admitted_s - out0.server.arrival_s < queued_s


def test_max_queue_rejects_arrivals_beyond_the_bound() -> None:
    # the first batch (1 request) runs ~long decode while 5 more arrive; only 2 may wait
    system = FakeSystem(
        **{**FAST, "decode_step_ms": 5.0}, batching=BatchingKnobs(max_batch_size=1, batch_wait_ms=0, max_queue=2)
    )
    reqs = [_req(0, max_new=8)] + [_req(i) for i in range(1, 6)]
    outs = asyncio.run(_run(system, reqs, gaps_s=[0.005] + [0.0] * 4))
    kinds = [o.kind for o in outs]
    assert kinds[0] == "ok"
    assert kinds.count("ok") == 3 and kinds.count("rejected") == 3
    for o in outs:
        if o.kind == "rejected":
            assert o.tokens == [] and o.server is None and "max_queue=2" in o.error


def test_timestamps_are_ordered_and_one_per_token() -> None:
    system = FakeSystem(**FAST, jitter_cv=0.3, batching=BatchingKnobs(max_batch_size=2, batch_wait_ms=2))
    reqs = [_req(i, prompt_len=4 + i, max_new=3 + i) for i in range(5)]
    outs = asyncio.run(_run(system, reqs, gaps_s=[0.001] * 4))
    for o, req in zip(outs, reqs, strict=False):
        s = o.server
        assert o.kind == "ok" and s.finish_reason == "length"
        assert len(o.tokens) == req.max_new_tokens == len(s.token_s)
        chain = [s.arrival_s, s.admitted_s, s.context_ready_s, s.prefill_start_s, s.prefill_end_s, *s.token_s, s.done_s]
        assert chain == sorted(chain), chain
        assert all(3 <= t < system.vocab_size for t in o.tokens)


def test_prefill_and_decode_delays_follow_the_script() -> None:
    system = FakeSystem(
        context_ms=0.0,
        prefill_base_ms=2.0,
        prefill_ms_per_token=1.0,
        decode_step_ms=3.0,
        decode_ms_per_seq=0.0,
        batching=BatchingKnobs(max_batch_size=1, batch_wait_ms=0),
    )
    (out,) = asyncio.run(_run(system, [_req(0, prompt_len=20, max_new=5)]))
    s = out.server
    assert s.prefill_end_s - s.prefill_start_s >= 0.022 * 0.95
    gaps = [b - a for a, b in zip(s.token_s, s.token_s[1:], strict=False)]
    assert min(gaps) >= 0.003 * 0.95


def test_error_rate_yields_errors_mid_stream() -> None:
    system = FakeSystem(**FAST, error_rate=1.0, batching=BatchingKnobs(max_batch_size=4, batch_wait_ms=1))
    outs = asyncio.run(_run(system, [_req(i) for i in range(4)]))
    assert all(o.kind == "error" for o in outs)
    assert all(len(o.tokens) == 1 for o in outs)  # errors after prefill, after the first token
    half = FakeSystem(**FAST, error_rate=0.5, seed=3, batching=BatchingKnobs(max_batch_size=8, batch_wait_ms=1))
    kinds = [o.kind for o in asyncio.run(_run(half, [_req(i) for i in range(40)]))]
    assert 5 < kinds.count("error") < 35 and kinds.count("ok") + kinds.count("error") == 40


def test_cached_prefix_needs_a_served_group() -> None:
    system = FakeSystem(**FAST, cached_prefix_fraction=1.0, batching=BatchingKnobs(max_batch_size=1, batch_wait_ms=0))
    reqs = [_req(i, prompt_len=30, prefix_group=0, prefix_len=16) for i in range(3)] + [_req(9, prompt_len=30)]
    outs = asyncio.run(_run(system, reqs))
    assert [o.server.cached_tokens for o in outs] == [0, 16, 16, 0]


def test_seeded_runs_are_deterministic() -> None:
    def once(seed: int) -> list[tuple]:
        system = FakeSystem(
            **FAST,
            error_rate=0.3,
            cached_prefix_fraction=0.5,
            jitter_cv=0.5,
            seed=seed,
            batching=BatchingKnobs(max_batch_size=4, batch_wait_ms=1),
        )
        reqs = [_req(i, prefix_group=i % 2, prefix_len=4) for i in range(12)]
        outs = asyncio.run(_run(system, reqs))
        return [(o.kind, tuple(o.tokens), o.server.cached_tokens if o.server else None) for o in outs]

    assert once(7) == once(7)
    assert once(7) != once(8)


def test_cancelled_consumer_stops_and_is_recorded() -> None:
    async def scenario() -> int:
        system = FakeSystem(
            **{**FAST, "decode_step_ms": 2.0}, batching=BatchingKnobs(max_batch_size=2, batch_wait_ms=0)
        )
        engine = make_engine(system)
        await engine.start()
        got = 0
        agen = engine.stream(_req(0, max_new=50))
        async for _ in agen:
            got += 1
            if got == 3:
                break
        await agen.aclose()
        metrics_before = (await engine.server_metrics())["tokens_generated"]
        await asyncio.sleep(0.03)
        metrics_after = (await engine.server_metrics())["tokens_generated"]
        await engine.stop()
        assert metrics_after <= metrics_before + 1
        return got

    assert asyncio.run(scenario()) == 3


@pytest.mark.parametrize("bad", [{"error_rate": 1.5}, {"jitter_cv": -1.0}])
def test_invalid_fake_knobs_are_rejected_by_config(bad: dict) -> None:
    with pytest.raises(ValueError):
        FakeSystem(**bad)


def test_weight_dtype_scales_the_decode_step_by_weight_bytes() -> None:
    base = {"context_ms": 0.0, "prefill_base_ms": 0.0, "prefill_ms_per_token": 0.0, "decode_ms_per_seq": 0.0}
    knobs = BatchingKnobs(max_batch_size=1, batch_wait_ms=0)
    gaps = {}
    for dtype in ("float32", "int8"):
        system = FakeSystem(**base, decode_step_ms=8.0, weight_dtype=dtype, batching=knobs)
        (out,) = asyncio.run(_run(system, [_req(0, max_new=6)]))
        steps = [b - a for a, b in zip(out.server.token_s, out.server.token_s[1:], strict=False)]
        gaps[dtype] = sorted(steps)[len(steps) // 2]
    assert gaps["float32"] >= 0.008 * 0.95 and gaps["int8"] < 0.6 * gaps["float32"]  # 2 ms + the loop's overshoot


def _kv_run(kv_cache_tokens: int, dtype: str = "fp16") -> tuple[list[Outcome], FakeEngine, dict, dict]:
    system = FakeSystem(
        **FAST, kv_cache_tokens=kv_cache_tokens, kv_cache_dtype=dtype, batching=BatchingKnobs(max_batch_size=4)
    )
    engine = make_engine(system)

    async def go():
        await engine.start()
        await engine.server_metrics()  # opens the peaks' window, as the runner's first scrape does
        try:
            outs = await asyncio.gather(*(_consume(engine, _req(i, prompt_len=8, max_new=8)) for i in range(4)))
            return outs, await engine.server_metrics(), engine.info()
        finally:
            await engine.stop()

    outs, metrics, info = asyncio.run(go())
    return outs, engine, metrics, info


def test_a_kv_cache_too_small_preempts_and_every_request_still_gets_all_its_tokens() -> None:
    # four 8-token prompts growing to 16 tokens each: 64 tokens at the end, in a cache of 40
    outs, engine, metrics, info = _kv_run(40)
    assert [o.kind for o in outs] == ["ok"] * 4 and all(len(o.tokens) == 8 for o in outs)
    assert metrics["num_preemptions_total"] > 0 and engine.preemptions == metrics["num_preemptions_total"]
    peaks = info["server_gauge_peaks"]
    assert peaks["kv_cache_usage_perc_max"] == 1.0 and peaks["num_requests_running_max"] == 4.0
    for o in outs:  # a resumed request keeps its first admission and one stamp per token
        assert o.server.admitted_s is not None and len(o.server.token_s) == 8
    # an fp8 cache holds twice the tokens (80 >= 64): nothing preempted, the cache not full
    _, _, metrics8, info8 = _kv_run(40, "fp8")
    assert metrics8["num_preemptions_total"] == 0 and info8["server_gauge_peaks"]["kv_cache_usage_perc_max"] < 0.95


def test_no_kv_cache_reports_nothing_kv() -> None:
    engine = make_engine(FakeSystem(**FAST))
    metrics = asyncio.run(engine.server_metrics())
    assert "num_preemptions_total" not in metrics and "server_gauge_peaks" not in engine.info()
