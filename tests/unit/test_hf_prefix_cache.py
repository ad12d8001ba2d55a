"""The hf engine's prefix cache: the block-hash cache itself (chained keys hit on growing histories, the byte
bound evicts tails first, reset), the engine on the builtin tiny model (greedy tokens identical with and without
it, `cached_tokens` and fewer prefilled tokens on a shared prefix), the config's refusals, and the warm_cache
lint firing when the warm-ups are left in the cache."""

import asyncio

import numpy as np
import pytest
import torch

from inferopt.config import HFSystem, ModelSpec
from inferopt.engines.hf.prefix_cache import PrefixKVCache, block_hashes, kv_nbytes

TINY = "builtin:tiny-llama"
BLOCK = 4


def _kv(a: int, b: int, layers: int = 2):
    """A fake block's KV: (kv_heads 2, b - a tokens, head_dim 3) per layer, valued by position."""
    t = torch.arange(a, b, dtype=torch.float32).view(1, -1, 1).expand(2, -1, 3).clone()
    return tuple((t, -t) for _ in range(layers))


BLOCK_BYTES = kv_nbytes(_kv(0, BLOCK))


def test_block_hashes_are_chained_over_whole_blocks():
    a = block_hashes(list(range(10)), BLOCK)
    assert len(a) == 2  # the partial third block has no key
    b = block_hashes([*range(8), 99, 99, 99, 99], BLOCK)
    assert b[:2] == a and len(b) == 3
    c = block_hashes([7, *range(1, 12)], BLOCK)  # first block differs: every later key differs too
    assert not set(c) & set(a)
    assert block_hashes(list(range(4, 8)), BLOCK) != a[1:]  # a block's key names its whole prefix


def test_a_growing_history_hits_on_every_earlier_block():
    cache = PrefixKVCache(BLOCK, 100 * BLOCK_BYTES)
    turn1 = list(range(10))
    assert cache.lookup(turn1) == []
    assert cache.store(turn1, _kv) == 2
    turn2 = turn1 + [50, 51, 52, 53, 54, 55, 56]
    hit = cache.lookup(turn2)
    assert len(hit) == 2 and torch.equal(hit[1][0][0], _kv(4, 8)[0][0])
    cache.store(turn2, _kv)
    turn3 = turn2 + [60] * 9
    assert len(cache.lookup(turn3)) == 4  # 16 of turn2's 17 tokens are whole blocks
    assert len(cache.lookup(list(range(8)))) == 1  # exactly two blocks: one token must stay to prefill
    assert len(cache.lookup([1, *range(1, 12)])) == 0  # same later blocks, other first block: a miss
    s = cache.stats
    assert s.hit_tokens == 4 * (2 + 4 + 1) and s.queries_tokens == 10 + 17 + 26 + 8 + 12 and s.stored_blocks == 4


def test_the_byte_bound_evicts_least_recently_used_tails_first():
    cache = PrefixKVCache(BLOCK, 3 * BLOCK_BYTES)
    a, b = list(range(9)), list(range(100, 109))
    cache.store(a, _kv)
    cache.store(b, _kv)  # room for one more block: a's tail goes, its root stays
    assert cache.bytes <= 3 * BLOCK_BYTES and len(cache) == 3 and cache.stats.evicted_blocks == 1
    assert len(cache.lookup(a)) == 1 and len(cache.lookup(b)) == 2
    long = list(range(200, 221))  # 5 blocks, more than the bound: the root blocks that fit are kept
    cache.store(long, _kv)
    assert cache.bytes <= 3 * BLOCK_BYTES and len(cache.lookup(long)) == 3
    assert cache.stats.peak_bytes <= 3 * BLOCK_BYTES
    with pytest.raises(ValueError, match="must be >= 1"):
        PrefixKVCache(0, 10)


def test_reset_empties_the_blocks_and_keeps_the_counters():
    cache = PrefixKVCache(BLOCK, 100 * BLOCK_BYTES)
    cache.store(list(range(12)), _kv)
    cache.lookup(list(range(13)))
    hits = cache.stats.hit_tokens
    cache.reset()
    assert len(cache) == 0 and cache.bytes == 0 and cache.lookup(list(range(13))) == []
    assert cache.stats.hit_tokens == hits and cache.stats.resets == 1


def test_config_refuses_what_the_prefix_cache_cannot_join():
    with pytest.raises(ValueError, match="fix: kv_cache: dynamic"):
        HFSystem(model=ModelSpec(path=TINY), enable_prefix_caching=True, kv_cache="quanto-int4")
    with pytest.raises(ValueError, match="speculative decoding"):
        HFSystem(
            model=ModelSpec(path=TINY),
            enable_prefix_caching=True,
            batching={"max_batch_size": 1},
            speculative={"draft_model": "layers:1"},
        )
    with pytest.raises(ValueError, match="sliding_window: null"):
        HFSystem(model=ModelSpec(path=TINY), enable_prefix_caching=True, sliding_window=32)
    on = HFSystem(model=ModelSpec(path=TINY), enable_prefix_caching=True).capabilities
    assert on.prefix_cache is True and on.prefix_cache_reset == "in-process reset"
    assert "enable_prefix_caching" in on.knobs
    assert HFSystem(model=ModelSpec(path=TINY)).capabilities.prefix_cache is False  # default off


def _system(on: bool, **kw) -> HFSystem:
    return HFSystem(
        model=ModelSpec(path=TINY),
        stop_at_eos=False,
        enable_prefix_caching=on,
        prefix_cache_block_tokens=16,
        batching={"max_batch_size": 4, "batch_wait_ms": 30},
        **kw,
    )


@pytest.fixture(scope="module", params=["sdpa", "eager"])
def loaded(request):
    from inferopt.model.loading import load_system_model

    torch.set_num_threads(1)
    return request.param, load_system_model(_system(False, attn_implementation=request.param))


async def _serve(system: HFSystem, waves, loaded):
    """Each wave's requests at once, waves one after another; a wave may be made from the outputs so far."""
    from inferopt.engines.base import GenRequest, TokenEvent
    from inferopt.engines.hf.engine import HFEngine

    engine = HFEngine(system, preloaded=loaded)
    await engine.start()
    before = await engine.server_metrics()

    async def one(rid, prompt, n):
        toks, fin = [], None
        async for ev in engine.stream(GenRequest(request_id=rid, prompt_token_ids=prompt, max_new_tokens=n)):
            if isinstance(ev, TokenEvent):
                toks += ev.token_ids
            else:
                fin = ev.server
        return toks, fin

    out = []
    for wave in waves:
        wave = wave(out) if callable(wave) else wave
        out += await asyncio.gather(*[one(*r) for r in wave])
    after = await engine.server_metrics()
    info = engine.info()
    await engine.stop()
    return out, {k: after[k] - before.get(k, 0.0) for k in after}, info


def test_engine_reuses_shared_prefixes_with_identical_tokens(loaded):
    rng = np.random.default_rng(5)
    shared = rng.integers(3, 250, size=70).tolist()
    other = rng.integers(3, 250, size=23).tolist()
    waves = [
        [("a", shared + [5, 6, 7], 10)],
        # one batch, three cached lengths (64, 0, 32): left padding between the cached part and the suffix
        [("b", shared + [9, 10], 8), ("c", other, 12), ("d", shared[:40] + [1, 2, 3], 6)],
        # the next turn: a's prompt and answer as history; a fed 73 + 9 tokens, 5 whole blocks
        lambda out: [("e", shared + [5, 6, 7] + out[0][0] + [11] * 5, 9)],
    ]
    attn, model = loaded
    plain, plain_m, _ = asyncio.run(_serve(_system(False, attn_implementation=attn), waves, model))
    cached, m, info = asyncio.run(_serve(_system(True, attn_implementation=attn), waves, model))
    assert [t for t, _ in cached] == [t for t, _ in plain]  # token for token (greedy)
    hits = [f.cached_tokens for _, f in cached]
    assert hits == [0, 64, 0, 32, 80] and all(f.cached_tokens == 0 for _, f in plain)
    assert m["prefix_cache_hits_total"] == sum(hits)
    assert m["prefix_cache_queries_total"] == 73 + 72 + 23 + 43 + 88
    assert plain_m["prefill_tokens_total"] - m["prefill_tokens_total"] == sum(hits)  # only suffixes prefilled
    assert info["prefix_cache"] is True and info["prefix_cache_stats"]["blocks"] > 0
    assert (
        info["peak_memory_bytes"]
        == info["weight_bytes"] + info["kv_peak_bytes"] + info["prefix_cache_stats"]["peak_bytes"]
    )
    assert "prefix_cache_queries_total" not in plain_m


def test_warmups_are_reset_and_a_kept_warm_cache_is_refused_by_the_lint():
    from inferopt.config import LengthConfig, PoissonArrivals, PrefixConfig, WorkloadConfig
    from inferopt.measure.runner import RunTags
    from inferopt.measure.session import run_system
    from inferopt.verdict.lint.postrun import RunEvidence, check_warm_cache
    from inferopt.workload.build import build_workload

    table = build_workload(
        WorkloadConfig(
            name="prefix-lint",
            seed=3,
            num_requests=4,
            arrival=PoissonArrivals(rate_per_s=50.0),
            lengths=LengthConfig(input_median=8, output_median=3, output_max=4),
            prefix=PrefixConfig(num_groups=1, prefix_len=40, share_fraction=1.0),
        )
    )
    found = {}
    for reset in (True, False):
        run = run_system(
            _system(True, prefix_cache_reset_after_warmup=reset),
            table,
            RunTags(arm="baseline", scenario="lint"),
            timeout_s=20.0,
            warmup_requests=2,
        )
        assert not run.failed, run.error
        first = run.phases.set_index("request_id").loc[table["request_id"].iloc[0]]  # warm-up 0 sent it before
        found[reset] = (int(first["cached_tokens"]), check_warm_cache([RunEvidence("m", "measure", run)], 2))
    assert found[True] == (0, [])  # emptied after the warm-ups: the first measured request is cold
    cached, [finding] = found[False]
    assert cached > 0 and finding.evidence["check"] == "prefix_cache_not_reset" and finding.severity == "refuse"


def test_the_shipped_candidate_makes_cache_state_its_one_variable():
    from pathlib import Path

    from inferopt.ablate.plan import plan_arms
    from inferopt.choose.remedies import CATALOGUE
    from inferopt.config import load_config

    cfg = load_config(Path(__file__).resolve().parents[2] / "configs/candidates/hf-prefix-cache.yaml")
    arms = {a.name: a.system for a in plan_arms(cfg)}
    assert arms["baseline"].capabilities.prefix_cache is False
    assert arms["candidate"].capabilities.prefix_cache is True
    assert arms["candidate"] == arms["baseline"].model_copy(
        update={"enable_prefix_caching": True, "name": arms["candidate"].name}
    )
    assert any("enable_prefix_caching" in r.config_fields for r in CATALOGUE)
