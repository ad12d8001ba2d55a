"""Weight and KV-cache quantization knobs of an hf system (SPEC K2, K4): the engine's own loop and
`generate` (what lm-eval calls) serve the same quantized model, token for token."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("optimum.quanto")

from inferopt.config import HFSystem, ModelSpec  # noqa: E402
from inferopt.engines import FinishEvent, GenRequest, make_engine  # noqa: E402
from inferopt.engines.hf.loop import GreedyBatch, left_pad  # noqa: E402
from inferopt.model.loading import kv_cache_bits, load_system_model, quantization_config  # noqa: E402

PROMPT = [1] + [3 + (11 * j) % 250 for j in range(40)]


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def test_knob_parsing() -> None:
    assert quantization_config("none") is None
    assert type(quantization_config("quanto-int4")).__name__ == "QuantoConfig"
    assert quantization_config("bnb-nf4").bnb_4bit_quant_type == "nf4"
    assert kv_cache_bits("dynamic") is None and kv_cache_bits("quantized-int2") == 2
    assert quantization_config("bnb-fp4", double_quant=True).bnb_4bit_use_double_quant is True
    if importlib.util.find_spec("torchao") is not None:
        assert type(quantization_config("torchao-int8")).__name__ == "TorchAoConfig"
    with pytest.raises(ValueError, match="fix"):
        quantization_config("gptq-int4")


@pytest.mark.parametrize("weights,kv", [("quanto-int8", "dynamic"), ("none", "quantized-int4")])
def test_engine_loop_matches_generate_under_quantization(weights: str, kv: str) -> None:
    system = HFSystem(
        model=ModelSpec(path="builtin:tiny-llama"), torch_threads=1, weight_quantization=weights, kv_cache=kv
    )
    loaded = load_system_model(system)
    ids, mask = left_pad([PROMPT], 0)
    ref = loaded.model.generate(
        input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=6, pad_token_id=0, eos_token_id=None
    )[0, ids.shape[1] :].tolist()
    batch = GreedyBatch(loaded.model, ids, mask, 6, kv_cache=kv)
    ours = [batch.prefill()[0]] + [batch.step()[0] for _ in range(5)]
    assert ours == ref


def test_engine_serves_a_quantized_arm() -> None:
    system = HFSystem(
        model=ModelSpec(path="builtin:tiny-llama"),
        torch_threads=1,
        weight_quantization="quanto-int4",
        kv_cache="quantized-int2",
        stop_at_eos=False,
    )

    async def go() -> tuple[list[int], object]:
        engine = make_engine(system)
        await engine.start()
        try:
            toks, server = [], None
            async for ev in engine.stream(GenRequest("r0", PROMPT, 5)):
                if isinstance(ev, FinishEvent):
                    server = ev.server
                else:
                    toks.extend(ev.token_ids)
            return toks, server
        finally:
            await engine.stop()

    toks, server = asyncio.run(go())
    assert len(toks) == 5 and server is not None and server.finish_reason == "length"
    assert system.model_dump()["weight_quantization"] == "quanto-int4"


# --------------------------------------------------------------------------- bytes, measured per trial


def _engine_info(system: HFSystem) -> dict:
    async def go() -> dict:
        engine = make_engine(system)
        await engine.start()
        try:
            async for _ in engine.stream(GenRequest("r0", PROMPT, 6)):
                pass
            return engine.info()
        finally:
            await engine.stop()

    return asyncio.run(go())


@pytest.mark.slow
def test_engine_reports_fewer_kv_and_weight_bytes_under_quantization() -> None:
    base = dict(model=ModelSpec(path="builtin:tiny-llama"), torch_threads=1, stop_at_eos=False)
    full = _engine_info(HFSystem(**base))
    kv4 = _engine_info(HFSystem(**base, kv_cache="quanto-int4"))
    w8 = _engine_info(HFSystem(**base, weight_quantization="quanto-int8"))
    # fp32 tiny-llama: 6 layers x (K, V) x 4 kv-heads x 32 dims x 4 bytes = 6144 bytes per cached position
    assert full["kv_bytes_per_token"] == 6144.0
    assert kv4["kv_peak_bytes"] < 0.4 * full["kv_peak_bytes"] and kv4["weight_bytes"] == full["weight_bytes"]
    assert w8["weight_bytes"] < 0.35 * full["weight_bytes"] and w8["kv_peak_bytes"] == full["kv_peak_bytes"]
    assert full["peak_memory_bytes"] == full["weight_bytes"] + full["kv_peak_bytes"]  # cpu: weights + peak KV


@pytest.mark.slow
def test_ablation_reports_memory_effects_with_cis_and_skips_what_cannot_run(tmp_path) -> None:
    import json
    from pathlib import Path

    from inferopt.ablate.run import ablate
    from inferopt.config import CandidateConfig, load_config

    root = Path(__file__).resolve().parents[2]
    d = load_config(root / "configs/candidates/cpu-ablation.yaml").model_dump(mode="json")
    d["changes"] = {"weight_quantization": "quanto-int8", "kv_cache": "quanto-int4"}
    d["target_metrics"] = ["peak_memory_bytes", "kv_peak_bytes"]
    d["ablation"] = {
        "repeats": 2,
        "num_requests": 4,
        "aa_arm": False,
        "extra_arms": [{"attn_implementation": "flash_attention_2"}],
    }
    d["measure"] = {"warmup_requests": 0}
    res = ablate(CandidateConfig.model_validate(json.loads(json.dumps(d))), tmp_path)
    eff = res.effects.set_index(["arm", "metric"])
    kv, w = eff.loc[("kv_cache", "kv_peak_bytes")], eff.loc[("weight_quantization", "weight_bytes")]
    assert kv["ratio_hi"] < 0.5 and kv["significant"] and kv["direction"] == "better"
    assert w["ratio_lo"] <= w["ratio"] <= w["ratio_hi"] < 0.35  # a side effect here: its CI, tested only if both
    peak = eff.loc[("weight_quantization", "peak_memory_bytes")]  # targets moved (kv_peak_bytes did not: x1)
    assert peak["ratio_hi"] < 0.4 and peak["significant"] and peak["direction"] == "better"
    assert eff.loc[("kv_cache", "weight_bytes"), "ratio"] == 1.0  # the KV arm leaves the weights alone
    assert {("candidate", m) for m in ("tpot_ms_p50", "peak_memory_bytes")} <= set(eff.index)  # latency beside memory
    skipped = res.verdicts["attn_implementation=flash_attention_2"]
    assert skipped.verdict == "skipped" and "GPU-only" in skipped.reasons[0]
