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

        return build_model_dir(spec.path[len(BUILTIN_PREFIX):])
    return Path(spec.path)


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device: cuda was asked for but torch sees no CUDA device; fix: device: cpu or auto")
    return device


def load_model(spec: ModelSpec, dtype: str = "float32", attn_implementation: str = "sdpa", device: str = "cpu") -> LoadedModel:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # one bar per arm and trial drowns the run's own progress lines
    path = resolve_model_dir(spec)
    dev = resolve_device(device)
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=getattr(torch, dtype), attn_implementation=attn_implementation
    )
    model = model.to(dev).eval()
    tok_path = Path(spec.tokenizer) if spec.tokenizer else path
    tokenizer = AutoTokenizer.from_pretrained(tok_path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return LoadedModel(model=model, tokenizer=tokenizer, path=path, device=dev, dtype=dtype)
