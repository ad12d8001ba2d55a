"""Load a model and tokenizer for serving: the one code path for builtin models and real model directories.

A builtin spec (`builtin:tiny-llama`) is first materialised as a normal `save_pretrained` directory, then
loaded with `AutoModelForCausalLM.from_pretrained` exactly like a real model on a GPU.

The quantization and KV-cache knobs of an HFSystem map to transformers' own configs here (BitsAndBytesConfig,
QuantoConfig, TorchAoConfig; QuantizedCache arguments; a config override for the sliding window), so the
engine, the profiler and the evaluators load the same model. An option that would load and then be ignored or
undone (a sliding window the architecture lacks, double quant on an AVX512-BF16 CPU) is refused instead.

Deliberately not here: building cache objects per batch (`inferopt.engines.hf.loop.make_cache`) and
measuring bytes (`inferopt.model.memory`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferopt.config import BUILTIN_PREFIX, ModelSpec
from inferopt.model.build import build_model_dir
from inferopt.model.builtin import shipped_dir

# transformers imports torchao when it is installed; torchao then warns that its CUDA-only extensions (mxfp8,
# cutlass) do not load — on a CPU box that is expected, and it would print on every model load
logging.getLogger("torchao").setLevel(logging.ERROR)


@dataclass(frozen=True)
class LoadedModel:
    model: Any
    tokenizer: Any
    path: Path
    device: str
    dtype: str


def resolve_model_dir(spec: ModelSpec) -> Path:
    """The directory to load from; builds a builtin model on first use."""
    if spec.is_builtin:
        name = spec.path[len(BUILTIN_PREFIX) :]
        return shipped_dir(name) or build_model_dir(name)
    return Path(spec.path)


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device: cuda was asked for but torch sees no CUDA device; fix: device: cpu or auto")
    return device


def quantization_config(weight_quantization: str, double_quant: bool = False) -> Any:
    """transformers' quantization config for a `weight_quantization` setting (None for "none").
    `double_quant`: bitsandbytes 4-bit's `bnb_4bit_use_double_quant` (the config refuses it elsewhere)."""
    if weight_quantization == "none":
        return None
    backend, bits = weight_quantization.split("-")
    if backend == "bnb":
        from transformers import BitsAndBytesConfig

        if bits == "int8":
            return BitsAndBytesConfig(load_in_8bit=True)
        return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=bits, bnb_4bit_use_double_quant=double_quant)
    if backend == "quanto":
        from transformers import QuantoConfig

        return QuantoConfig(weights=bits)
    if backend == "torchao" and bits == "int8":
        from torchao.quantization import Int8WeightOnlyConfig  # ImportError without torchao: the arm is skipped
        from transformers import TorchAoConfig

        return TorchAoConfig(quant_type=Int8WeightOnlyConfig())
    raise ValueError(
        f"weight_quantization {weight_quantization!r}: unknown; fix: none, bnb-int8|nf4|fp4, "
        "quanto-int8|int4|int2, torchao-int8"
    )


# kv_cache setting -> (QuantizedCache backend, bits); bits None = the backend takes none (fp8: per-tensor scale)
QUANTIZED_KV = {
    "quanto-int2": ("quanto", 2),
    "quanto-int4": ("quanto", 4),
    "quantized-int2": ("quanto", 2),
    "quantized-int4": ("quanto", 4),
    "hqq-int2": ("hqq", 2),
    "hqq-int4": ("hqq", 4),
    "hqq-int8": ("hqq", 8),
    "fp8": ("fp8", None),
}


def kv_cache_bits(kv_cache: str) -> int | None:
    """Bits of a quantized KV cache setting (None = full precision; fp8 = 8)."""
    if kv_cache not in QUANTIZED_KV:
        return None
    bits = QUANTIZED_KV[kv_cache][1]
    return 8 if bits is None else bits


def quantized_cache_kwargs(kv_cache: str, residual_length: int = 128) -> dict[str, Any] | None:
    """`QuantizedCache(**kwargs, config=...)` arguments for a quantized `kv_cache` setting (None otherwise)."""
    if kv_cache not in QUANTIZED_KV:
        return None
    backend, bits = QUANTIZED_KV[kv_cache]
    if bits is None:
        return {"backend": backend}
    return {"backend": backend, "nbits": bits, "residual_length": residual_length}


def sliding_window_support(model_dir: Path) -> str | None:
    """None when the model's architecture has sliding-window attention in transformers (its config class has
    a `sliding_window` field that its attention reads), else the reason it cannot have one."""
    from transformers import AutoConfig

    model_type = json.loads((Path(model_dir) / "config.json").read_text()).get("model_type", "?")
    try:
        default = AutoConfig.for_model(model_type)
    except (KeyError, ValueError):
        return f"model type {model_type!r} is unknown to transformers"
    if not hasattr(default, "sliding_window"):
        return (
            f"model type {model_type!r} has no sliding-window attention in transformers (its config has no "
            "sliding_window field); fix: a model with one (e.g. Mistral, Qwen2), or drop sliding_window"
        )
    return None


def double_quant_support(device: str) -> str | None:
    """None when bitsandbytes keeps 4-bit double quantization while serving on `device`, else why it would not.
    On a CPU with AVX512-BF16, bitsandbytes (0.50) repacks every 4-bit Linear for its CPU kernel at the first
    forward and dequantizes the nested constants back to one bf16 absmax per block: the served weights are then
    the same with and without `bnb_4bit_use_double_quant`, and only the bytes measured at load would differ."""
    if device != "cpu":
        return None
    from bitsandbytes.functional import has_avx512bf16  # lazy: imports torch; only double-quant arms ask

    if not has_avx512bf16():
        return None
    return (
        "bnb_double_quant: true is undone on this CPU: bitsandbytes repacks 4-bit weights for its AVX512-BF16 "
        "kernel at the first forward and dequantizes the double-quantized constants (one bf16 absmax per block), "
        "so the served weights would not be double-quantized; fix: device: cuda, or drop bnb_double_quant"
    )


def load_system_model(system: Any, **kwargs: Any) -> LoadedModel:
    """Load an HFSystem's model with every loading knob it has (dtype, attention, device, weight quantization,
    sliding window), and make `generate` use its KV-cache setting — so evaluators (lm-eval, drift) see the
    model as served."""
    loaded = load_model(
        system.model,
        dtype=system.dtype,
        attn_implementation=system.attn_implementation,
        device=system.device,
        weight_quantization=getattr(system, "weight_quantization", "none"),
        double_quant=getattr(system, "bnb_double_quant", False),
        sliding_window=getattr(system, "sliding_window", None),
        **kwargs,
    )
    kv = getattr(system, "kv_cache", "dynamic")
    qkw = quantized_cache_kwargs(kv, getattr(system, "kv_residual_length", 128))
    if qkw is not None:
        loaded.model.generation_config.cache_implementation = "quantized"
        loaded.model.generation_config.cache_config = qkw
    elif kv == "static":
        loaded.model.generation_config.cache_implementation = "static"
    return loaded


def load_model(
    spec: ModelSpec,
    dtype: str = "float32",
    attn_implementation: str = "sdpa",
    device: str = "cpu",
    weight_quantization: str = "none",
    double_quant: bool = False,
    sliding_window: int | None = None,
) -> LoadedModel:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one bar per arm and trial drowns the run's own progress lines
    path = resolve_model_dir(spec)
    dev = resolve_device(device)
    qcfg = quantization_config(weight_quantization, double_quant)
    if double_quant and (why_not := double_quant_support(dev)):  # it would load, then be undone: a no-op arm
        raise ValueError(why_not)
    extra: dict[str, Any] = {"quantization_config": qcfg} if qcfg is not None else {}
    if sliding_window is not None:
        why_not = sliding_window_support(path)
        if why_not:  # transformers would store the field and ignore it: a silent no-op arm
            raise ValueError(f"sliding_window: {sliding_window}: {why_not}")
        extra["sliding_window"] = sliding_window
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=getattr(torch, dtype), attn_implementation=attn_implementation, **extra
    )
    model = (model if qcfg is not None and weight_quantization.startswith("bnb") else model.to(dev)).eval()
    tok_path = Path(spec.tokenizer) if spec.tokenizer else path
    tokenizer = AutoTokenizer.from_pretrained(tok_path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return LoadedModel(model=model, tokenizer=tokenizer, path=path, device=dev, dtype=dtype)
