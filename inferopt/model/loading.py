"""Load a model and tokenizer for serving: the one code path for builtin models and real model directories.

A builtin spec (`builtin:tiny-llama`) is first materialised as a normal `save_pretrained` directory, then
loaded with `AutoModelForCausalLM.from_pretrained` exactly like a real model on a GPU.

Deliberately not here: quantization recipes and KV-cache variants (ablation options live with the arms).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferopt.config import BUILTIN_PREFIX, ModelSpec


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
        from inferopt.model.build import build_model_dir
        from inferopt.model.builtin import shipped_dir

        name = spec.path[len(BUILTIN_PREFIX):]
        return shipped_dir(name) or build_model_dir(name)
    return Path(spec.path)


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device: cuda was asked for but torch sees no CUDA device; fix: device: cpu or auto")
    return device


def quantization_config(weight_quantization: str) -> Any:
    """transformers' quantization config for a `weight_quantization` setting (None for "none")."""
    if weight_quantization == "none":
        return None
    backend, bits = weight_quantization.split("-")
    if backend == "bnb":
        from transformers import BitsAndBytesConfig

        if bits == "int8":
            return BitsAndBytesConfig(load_in_8bit=True)
        return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=bits)
    if backend == "quanto":
        from transformers import QuantoConfig

        return QuantoConfig(weights=bits)
    raise ValueError(f"weight_quantization {weight_quantization!r}: unknown; fix: none, bnb-int8|nf4|fp4, quanto-int8|int4|int2")


def kv_cache_bits(kv_cache: str) -> int | None:
    """Bits of a quantized KV cache setting (None = full precision)."""
    return int(kv_cache.removeprefix("quantized-int")) if kv_cache.startswith("quantized-") else None


def load_system_model(system: Any, **kwargs: Any) -> LoadedModel:
    """Load an HFSystem's model with every loading knob it has (dtype, attention, device, weight quantization),
    and make `generate` use its KV-cache setting — so evaluators (lm-eval, drift) see the model as served."""
    loaded = load_model(system.model, dtype=system.dtype, attn_implementation=system.attn_implementation,
                        device=system.device, weight_quantization=getattr(system, "weight_quantization", "none"), **kwargs)
    bits = kv_cache_bits(getattr(system, "kv_cache", "dynamic"))
    if bits is not None:
        loaded.model.generation_config.cache_implementation = "quantized"
        loaded.model.generation_config.cache_config = {"backend": "quanto", "nbits": bits}
    return loaded


def load_model(spec: ModelSpec, dtype: str = "float32", attn_implementation: str = "sdpa", device: str = "cpu",
               weight_quantization: str = "none") -> LoadedModel:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one bar per arm and trial drowns the run's own progress lines
    path = resolve_model_dir(spec)
    dev = resolve_device(device)
    qcfg = quantization_config(weight_quantization)
    extra = {"quantization_config": qcfg} if qcfg is not None else {}
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
