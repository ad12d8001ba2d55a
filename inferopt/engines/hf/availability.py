"""Can an hf system's options run on this machine? What each option is known to need, checked before any
model loads: CUDA for `device: cuda` and the GPU-only attention kernels, the package an option's code lives
in, an architecture with sliding-window attention for `sliding_window`, a device where bitsandbytes keeps
double quantization for `bnb_double_quant`.

Deliberately not here: loading the model (a start failure is the engine's own, `HFEngine.start`) or deciding
what a missing option means for an ablation arm (`inferopt.ablate.availability`).
"""

from __future__ import annotations

import importlib.util

from inferopt.config import HFSystem
from inferopt.model.loading import double_quant_support, resolve_model_dir, sliding_window_support

GPU_ONLY_ATTENTION = {
    "flash_attention_2": "flash_attn",  # attn_implementation -> the package it needs
    "flash_attention_3": "flash_attn_interface",
}
# an option -> the package its code lives in (listed in pyproject; missing only on a partial install)
OPTION_PACKAGES = {
    ("kv_cache", "hqq-"): "hqq",
    ("kv_cache", "quanto-"): "optimum.quanto",
    ("kv_cache", "quantized-"): "optimum.quanto",
    ("weight_quantization", "quanto-"): "optimum.quanto",
    ("weight_quantization", "torchao-"): "torchao",
    ("weight_quantization", "bnb-"): "bitsandbytes",
}


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _attention_reason(system: HFSystem, cuda: bool) -> str | None:
    package = GPU_ONLY_ATTENTION.get(system.attn_implementation)
    if package is None:
        return None
    if not cuda or system.device == "cpu":
        return (
            f"attn_implementation: {system.attn_implementation} is GPU-only (CUDA kernels) and this arm would "
            f"run on cpu"
        )
    if importlib.util.find_spec(package) is None:
        return f"attn_implementation: {system.attn_implementation} needs the {package!r} package, not installed here"
    return None


def unavailable_reason(system: HFSystem) -> str | None:
    """Why `system` cannot run on this machine, or None when nothing known stands in its way."""
    cuda = cuda_available()
    if system.device == "cuda" and not cuda:
        return "device: cuda, but torch sees no CUDA device on this machine"
    why = _attention_reason(system, cuda)
    if why:
        return why
    for (fld, prefix), package in OPTION_PACKAGES.items():
        value = getattr(system, fld)
        if value.startswith(prefix) and importlib.util.find_spec(package.split(".")[0]) is None:
            return (
                f"{fld}: {value} needs the {package!r} package, not installed here; fix: pip install -e . "
                "(pyproject lists it)"
            )
    if system.bnb_double_quant:
        why_not = double_quant_support("cuda" if cuda and system.device != "cpu" else "cpu")
        if why_not:
            return why_not
    if system.sliding_window is not None:
        why_not = sliding_window_support(resolve_model_dir(system.model))
        if why_not:
            return f"sliding_window: {system.sliding_window}: {why_not}"
    return None
