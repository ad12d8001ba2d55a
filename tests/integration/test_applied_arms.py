"""Every value of the hf engine's kernel and quantization knobs takes effect (issue 13 item 6), not only runs.

Each case serves a few tokens of the builtin tiny Llama through the real path (`make_engine`, which loads with
`load_system_model`) and then inspects what was served: the Linear modules' classes and weight tensors
(bitsandbytes, quanto, torchao), parameter dtypes, weight bytes against fp32's in the band the bits allow, the
KV-cache object the engine filled and its bytes per token, and which attention function ran how many times per
forward (spies on transformers' `ALL_ATTENTION_FUNCTIONS`, its eager function and torch's sdpa). The cases are
the `Literal` values of `HFSystem`'s fields, so a value added there without a check here fails.

What cannot run here skips with `inferopt.engines.unavailable_reason`'s words (flash attention off CUDA; double
quant on an AVX512-BF16 CPU, where a test shows bitsandbytes undoing it). flex_attention (torch.compile on CPU)
and quanto int4 (its packing) are `slow`. Deliberately not here: token-for-token equality with `generate`
(test_quantized_arms.py, test_hf_engine.py) and output quality.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, get_args

import pytest

torch = pytest.importorskip("torch")

import transformers.models.llama.modeling_llama as modeling_llama  # noqa: E402
from transformers import DynamicCache, QuantizedCache, StaticCache  # noqa: E402
from transformers.cache_utils import (  # noqa: E402
    DynamicLayer,
    Fp8QuantizedLayer,
    HQQQuantizedLayer,
    QuantoQuantizedLayer,
    StaticLayer,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS  # noqa: E402

from inferopt.config import HFSystem, ModelSpec  # noqa: E402
from inferopt.engines import FinishEvent, GenRequest, make_engine, unavailable_reason  # noqa: E402
from inferopt.model.loading import load_system_model  # noqa: E402

KNOBS = ("weight_quantization", "kv_cache", "dtype", "attn_implementation")
PROMPT = [1] + [3 + (11 * j) % 250 for j in range(40)]  # 41 tokens
MAX_NEW = 4
SCALE_SLACK = 0.3  # quantized Linear weights: bits/8 bytes each, plus at most 30 % for scales / zero points
KV_SLACK = 0.15  # quantized KV: bits/32 of full precision per token, plus at most 15 % of it (scales, residual)


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


GPU_ONLY = {"flash_attention_2", "flash_attention_3"}  # asked for with device: auto (cuda where there is one)


def _system(**knobs: Any) -> HFSystem:
    device = "auto" if GPU_ONLY & set(knobs.values()) else "cpu"
    return HFSystem(
        model=ModelSpec(path="builtin:tiny-llama"), torch_threads=1, stop_at_eos=False, device=device, **knobs
    )


# --------------------------------------------------------------------------- serving, with spies


@dataclass(frozen=True)
class Served:
    system: HFSystem
    tokens: list[int]
    info: dict[str, Any]
    model: Any
    caches: list[Any]  # the KV-cache object of every batch the engine ran, as it was at the batch's end
    attention_calls: Counter  # attention function -> calls while the request was served
    forwards: int  # model forward calls while the request was served

    @property
    def cfg(self) -> Any:
        return self.model.config


def _spy(counter: Counter, name: str, fn: Callable) -> Callable:
    @functools.wraps(fn)
    def counted(*args: Any, **kwargs: Any) -> Any:
        counter[name] += 1
        return fn(*args, **kwargs)

    return counted


@contextlib.contextmanager
def attention_spies() -> Iterator[Counter]:
    """Count calls of each attention function: the registry's sdpa, flex and flash entries (what a model's
    attention looks up on every forward), Llama's eager function (the registry's default) and torch's fused sdpa."""
    calls: Counter = Counter()
    registry = ("sdpa", "flex_attention", *sorted(GPU_ONLY))
    originals = {k: ALL_ATTENTION_FUNCTIONS[k] for k in registry}
    eager, fused = modeling_llama.eager_attention_forward, torch.nn.functional.scaled_dot_product_attention
    for k in registry:
        ALL_ATTENTION_FUNCTIONS[k] = _spy(calls, k, originals[k])  # a local override on the shared instance
    modeling_llama.eager_attention_forward = _spy(calls, "eager", eager)
    torch.nn.functional.scaled_dot_product_attention = _spy(calls, "torch_sdpa", fused)
    try:
        yield calls
    finally:
        for k in registry:
            del ALL_ATTENTION_FUNCTIONS[k]  # back to the global mapping
        modeling_llama.eager_attention_forward = eager
        torch.nn.functional.scaled_dot_product_attention = fused


def _serve(system: HFSystem) -> Served:
    engine = make_engine(system)
    caches: list[Any] = []
    note = engine.kv.note

    def keep_and_note(cache: Any, positions: int) -> None:  # the engine notes each batch's cache at its end
        caches.append(cache)
        note(cache, positions)

    engine.kv.note = keep_and_note

    async def go() -> tuple[list[int], dict[str, Any], Counter, int]:
        await engine.start()  # loads the model (load_system_model) and runs its warm-up: not counted below
        forwards = Counter()
        hook = engine.model.register_forward_pre_hook(lambda *_: forwards.update(("forward",)))
        tokens: list[int] = []
        try:
            with attention_spies() as calls:
                async for ev in engine.stream(GenRequest("r0", PROMPT, MAX_NEW)):
                    if not isinstance(ev, FinishEvent):
                        tokens.extend(ev.token_ids)
            return tokens, engine.info(), calls, forwards["forward"]
        finally:
            hook.remove()
            await engine.stop()

    tokens, info, calls, forwards = asyncio.run(go())
    assert len(tokens) == MAX_NEW and len(caches) == 1
    return Served(system, tokens, info, engine.model, caches, calls, forwards)


@functools.cache
def baseline() -> Served:
    """The fp32, sdpa, dynamic-cache, unquantized system, served once for the module (kept for its figures)."""
    return _serve(_system())


def served(system: HFSystem) -> Served:
    return baseline() if system == _system() else _serve(system)


def decoder_linears(model: Any) -> list[Any]:
    """The Linear modules of the decoder layers: the ones weight quantization replaces (lm_head stays)."""
    return [m for m in model.model.layers.modules() if isinstance(m, torch.nn.Linear)]


def full_kv_bytes_per_token(cfg: Any, element_bytes: int) -> int:
    """Keys and values of every layer at one position, unquantized."""
    return 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * element_bytes


# --------------------------------------------------------------------------- weight quantization


def assert_weight_bytes_in_band(s: Served, bits: int) -> None:
    """The decoder Linears' bytes are bits/8 per weight plus at most SCALE_SLACK for quantization constants;
    everything else (embeddings, norms, lm_head) keeps its fp32 bytes."""
    base = baseline()
    numel = sum(m.weight.numel() for m in decoder_linears(base.model))
    other = base.info["weight_bytes"] - 4 * numel
    linear_bytes = s.info["weight_bytes"] - other
    packed = numel * bits / 8
    assert packed <= linear_bytes <= packed * (1 + SCALE_SLACK), (linear_bytes / packed, s.info["weight_bytes"])


def check_unquantized_weights(s: Served) -> None:
    for m in decoder_linears(s.model):
        assert type(m) is torch.nn.Linear and type(m.weight.data) is torch.Tensor and m.weight.dtype == torch.float32
    assert s.info["weight_bytes"] == 4 * sum(p.numel() for p in s.model.parameters())


def check_bnb_int8(s: Served) -> None:
    import bitsandbytes as bnb

    for m in decoder_linears(s.model):
        assert type(m) is bnb.nn.Linear8bitLt and isinstance(m.weight, bnb.nn.Int8Params)
        scales = m.weight.SCB if m.weight.SCB is not None else m.state.SCB  # the first forward moves them to state
        assert m.weight.dtype == torch.int8 and scales.shape == (m.out_features,)  # int8 rows + one scale per row
        assert not m.state.has_fp16_weights
    assert_weight_bytes_in_band(s, 8)


def check_bnb_4bit(s: Served, quant_type: str) -> None:
    import bitsandbytes as bnb

    double = s.system.bnb_double_quant
    for m in decoder_linears(s.model):
        assert type(m) is bnb.nn.Linear4bit and isinstance(m.weight, bnb.nn.Params4bit)
        state = m.weight.quant_state
        assert m.weight.dtype == torch.uint8 and m.weight.numel() == m.in_features * m.out_features // 2  # 2 per byte
        assert state.quant_type == quant_type and state.nested is double and (state.state2 is not None) is double
    assert_weight_bytes_in_band(s, 4)
    base = baseline()
    numel = sum(m.weight.numel() for m in decoder_linears(base.model))
    overhead = (s.info["weight_bytes"] - (base.info["weight_bytes"] - 4 * numel)) / (numel / 2) - 1
    # absmax per 64 weights: fp32 (4 B = +12.5 %) without double quant, uint8 + nested fp32 (~ +4 %) with it
    assert (overhead < 0.08) if double else (0.12 <= overhead < 0.15), overhead


def check_quanto(s: Served, bits: int) -> None:
    from optimum.quanto import QLinear, QTensor, qint2, qint4, qint8
    from optimum.quanto.tensor.weights import WeightQBitsTensor, WeightQBytesTensor

    qtype = {8: qint8, 4: qint4, 2: qint2}[bits]
    tensor_class = WeightQBytesTensor if bits == 8 else WeightQBitsTensor  # int8 bytes; int4/int2 packed bits
    for m in decoder_linears(s.model):
        assert type(m) is QLinear and m.weight_qtype == qtype
        assert isinstance(m.weight, QTensor) and type(m.weight) is tensor_class and m.weight.qtype == qtype
    assert_weight_bytes_in_band(s, bits)


def check_torchao_int8(s: Served) -> None:
    from torchao.quantization import Int8Tensor

    for m in decoder_linears(s.model):
        assert type(m) is torch.nn.Linear and type(m.weight) is Int8Tensor and m.weight.qdata.dtype == torch.int8
    assert_weight_bytes_in_band(s, 8)


# --------------------------------------------------------------------------- dtype


def check_dtype(s: Served, dtype: str) -> None:
    want = getattr(torch, dtype)
    assert {p.dtype for p in s.model.parameters()} == {want} and s.info["dtype"] == dtype
    size = torch.empty((), dtype=want).element_size()
    assert s.info["weight_bytes"] == size * sum(p.numel() for p in s.model.parameters())
    assert s.info["kv_bytes_per_token"] == full_kv_bytes_per_token(s.cfg, size)  # the cache holds this dtype too
    (cache,) = s.caches
    assert all(layer.keys.dtype == want for layer in cache.layers)


# --------------------------------------------------------------------------- KV cache


def generate_cache(system: HFSystem) -> Any:
    """The cache `generate` builds for the system's model as `load_system_model` loads it (what lm-eval and the
    drift evaluator call), so it can be checked to be the served one."""
    model = load_system_model(system).model
    with torch.no_grad():
        out = model.generate(
            input_ids=torch.tensor([PROMPT]),
            max_new_tokens=2,
            do_sample=False,
            pad_token_id=0,
            return_dict_in_generate=True,
        )
    return out.past_key_values


def check_dynamic_cache(s: Served) -> None:
    for cache in (*s.caches, generate_cache(s.system)):
        assert type(cache) is DynamicCache and {type(layer) for layer in cache.layers} == {DynamicLayer}
    assert s.info["kv_bytes_per_token"] == full_kv_bytes_per_token(s.cfg, 4)


def check_static_cache(s: Served) -> None:
    (cache,) = s.caches
    for c in (cache, generate_cache(s.system)):
        assert type(c) is StaticCache and {type(layer) for layer in c.layers} == {StaticLayer}
    assert {layer.max_cache_len for layer in cache.layers} == {len(PROMPT) + MAX_NEW}  # preallocated, not grown
    buffer = full_kv_bytes_per_token(s.cfg, 4) * (len(PROMPT) + MAX_NEW)  # the whole buffer, filled or not
    assert buffer <= s.info["kv_peak_bytes"] < buffer + full_kv_bytes_per_token(s.cfg, 4)


def quantized_states_are(layer: Any, backend: str, bits: int) -> None:
    """The layer keeps its keys and values in the backend's quantized form, with `bits` bits."""
    keys = layer._quantized_keys
    if backend == "quanto":
        from optimum.quanto import QTensor, qint2, qint4

        assert type(layer) is QuantoQuantizedLayer and layer.nbits == bits
        assert isinstance(keys, QTensor) and keys.qtype == {2: qint2, 4: qint4}[bits]
    elif backend == "hqq":
        assert type(layer) is HQQQuantizedLayer and layer.nbits == bits
        assert keys[0].dtype == torch.uint8 and keys[1]["nbits"] == bits
    else:
        assert type(layer) is Fp8QuantizedLayer and keys[0].dtype == torch.float8_e4m3fn


def check_quantized_cache(s: Served, backend: str, bits: int) -> None:
    (cache,) = s.caches
    for c in (cache, generate_cache(s.system)):
        assert type(c) is QuantizedCache
        for layer in c.layers:
            quantized_states_are(layer, backend, bits)
            if backend != "fp8":
                assert layer.residual_length == s.system.kv_residual_length
    full = full_kv_bytes_per_token(s.cfg, 4)
    assert full * bits / 32 <= s.info["kv_bytes_per_token"] <= full * (bits / 32 + KV_SLACK), s.info
    assert s.info["weight_bytes"] == baseline().info["weight_bytes"]  # a KV arm leaves the weights alone


def check_short_residual(s: Served) -> None:
    """kv_residual_length: 2 flushes the full-precision residual into the quantized states every two tokens
    (3 decode steps: at most 1 position left in full precision; the default 128 would keep all 3)."""
    check_quantized_cache(s, "quanto", 4)
    (cache,) = s.caches
    assert all(layer.keys.numel() == 0 or layer.keys.shape[-2] < 2 for layer in cache.layers)


# --------------------------------------------------------------------------- attention kernel

ATTENTION_FUNCTIONS = ("eager", "sdpa", "flex_attention", *sorted(GPU_ONLY), "torch_sdpa")


def check_attention(s: Served, used: tuple[str, ...]) -> None:
    """`used` ran once per layer per forward while the request was served, and no other attention function."""
    assert s.cfg._attn_implementation == s.system.attn_implementation == s.info["attn_implementation"]
    assert s.forwards == MAX_NEW  # prefill + MAX_NEW - 1 decode steps
    want = {f: s.cfg.num_hidden_layers * s.forwards for f in used}
    assert {f: s.attention_calls[f] for f in ATTENTION_FUNCTIONS} == {f: want.get(f, 0) for f in ATTENTION_FUNCTIONS}


# --------------------------------------------------------------------------- the cases


CHECKS: dict[tuple[str, Any], Callable[[Served], None]] = {
    ("weight_quantization", "none"): check_unquantized_weights,
    ("weight_quantization", "bnb-int8"): check_bnb_int8,
    ("weight_quantization", "bnb-nf4"): functools.partial(check_bnb_4bit, quant_type="nf4"),
    ("weight_quantization", "bnb-fp4"): functools.partial(check_bnb_4bit, quant_type="fp4"),
    ("weight_quantization", "quanto-int8"): functools.partial(check_quanto, bits=8),
    ("weight_quantization", "quanto-int4"): functools.partial(check_quanto, bits=4),
    ("weight_quantization", "quanto-int2"): functools.partial(check_quanto, bits=2),
    ("weight_quantization", "torchao-int8"): check_torchao_int8,
    ("kv_cache", "dynamic"): check_dynamic_cache,
    ("kv_cache", "static"): check_static_cache,
    **{
        ("kv_cache", value): functools.partial(check_quantized_cache, backend=backend, bits=bits)
        for value, backend, bits in (
            ("quanto-int2", "quanto", 2),
            ("quanto-int4", "quanto", 4),
            ("quantized-int2", "quanto", 2),
            ("quantized-int4", "quanto", 4),
            ("hqq-int2", "hqq", 2),
            ("hqq-int4", "hqq", 4),
            ("hqq-int8", "hqq", 8),
            ("fp8", "fp8", 8),
        )
    },
    **{("dtype", d): functools.partial(check_dtype, dtype=d) for d in ("float32", "bfloat16", "float16")},
    ("attn_implementation", "eager"): functools.partial(check_attention, used=("eager",)),
    ("attn_implementation", "sdpa"): functools.partial(check_attention, used=("sdpa", "torch_sdpa")),
    ("attn_implementation", "flex_attention"): functools.partial(check_attention, used=("flex_attention",)),
    **{("attn_implementation", f): functools.partial(check_attention, used=(f,)) for f in sorted(GPU_ONLY)},
}
# sub-options of the knobs above, each checked on top of its parent's check
SUB_OPTIONS: dict[str, tuple[dict[str, Any], Callable[[Served], None]]] = {
    "bnb-nf4+double_quant": (
        {"weight_quantization": "bnb-nf4", "bnb_double_quant": True},
        CHECKS[("weight_quantization", "bnb-nf4")],
    ),
    "bnb-fp4+double_quant": (
        {"weight_quantization": "bnb-fp4", "bnb_double_quant": True},
        CHECKS[("weight_quantization", "bnb-fp4")],
    ),
    "quanto-int4+residual_2": ({"kv_cache": "quanto-int4", "kv_residual_length": 2}, check_short_residual),
}
SLOW = {  # still run in CI; off the fast suite (~5 min)
    ("attn_implementation", "flex_attention"),  # torch.compile of flex_attention on CPU: ~30-80 s here
    ("weight_quantization", "quanto-int4"),  # quanto's int4 packing of every linear: ~33 s here
    ("weight_quantization", "quanto-int2"),  # the same packing at 2 bits: ~42 s here
}


def knob_values(knob: str) -> tuple[Any, ...]:
    return get_args(HFSystem.model_fields[knob].annotation)


def test_every_knob_value_has_a_check() -> None:
    assert set(CHECKS) == {(k, v) for k in KNOBS for v in knob_values(k)}


def _run(knobs: dict[str, Any], check: Callable[[Served], None]) -> None:
    system = _system(**knobs)
    why = unavailable_reason(system)
    if why is not None:
        pytest.skip(why)
    check(served(system))


@pytest.mark.parametrize(
    "knob,value",
    [
        pytest.param(k, v, id=f"{k}={v}", marks=[pytest.mark.slow] if (k, v) in SLOW else [])
        for k in KNOBS
        for v in knob_values(k)
    ],
)
def test_knob_value_is_applied(knob: str, value: Any) -> None:
    _run({knob: value}, CHECKS[(knob, value)])


@pytest.mark.parametrize("name", list(SUB_OPTIONS))
def test_sub_option_is_applied(name: str) -> None:
    _run(*SUB_OPTIONS[name])


# --------------------------------------------------------------------------- bitsandbytes on this CPU


def _avx512bf16() -> bool:
    from bitsandbytes.functional import has_avx512bf16

    return bool(has_avx512bf16())


def test_bnb_4bit_warm_up_does_the_cpu_repacking() -> None:
    """bitsandbytes repacks 4-bit weights for its AVX512-BF16 CPU kernel at the first forward, and `state_dict`
    unpacks them again: the engine's warm-up must be the first forward after its last state_dict (weight bytes),
    else the first served request pays the repacking (~100 ms TTFT on the tiny model)."""
    system = _system(weight_quantization="bnb-nf4")
    if (why := unavailable_reason(system)) is not None or not _avx512bf16():
        pytest.skip(why or "bitsandbytes repacks 4-bit weights only on CPUs with AVX512-BF16; this one has none")
    engine = make_engine(system)

    async def packed_after_start() -> set[bool]:
        await engine.start()
        try:
            return {
                getattr(m.weight.quant_state, "packing_format_for_cpu", False) for m in decoder_linears(engine.model)
            }
        finally:
            await engine.stop()

    assert asyncio.run(packed_after_start()) == {True}


def test_double_quant_is_refused_where_bitsandbytes_undoes_it() -> None:
    """The reason `unavailable_reason` gives for `bnb_double_quant` on this CPU is what bitsandbytes does: the
    double-quantized constants exist at load and are gone after one forward (if this fails, bitsandbytes now keeps
    them: drop the refusal, `inferopt.model.loading.double_quant_support`)."""
    from transformers import AutoModelForCausalLM

    from inferopt.model.loading import double_quant_support, quantization_config, resolve_model_dir

    system = _system(weight_quantization="bnb-nf4", bnb_double_quant=True)
    why = double_quant_support("cpu")
    if why is None:
        pytest.skip("this CPU keeps bitsandbytes' double quantization (test_sub_option_is_applied checks it)")
    assert unavailable_reason(system) == why
    with pytest.raises(ValueError, match="bnb_double_quant: true is undone"):
        load_system_model(system)
    model = AutoModelForCausalLM.from_pretrained(
        resolve_model_dir(system.model), quantization_config=quantization_config("bnb-nf4", double_quant=True)
    ).eval()
    states = [m.weight.quant_state for m in decoder_linears(model)]
    assert all(s.nested for s in states)
    with torch.inference_mode():
        model(input_ids=torch.tensor([PROMPT]))
    assert not any(s.nested for s in states) and {s.absmax.dtype for s in states} == {torch.bfloat16}
