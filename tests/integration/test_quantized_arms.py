"""Weight and KV-cache quantization knobs of an hf system (SPEC K2, K4): the engine's own loop and
`generate` (what lm-eval calls) serve the same quantized model, token for token."""

from __future__ import annotations

import asyncio

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("optimum.quanto")

from inferopt.config import HFSystem, ModelSpec
from inferopt.engines import FinishEvent, GenRequest, make_engine
from inferopt.engines.hf_loop import GreedyBatch, left_pad
from inferopt.model.loading import kv_cache_bits, load_system_model, quantization_config

PROMPT = [1] + [3 + (11 * j) % 250 for j in range(40)]


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def test_knob_parsing() -> None:
    assert quantization_config("none") is None
    assert type(quantization_config("quanto-int4")).__name__ == "QuantoConfig"
    assert quantization_config("bnb-nf4").bnb_4bit_quant_type == "nf4"
    assert kv_cache_bits("dynamic") is None and kv_cache_bits("quantized-int2") == 2
    with pytest.raises(ValueError, match="fix"):
        quantization_config("gptq-int4")


@pytest.mark.parametrize("weights,kv", [("quanto-int8", "dynamic"), ("none", "quantized-int4")])
def test_engine_loop_matches_generate_under_quantization(weights: str, kv: str) -> None:
    system = HFSystem(model=ModelSpec(path="builtin:tiny-llama"), torch_threads=1, weight_quantization=weights, kv_cache=kv)
    loaded = load_system_model(system)
    ids, mask = left_pad([PROMPT], 0)
    ref = loaded.model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=6,
                                pad_token_id=0, eos_token_id=None)[0, ids.shape[1]:].tolist()
    batch = GreedyBatch(loaded.model, ids, mask, 6, kv_cache=kv)
    ours = [batch.prefill()[0]] + [batch.step()[0] for _ in range(5)]
    assert ours == ref


def test_engine_serves_a_quantized_arm() -> None:
    system = HFSystem(model=ModelSpec(path="builtin:tiny-llama"), torch_threads=1, weight_quantization="quanto-int4",
                      kv_cache="quantized-int2", stop_at_eos=False)

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
