"""Batching policies as pure functions of (waiting requests, clock): no threads, no I/O, no torch.

Static batching (B1): a batch is formed from the queue and runs until its longest member ends. A batch
starts when `max_batch_size` requests wait, or when the oldest has waited `batch_wait_ms` (B4: the
window trades TTFT for batch size). Admission control (B5): with `max_queue`, an arrival that finds
`max_queue` requests waiting is rejected on arrival.

Deliberately not here: continuous batching and chunked prefill (the vLLM engine has the real ones).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from inferopt.config import BatchingKnobs


@dataclass(frozen=True)
class Waiting:
    request_id: str
    arrival_s: float
    priority: int = 0


@dataclass(frozen=True)
class BatchDecision:
    batch: tuple[str, ...]  # request ids to admit now (empty = none)
    wait_s: float | None  # if no batch: how long until the policy should be asked again (None = until an arrival)


def admit_on_arrival(knobs: BatchingKnobs, n_waiting: int) -> bool:
    """Admission control: False means reject this arrival (queue at its bound)."""
    return knobs.max_queue is None or n_waiting < knobs.max_queue


def static_batch(knobs: BatchingKnobs, waiting: Sequence[Waiting], now_s: float) -> BatchDecision:
    """Decide whether to start a static batch now. `priority_order` arrival: FIFO, priority breaks ties;
    strict: best priority first, FIFO within a level. The wait window runs from the oldest arrival."""
    if not waiting:
        return BatchDecision(batch=(), wait_s=None)
    if knobs.priority_order == "strict":
        ordered = sorted(waiting, key=lambda w: (w.priority, w.arrival_s))
    else:
        ordered = sorted(waiting, key=lambda w: (w.arrival_s, w.priority))
    if len(ordered) >= knobs.max_batch_size:
        return BatchDecision(batch=tuple(w.request_id for w in ordered[: knobs.max_batch_size]), wait_s=None)
    deadline_s = min(w.arrival_s for w in ordered) + knobs.batch_wait_ms / 1000.0
    if now_s >= deadline_s:
        return BatchDecision(batch=tuple(w.request_id for w in ordered), wait_s=None)
    return BatchDecision(batch=(), wait_s=deadline_s - now_s)
