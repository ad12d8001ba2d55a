"""GPU-only checks (skipped with a reason without CUDA): the same loading code and forward loop on a CUDA
device — greedy outputs equal `generate`, the engine's timestamps are ordered, the roofs measure sanely."""

from __future__ import annotations

import asyncio

import pytest

torch = pytest.importorskip("torch")

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

from inferopt.config import BatchingKnobs, HFSystem, ModelSpec  # noqa: E402
from inferopt.engines import FinishEvent, GenRequest, make_engine  # noqa: E402
from inferopt.engines.hf.loop import greedy_generate, left_pad  # noqa: E402
from inferopt.model.loading import load_model  # noqa: E402

SPEC = ModelSpec(path="builtin:tiny-llama")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_greedy_loop_equals_generate_on_cuda(dtype: str) -> None:
    lm = load_model(SPEC, dtype=dtype, attn_implementation="sdpa", device="cuda")
    prompts = [[1] + [3 + (11 * i + 7 * j) % 250 for j in range(n)] for i, n in enumerate((5, 17, 9, 30))]
    ids, mask = left_pad(prompts, 0, device="cuda")
    ref = lm.model.generate(
        input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=12, min_new_tokens=12, pad_token_id=0
    )[:, ids.shape[1] :].tolist()
    ours = greedy_generate(lm.model, ids, mask, 12)
    assert ours == ref


def test_engine_on_cuda_records_ordered_timestamps() -> None:
    system = HFSystem(
        model=SPEC, device="cuda", attn_implementation="sdpa", batching=BatchingKnobs(max_batch_size=4, batch_wait_ms=5)
    )

    async def go():
        engine = make_engine(system)
        await engine.start()
        try:

            async def one(i):
                fin = None
                async for ev in engine.stream(GenRequest(f"r{i}", [1] + list(range(3, 3 + 8 + i)), 6)):
                    if isinstance(ev, FinishEvent):
                        fin = ev.server
                return fin

            return await asyncio.gather(*(one(i) for i in range(4)))
        finally:
            await engine.stop()

    for t in asyncio.run(go()):
        seq = [t.arrival_s, t.admitted_s, t.context_ready_s, t.prefill_start_s, t.prefill_end_s, *t.token_s, t.done_s]
        assert all(a <= b for a, b in zip(seq, seq[1:], strict=False))


def test_cuda_roofs_are_plausible() -> None:
    from inferopt.locate.hardware import measure_device

    m = measure_device("bfloat16", 1, device="cuda")
    print(m)
    assert m["device"] == "cuda"
    assert m["matmul_flop_per_s"] > 1e13 and m["copy_bytes_per_s"] > 1e11
