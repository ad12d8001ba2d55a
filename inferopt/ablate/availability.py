"""Can an arm's option run on this machine? An option that cannot (flash-attention on a CPU box, `device: cuda`
without a GPU, a kernel package that is not installed) is a *skipped* arm with its reason — not a failed one.
Failed means the option ran, or tried to, and crashed (an out-of-memory, a kernel error): that is evidence
against the option; skipped is only the absence of evidence here.

Two checks: before any trial, `unavailable_reason(system)`: each engine's own check of what its options are
known to need (`inferopt.engines.unavailable_reason`; no model is loaded: CUDA for GPU-only kernels, the package
an option's code lives in, vLLM's interpreter, an architecture with sliding-window attention); at start,
`start_failure_reason(run)`: the engine's start raising ImportError means the option's code is not here. Any
other start error (RuntimeError, OOM, ...) stays a failure: calling a crash "skipped" would hide it.

Deliberately not here: engine code (engines own start() and their option checks) and running trials (`run.py`).
"""

from __future__ import annotations

from inferopt.engines import unavailable_reason
from inferopt.measure.session import MeasuredRun

__all__ = ["start_failure_reason", "unavailable_reason"]


def start_failure_reason(run: MeasuredRun) -> str | None:
    """A skip reason when `run` failed because its option's code is missing here (ImportError at start)."""
    if not run.failed or run.failed_at != "start":
        return None
    if "ImportError" not in (run.error_type or "").split(","):
        return None
    first = (run.error or "").splitlines()[0] if run.error else "ImportError"
    return f"the engine could not start this option here: {first}"
