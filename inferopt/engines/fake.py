"""FakeEngine: the Engine protocol with scripted per-phase delays, for fast tests of everything above engines.

Same queue, static batching (B1) and admission control as `HFEngine` (`static_batch`, `admit_on_arrival`),
on the asyncio loop (no threads, no torch):

- context: `context_ms` per batch; prefill: `prefill_base_ms + prefill_ms_per_token × Σ uncached prompt
  tokens in the batch`; decode step: `decode_step_ms × weight bytes / 4 (weight_dtype) + decode_ms_per_seq ×
  live sequences`; with `kv_cache_tokens`, a step whose KV does not fit preempts the newest sequences (vLLM's
  recompute: back to the queue, their tokens so far prefilled again), counted and its peaks reported;
- every delay × lognormal noise (mean 1, coefficient of variation `jitter_cv`) from `default_rng(seed)`;
- per request, from an rng seeded by (seed, request_id), not by timing: whether it errors (`error_rate`, after
  its first token), whether its prefix counts as cached (`cached_prefix_fraction`, once its `prefix_group` was
  served by an earlier batch), its token ids (pseudo-random in [3, vocab_size): never EOS, it ends by length).
Deliberately not here: any model, real compute, or sampling semantics.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import zlib
from collections.abc import AsyncIterator
from typing import Any

import numpy as np

from inferopt.config import FakeSystem
from inferopt.engines.base import EngineBase, FinishEvent, GenRequest, RequestRejected, TokenEvent
from inferopt.engines.scheduler import Waiting, admit_on_arrival, static_batch
from inferopt.records import ServerTimings, now_s

__all__ = ["FakeEngine"]

_WEIGHT_BYTES = {"float32": 4.0, "bfloat16": 2.0, "int8": 1.0}  # per weight: the decode step reads them all
_KV_BYTES = {"fp16": 2.0, "fp8": 1.0}  # per KV element: an fp8 cache holds twice the tokens


class _Slot:
    __slots__ = (
        "cache_draw",
        "cancelled",
        "done",
        "pos",
        "preempted",
        "queue",
        "request",
        "timings",
        "tokens",
        "waiting",
        "will_error",
    )

    def __init__(
        self, request: GenRequest, key: str, arrival_s: float, tokens: list[int], will_error: bool, cache_draw: bool
    ) -> None:
        self.request = request
        self.timings = ServerTimings(arrival_s=arrival_s)
        self.queue: asyncio.Queue = asyncio.Queue()
        self.waiting = Waiting(request_id=key, arrival_s=arrival_s, priority=request.priority)
        self.tokens = tokens
        self.will_error = will_error
        self.cache_draw = cache_draw  # its prefix counts as cached if its group was already served
        self.done = False
        self.cancelled = False
        self.pos = 0  # tokens emitted so far (kept across a preemption)
        self.preempted = False  # sent back to the queue by a full KV cache: out of its batch until re-admitted


class _Error:
    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


class FakeEngine(EngineBase):
    """Scripted engine (see module docstring). Deterministic for a given seed and arrival schedule."""

    def __init__(self, system: FakeSystem) -> None:
        self.system = system
        self.knobs = system.batching
        self._rng = np.random.default_rng(system.seed)
        cv = system.jitter_cv
        self._sigma = math.sqrt(math.log1p(cv * cv)) if cv > 0 else 0.0
        self._waiting: dict[str, _Slot] = {}
        self._keys = itertools.count()
        self._served_groups: set[int] = set()
        self._wakeup: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._running: list[_Slot] = []
        self.batches_run = 0
        self.tokens_generated = 0
        self.preemptions = 0
        self._kv_peak = 0.0  # peak KV usage (0..1) and running sequences since the last server_metrics()
        self._running_peak = 0
        self._peaks: tuple[float, int] = (0.0, 0)

    async def start(self) -> None:
        self._wakeup = asyncio.Event()
        self._task = asyncio.create_task(self._worker(), name="fake-engine-worker")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        for slot in [*self._waiting.values(), *self._running]:
            if not slot.done:
                self._finish(slot, "error")
                slot.queue.put_nowait(_Error("engine stopped"))
        self._waiting.clear()
        self._running = []

    def info(self) -> dict[str, Any]:
        out = {"engine": "fake", **self.system.model_dump()}
        if self.system.kv_cache_tokens is not None:  # the peaks since the last scrape, as vLLM's gauge poller
            peaks = {"kv_cache_usage_perc_max": self._peaks[0], "num_requests_running_max": float(self._peaks[1])}
            out["server_gauge_peaks"] = peaks
        return out

    async def server_metrics(self) -> dict[str, float]:
        """Counters (the measure step takes their deltas); each call also closes a window of the KV and
        running-sequence peaks that `info()` reports (after the runner's second scrape: the measured load's)."""
        self._peaks = (self._kv_peak, self._running_peak)
        self._kv_peak, self._running_peak = 0.0, 0
        out = {
            "queue_depth": float(len(self._waiting)),
            "batches_run": float(self.batches_run),
            "tokens_generated": float(self.tokens_generated),
        }
        if self.system.kv_cache_tokens is not None:
            out["num_preemptions_total"] = float(self.preemptions)
        return out

    # ------------------------------------------------------------------ consumer side

    async def _transport(self, event: TokenEvent) -> None:
        """`transport_delay_ms`: the event reaches the client this long after the engine stamped it (a slow
        network or proxy between engine and client, planted so a decomposition check has something to find)."""
        delay_s = self.system.transport_delay_ms / 1000.0
        if delay_s > 0 and event.server_s is not None:
            wait_s = event.server_s + delay_s - now_s()
            if wait_s > 0:
                await asyncio.sleep(wait_s)

    async def stream(self, request: GenRequest) -> AsyncIterator[TokenEvent | FinishEvent]:
        arrival_s = now_s()
        if self._task is None:
            raise RuntimeError("FakeEngine.stream() before start(); fix: await engine.start() first")
        if not admit_on_arrival(self.knobs, len(self._waiting)):
            raise RequestRejected(f"queue full ({len(self._waiting)} waiting, max_queue={self.knobs.max_queue})")
        s = self.system
        rng = np.random.default_rng([s.seed & 0xFFFFFFFF, zlib.crc32(request.request_id.encode())])
        will_error = bool(rng.random() < s.error_rate)
        tokens = rng.integers(3, max(s.vocab_size, 4), size=max(request.max_new_tokens, 0)).tolist()
        cache_draw = bool(rng.random() < s.cached_prefix_fraction)
        slot = _Slot(request, str(next(self._keys)), arrival_s, tokens, will_error, cache_draw)
        self._waiting[slot.waiting.request_id] = slot
        self._wakeup.set()
        finished = False
        try:
            while True:
                event = await slot.queue.get()
                if isinstance(event, _Error):
                    finished = True
                    raise RuntimeError(event.message)  # noqa: TRY004
                if isinstance(event, FinishEvent):
                    finished = True
                    yield event
                    return
                await self._transport(event)
                yield event
        finally:
            if not finished:
                slot.cancelled = True
                if self._waiting.pop(slot.waiting.request_id, None) is not None:
                    self._finish(slot, "cancelled")

    # ------------------------------------------------------------------ worker task

    def _delay_s(self, ms: float) -> float:
        if self._sigma > 0:
            ms *= float(self._rng.lognormal(-self._sigma * self._sigma / 2, self._sigma))
        return ms / 1000.0

    def _finish(self, slot: _Slot, reason: str) -> None:
        slot.done = True
        slot.timings.done_s = now_s()
        slot.timings.finish_reason = reason

    async def _worker(self) -> None:
        while True:
            decision = static_batch(self.knobs, [s.waiting for s in self._waiting.values()], now_s())
            if not decision.batch:
                self._wakeup.clear()
                try:
                    await asyncio.wait_for(self._wakeup.wait(), timeout=decision.wait_s)
                except TimeoutError:
                    pass
                continue
            slots = [self._waiting.pop(k) for k in decision.batch]
            self._running = slots
            self.batches_run += 1
            try:
                await self._run_batch(slots)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - defensive: the script itself does not fail
                for slot in slots:
                    if not slot.done:
                        self._finish(slot, "error")
                        slot.queue.put_nowait(_Error(f"{type(exc).__name__}: {exc}"))
            self._running = []

    async def _run_batch(self, slots: list[_Slot]) -> None:
        s = self.system
        t = now_s()
        for slot in slots:
            slot.preempted = False  # re-admitted: its KV is recomputed in this batch's prefill
            if slot.pos == 0 and slot.timings.admitted_s is None:  # a resumed (preempted) one keeps its first stamps
                slot.timings.admitted_s = t
                slot.timings.batch_size_at_admit = len(slots)
        await asyncio.sleep(self._delay_s(s.context_ms))
        uncached = 0
        for slot in slots:
            req = slot.request
            hit = slot.cache_draw and req.prefix_group >= 0 and req.prefix_group in self._served_groups
            if slot.pos == 0:
                slot.timings.cached_tokens = min(req.prefix_len, len(req.prompt_token_ids)) if hit else 0
            uncached += len(req.prompt_token_ids) - slot.timings.cached_tokens + slot.pos  # recompute: + generated
        t = now_s()
        for slot in slots:
            if slot.pos == 0:
                slot.timings.context_ready_s = t
                slot.timings.prefill_start_s = t
        await asyncio.sleep(self._delay_s(s.prefill_base_ms + s.prefill_ms_per_token * uncached))
        t = now_s()
        for slot in slots:
            if slot.pos == 0:
                slot.timings.prefill_end_s = t
            if slot.request.prefix_group >= 0:
                self._served_groups.add(slot.request.prefix_group)
        await self._decode(slots, t)

    async def _decode(self, slots: list[_Slot], t: float) -> None:
        """One token per live sequence per step until every one has ended or was preempted (KV full)."""
        s = self.system
        weight_ms = s.decode_step_ms * _WEIGHT_BYTES[s.weight_dtype] / _WEIGHT_BYTES["float32"]
        while True:
            live = []
            for slot in slots:
                if slot.done or slot.preempted:  # a preempted one left its KV: it waits for a later batch
                    continue
                if slot.cancelled:
                    self._finish(slot, "cancelled")
                    continue
                if slot.will_error and slot.pos >= 1:
                    self._finish(slot, "error")
                    slot.queue.put_nowait(_Error("fake engine: scripted error (error_rate)"))
                    continue
                if slot.pos >= len(slot.tokens):
                    self._finish(slot, "length")
                    slot.queue.put_nowait(FinishEvent(slot.timings))
                    continue
                live.append(slot)
            live = self._fit_kv(live)
            for slot in live:
                slot.timings.token_s.append(t)
                slot.queue.put_nowait(TokenEvent((slot.tokens[slot.pos],), t))
                self.tokens_generated += 1
                slot.pos += 1
            for slot in live:
                if slot.pos >= len(slot.tokens) and not slot.will_error:
                    self._finish(slot, "length")
                    slot.queue.put_nowait(FinishEvent(slot.timings))
            n_live = sum(1 for slot in live if not slot.done)
            if not n_live:
                return
            await asyncio.sleep(self._delay_s(weight_ms + s.decode_ms_per_seq * n_live))
            t = now_s()

    def _fit_kv(self, live: list[_Slot]) -> list[_Slot]:
        """`kv_cache_tokens`: while the live sequences' KV (prompt + generated + this step's token, halved per
        token by an fp8 cache) exceeds the cache, the newest-admitted one is preempted back to the queue (it
        resumes later, recomputing its prompt and tokens so far), as vLLM does; the last one always runs."""
        cap = self.system.kv_cache_tokens
        if cap is None:
            return live
        per_tok = _KV_BYTES[self.system.kv_cache_dtype] / _KV_BYTES["fp16"]
        used = [(len(x.request.prompt_token_ids) + x.pos + 1) * per_tok for x in live]
        self._kv_peak = max(self._kv_peak, min(1.0, sum(used) / cap))
        self._running_peak = max(self._running_peak, len(live))
        while len(live) > 1 and sum(used) > cap:
            slot = live.pop()
            used.pop()
            slot.preempted = True
            self.preemptions += 1
            self._waiting[slot.waiting.request_id] = slot  # back to the queue, at its own arrival (first in line)
        return live
