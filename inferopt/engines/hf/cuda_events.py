"""Device-side timing of the hf engine's prefill and decode steps with CUDA events (the GPU side of step 1).

    timer = PhaseEventTimer.for_device("cuda:0")     # or "cpu": a no-op that says why
    with timer.phase("prefill"): tokens = batch.prefill()
    with timer.phase("decode"):  tokens = batch.step()
    timer.summary()  # {"available": True, "prefill_ms_total": ..., "decode_ms_mean": ..., ...}

What is measured is GPU time between the events — kernels and gaps inside the phase — next to the host clock
the engine already records per token; their difference is host overhead and launch latency. `event_stats` is
the pure reduction (count, total, mean, max per phase) `summary()` uses.

What this module deliberately does not do: synchronize on its own in the hot path, profile kernels (the op
profile in `inferopt.locate.profile` does), or time anything on CPU (the engine's clock does).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

NOT_AVAILABLE = "not available: "


def event_stats(durations_ms: Mapping[str, Sequence[float]]) -> dict[str, float]:
    """Per phase: `<phase>_n`, `<phase>_ms_total`, `<phase>_ms_mean`, `<phase>_ms_max` (pure)."""
    out: dict[str, float] = {}
    for phase, values in durations_ms.items():
        vals = [float(v) for v in values]
        out[f"{phase}_n"] = float(len(vals))
        out[f"{phase}_ms_total"] = float(sum(vals))
        out[f"{phase}_ms_mean"] = float(sum(vals) / len(vals)) if vals else float("nan")
        out[f"{phase}_ms_max"] = float(max(vals)) if vals else float("nan")
    return out


class PhaseEventTimer:
    """CUDA-event timing per named phase; a no-op with a reason where CUDA is not in use.

    On CUDA each `phase()` records a start and an end `torch.cuda.Event(enable_timing=True)` on the current
    stream; the pairs are resolved (`elapsed_time`, after the end event completed) in `flush()`, which the
    engine's loop calls once per batch (the step's `.tolist()` has synchronized by then, so resolving does not
    stall the GPU) and `summary()` calls before reporting. On any other device `phase()` does nothing and
    `summary()` is {"available": False, "reason": "not available: <why>"}."""

    def __init__(self, enabled: bool, reason: str | None = None) -> None:
        self.enabled = enabled
        self.reason = reason
        self._pending: list[tuple[str, Any, Any]] = []
        self._done: dict[str, list[float]] = {}
        self._lock = threading.Lock()  # the engine's worker thread records; info() may summarize from another

    @classmethod
    def for_device(cls, device: str) -> PhaseEventTimer:
        if not str(device).startswith("cuda"):
            return cls(False, NOT_AVAILABLE + f"the engine runs on {device}, CUDA events time GPU work only")
        try:
            import torch

            if not torch.cuda.is_available():
                return cls(False, NOT_AVAILABLE + "torch.cuda.is_available() is False")
        except ImportError as exc:
            return cls(False, NOT_AVAILABLE + f"torch not importable ({exc})")
        return cls(True)

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        import torch

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        try:
            yield
        finally:
            end.record()
            with self._lock:
                self._pending.append((name, start, end))

    def flush(self) -> None:
        """Resolve the recorded pairs whose end event has completed (all of them after a synchronize)."""
        with self._lock:
            keep = []
            for name, start, end in self._pending:
                if end.query():
                    self._done.setdefault(name, []).append(float(start.elapsed_time(end)))
                else:
                    keep.append((name, start, end))
            self._pending = keep

    def summary(self) -> dict[str, Any]:
        if not self.enabled:
            return {"available": False, "reason": self.reason}
        import torch

        torch.cuda.synchronize()
        self.flush()
        with self._lock:
            stats = event_stats(self._done)
        return {"available": True, "source": "torch.cuda.Event elapsed_time", **stats}
