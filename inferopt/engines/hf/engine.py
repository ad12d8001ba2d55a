"""HFEngine: our in-process serving engine — a queue, static batching, and the greedy loop of `loop.py`.
One worker thread owns the model. `stream()` (on the asyncio loop) applies admission control
(`admit_on_arrival`) and puts the request in a thread-safe waiting list; the worker asks `static_batch`
when to start a batch, runs it to completion (B1: until its longest member ends) and hands each step's
events back with one wake-up of the event loop (`_Mailbox`) onto one asyncio.Queue per request, with raw
`now_s()` timestamps in a `ServerTimings` per request; metrics are derived elsewhere.

Prefix caching (`enable_prefix_caching`, `prefix_cache.py`): each admitted row looks up its longest cached
block chain; the chains are laid out left-padded in one cache and the batch prefills only the uncached
suffixes in one forward (the pads between a row's cached part and its suffix are masked, positions continue
after the cached tokens), then decodes as usual. After the batch every row's fed tokens (prompt, decode
inputs) are stored as whole blocks. The cache is emptied after the warm-ups (`server_metrics`, as on vLLM).

Deliberately not here: the forward-loop math (`loop.py`), sampling, continuous batching, client timing, HTTP.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any, Literal

from inferopt.config import HFSystem
from inferopt.engines.base import EngineBase, FinishEvent, GenRequest, RequestRejected, TokenEvent
from inferopt.engines.hf.cuda_events import PhaseEventTimer
from inferopt.engines.hf.loop import GreedyBatch, batched_past, greedy_generate, left_pad, pad_token_id_of
from inferopt.engines.hf.prefix_cache import PrefixKVCache
from inferopt.engines.hf.speculative import SpecCounters, prepare_draft, serve_speculative
from inferopt.engines.scheduler import Waiting, admit_on_arrival, static_batch
from inferopt.model.loading import LoadedModel, load_system_model
from inferopt.model.memory import KVMeter, weight_bytes
from inferopt.records import ServerTimings, now_s

__all__ = ["HFEngine", "greedy_generate"]

WARMUP_NOTE = "warm-up in start(): one prefill of 4 tokens + 1 decode step at batch 1, not recorded"
WARMUP_PREFIX = "warmup-"  # the load runner's warm-up request ids


class _Slot:
    """One request's state, shared by its consumer (asyncio) and the worker thread."""

    __slots__ = ("cancelled", "done", "emitted", "queue", "request", "timings", "waiting")

    def __init__(self, request: GenRequest, key: str, arrival_s: float) -> None:
        self.request = request
        self.timings = ServerTimings(arrival_s=arrival_s)
        self.queue: asyncio.Queue = asyncio.Queue()
        self.waiting = Waiting(request_id=key, arrival_s=arrival_s, priority=request.priority)
        self.emitted = 0
        self.done = False  # worker: no more events for this request
        self.cancelled = False  # consumer went away


class _Error:
    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        self.message = message


class _Mailbox:
    """Worker thread -> event loop hand-off: (queue, event) pairs go into a deque; at most one wake-up is
    pending at a time (a step's events, or several steps' if the loop lags, are delivered by one callback).

    Wake-up: `eventfd` + `loop.add_reader` where available, else `loop.call_soon_threadsafe`. Why: asyncio's
    self-pipe is a socket, whose wake-up is a *sync* wake (the kernel pulls the woken event-loop thread
    towards the waker's CPU) and starts a GIL ping-pong with the worker. Paired per-step medians at batch 1
    on the 2-vCPU CI box: +5.6 % per token over the bare loop with call_soon_threadsafe, +1.7 % with an
    eventfd (one run, 30 requests each; that box drifts ±20 %, so treat these as rough).
    `benchmarks/instrumentation_overhead.py --handoff ...` compares them.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, handoff: str) -> None:
        self.loop = loop
        self.items: deque = deque()
        self.signaled = False
        self.efd: int | None = None
        if handoff in ("auto", "eventfd") and hasattr(os, "eventfd"):
            efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
            try:
                loop.add_reader(efd, self._on_readable)
                self.efd = efd
            except (NotImplementedError, RuntimeError, ValueError):
                os.close(efd)
        if handoff == "eventfd" and self.efd is None:
            raise RuntimeError("handoff=eventfd is not available here (needs Linux and a selector event loop)")
        self.kind = "eventfd" if self.efd is not None else "call_soon_threadsafe"

    def post(self, items: list) -> None:
        """Worker thread. Lock-free: `signaled` is cleared on the loop before it drains."""
        self.items.extend(items)
        if not self.signaled:
            self.signaled = True
            try:
                if self.efd is not None:
                    os.eventfd_write(self.efd, 1)
                else:
                    self.loop.call_soon_threadsafe(self._drain)
            except (RuntimeError, OSError):  # loop closed / mailbox closed: nobody is listening any more
                pass

    def _on_readable(self) -> None:
        try:
            os.eventfd_read(self.efd)
        except BlockingIOError:
            pass
        self._drain()

    def _drain(self) -> None:
        self.signaled = False
        items = self.items
        while items:
            queue, event = items.popleft()
            queue.put_nowait(event)

    def close(self) -> None:
        if self.efd is not None:
            self.loop.remove_reader(self.efd)
            os.close(self.efd)
            self.efd = None
        self._drain()


class HFEngine(EngineBase):
    """The Engine protocol over a transformers causal LM (see module docstring)."""

    def __init__(
        self,
        system: HFSystem,
        preloaded: LoadedModel | None = None,
        handoff: Literal["auto", "eventfd", "call_soon_threadsafe"] = "auto",
    ) -> None:
        """`preloaded`: an already loaded model to serve (it must match `system`'s model, dtype, attention
        and device); by default `start()` loads it. Benchmarks pass one to share weights with a bare loop.
        `handoff`: how the worker wakes the event loop (see `_Mailbox`); auto = eventfd where available."""
        self.system = system
        self._preloaded = preloaded
        self._handoff = handoff
        self._mailbox: _Mailbox | None = None
        self.knobs = system.batching
        self._cond = threading.Condition()
        self._batch_lock = threading.Lock()  # held by the worker while a batch runs and its KV bytes are noted
        self._waiting: dict[str, _Slot] = {}
        self._keys = itertools.count()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.model: Any = None
        self.tokenizer: Any = None
        self._info: dict[str, Any] = {}
        self._eos: int | None = None
        self._pad = 0
        self._device = "cpu"
        self._cuda = False
        self.events = PhaseEventTimer(False, "not available: the engine has not started")  # CUDA-event phase times
        self.batches_run = 0
        self.tokens_generated = 0
        self.prefill_tokens = 0  # prompt tokens fed to prefill forwards (padding and cached tokens not counted)
        self.draft: Any = None  # speculative decoding (hf_speculative): the draft, and its counters
        self.spec_counters: SpecCounters | None = None
        self.kv = KVMeter()  # KV-cache bytes measured from the cache tensors after every batch
        self.prefix: PrefixKVCache | None = None  # enable_prefix_caching: block KV kept across batches
        self._warmup_since_reset = False
        self._decode_delay_s = system.diagnostic_decode_delay_ms / 1000.0  # diagnostic only (see HFSystem)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        await asyncio.to_thread(self._load)
        self._mailbox = _Mailbox(self._loop, self._handoff)
        self._info["event_handoff"] = self._mailbox.kind
        self._stopping = False
        self._thread = threading.Thread(target=self._worker, name="hf-engine-worker", daemon=True)
        self._thread.start()

    def _load(self) -> None:
        import torch
        import transformers

        s = self.system
        torch.set_num_threads(s.torch_threads)
        if s.device != "cpu" and torch.cuda.is_available():
            torch.cuda.reset_peak_memory_stats()  # this trial's peak: weights as loaded + everything after
        loaded = self._preloaded or load_system_model(s)
        self.model, self.tokenizer, self._device = loaded.model, loaded.tokenizer, loaded.device
        self._cuda = loaded.device.startswith("cuda")
        self.events = PhaseEventTimer.for_device(loaded.device)
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        self._eos = int(eos[0] if isinstance(eos, (list, tuple)) else eos) if eos is not None else None
        self._pad = pad_token_id_of(self.model)
        # before the warm-up: bitsandbytes 4-bit on an AVX512-BF16 CPU repacks its weights for its CPU kernel at the
        # first forward and `state_dict` (what weight_bytes reads) unpacks them again, so measured after the warm-up
        # the first served request paid the repacking (~100 ms TTFT on the tiny model)
        loaded_weight_bytes = weight_bytes(self.model)
        ids, mask = left_pad([[1, 3, 4, 5]], self._pad, self._device)
        try:
            greedy_generate(self.model, ids, mask, 2)  # warm-up (declared in info())
        except Exception as exc:
            raise RuntimeError(
                f"warm-up forward failed with attn_implementation={s.attn_implementation}, "
                f"dtype={s.dtype}, device={loaded.device}: {type(exc).__name__}: "
                f"{str(exc)[:300]}"
            ) from exc
        if self._cuda:
            torch.cuda.synchronize()
        params = list(self.model.parameters())
        self._info = {
            "engine": "hf",
            "name": s.name,
            "model_path": str(loaded.path),
            "model_spec": s.model.path,
            "dtype": loaded.dtype,
            "attn_implementation": getattr(self.model.config, "_attn_implementation", s.attn_implementation),
            "torch_threads": torch.get_num_threads(),
            "device": loaded.device,
            "device_requested": s.device,
            "batching": s.batching.model_dump(),
            "stop_at_eos": s.stop_at_eos,
            "param_count": sum(p.numel() for p in params),
            "weight_bytes": loaded_weight_bytes,  # quantized tensors counted as stored (model.memory), as loaded
            "torch_version": torch.__version__,
            "transformers_version": transformers.__version__,
            "warmup": WARMUP_NOTE,
            "eos_token_id": self._eos,
            "pad_token_id": self._pad,
        }
        if self._cuda:
            self._info["device_name"] = torch.cuda.get_device_name()
        if s.speculative is not None:  # draft-then-verify at batch 1 (the config forces batch size 1)
            self.draft, self._info["speculative"] = prepare_draft(self.model, s, loaded.device)
            self.spec_counters = SpecCounters()
        self._info["prefix_cache"] = s.enable_prefix_caching
        if s.enable_prefix_caching:
            self.prefix = _prefix_cache_for(self.model, s)
            self._info["prefix_cache_block_tokens"] = s.prefix_cache_block_tokens
            self._info["prefix_cache_max_bytes"] = s.prefix_cache_max_bytes
            self._info["prefix_cache_reset"] = True  # empty: nothing served since start

    async def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
            self._thread = None
        if self._mailbox is not None:
            self._mailbox.close()  # delivers whatever the worker posted last
            self._mailbox = None
        with self._cond:
            leftover = list(self._waiting.values())
            self._waiting.clear()
        for slot in leftover:
            self._finish(slot, "error", now_s())
            slot.queue.put_nowait(_Error("engine stopped before the request was admitted"))

    def info(self) -> dict[str, Any]:
        if not self._info:
            return {"engine": "hf", "name": self.system.name, "started": False}
        got = self._batch_lock.acquire(timeout=10.0)  # the last batch's KV note lands just after its last token
        try:
            memory = self.kv.summary(self._info.get("weight_bytes", 0), self._cuda)  # weights, peak KV, peak memory
        finally:
            if got:
                self._batch_lock.release()
        extra = {}
        if self.prefix is not None:
            extra["prefix_cache_stats"] = {**vars(self.prefix.stats), "blocks": len(self.prefix)}
            if not self._cuda and "peak_memory_bytes" in memory:  # CUDA's max allocated already holds the blocks
                memory["peak_memory_bytes"] += self.prefix.stats.peak_bytes
                memory["peak_memory_source"] += " + peak prefix-cache block bytes (their sum bounds the joint peak)"
        return {**self._info, **memory, **extra, "cuda_events": self.events.summary()}

    async def server_metrics(self) -> dict[str, float]:
        """Counters for the run's before/after deltas. With the prefix cache: vLLM's names for its counters
        (prompt tokens queried / served from cache), and, when warm-ups ran since the last reset, the cache is
        emptied first — the runner calls this right after its warm-ups, before the measured clock starts (SPEC V4);
        `prefix_cache_reset_after_warmup: false` leaves it warm (and `info()` says so)."""
        out = {
            "queue_depth": float(len(self._waiting)),
            "batches_run": float(self.batches_run),
            "tokens_generated": float(self.tokens_generated),
            "prefill_tokens_total": float(self.prefill_tokens),
            **(self.spec_counters.as_metrics() if self.spec_counters is not None else {}),
        }
        if self.prefix is not None:
            if self._warmup_since_reset and self.system.prefix_cache_reset_after_warmup:
                await self.reset_prefix_cache()
            out["prefix_cache_queries_total"] = float(self.prefix.stats.queries_tokens)
            out["prefix_cache_hits_total"] = float(self.prefix.stats.hit_tokens)
        return out

    async def reset_prefix_cache(self) -> bool:
        """Empty the prefix cache now (between trials on one engine, after warm-ups); waits for a running batch
        to store its blocks first. False when there is no prefix cache."""
        if self.prefix is None:
            return False
        await asyncio.to_thread(self._reset_locked)
        return True

    def _reset_locked(self) -> None:
        with self._batch_lock:
            self.prefix.reset()
            self._warmup_since_reset = False
            self._info["prefix_cache_reset"] = True

    # ------------------------------------------------------------------ consumer side (event loop)

    async def stream(self, request: GenRequest) -> AsyncIterator[TokenEvent | FinishEvent]:
        arrival_s = now_s()
        if self._thread is None:
            raise RuntimeError("HFEngine.stream() before start(); fix: await engine.start() first")
        slot = _Slot(request, str(next(self._keys)), arrival_s)
        if self.prefix is not None and request.request_id.startswith(WARMUP_PREFIX):
            self._warmup_since_reset = True
            self._info["prefix_cache_reset"] = False
        with self._cond:
            if not admit_on_arrival(self.knobs, len(self._waiting)):
                raise RequestRejected(f"queue full ({len(self._waiting)} waiting, max_queue={self.knobs.max_queue})")
            self._waiting[slot.waiting.request_id] = slot
            self._cond.notify()
        finished = False
        try:
            queue = slot.queue
            while True:
                event = await queue.get()
                if event.__class__ is TokenEvent:
                    yield event
                elif event.__class__ is FinishEvent:
                    finished = True
                    yield event
                    return
                else:
                    finished = True
                    raise RuntimeError(event.message)
        finally:
            if not finished:
                slot.cancelled = True
                with self._cond:
                    if self._waiting.pop(slot.waiting.request_id, None) is not None:
                        self._finish(slot, "cancelled", now_s())

    # ------------------------------------------------------------------ worker thread

    def _worker(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopping:
                        return
                    decision = static_batch(self.knobs, [s.waiting for s in self._waiting.values()], now_s())
                    if decision.batch:
                        slots = [self._waiting.pop(k) for k in decision.batch]
                        break
                    self._cond.wait(timeout=decision.wait_s)
            admitted_s = now_s()
            self.batches_run += 1
            for slot in slots:
                slot.timings.admitted_s = admitted_s
                slot.timings.batch_size_at_admit = len(slots)
            try:
                with self._batch_lock:
                    self._run_batch(slots)
            except Exception as exc:  # noqa: BLE001 - every unfinished member gets the error; the worker carries on
                message = f"{type(exc).__name__}: {exc}"
                t = now_s()
                items = []
                for slot in slots:
                    if not slot.done:
                        self._finish(slot, "error", t)
                        items.append((slot.queue, _Error(message)))
                self._post(items)

    def _finish(self, slot: _Slot, reason: str, t: float) -> None:
        slot.done = True
        slot.timings.done_s = t
        slot.timings.finish_reason = reason

    def _post(self, items: list) -> None:
        if items:
            self._mailbox.post(items)

    def _run_batch(self, slots: list[_Slot]) -> None:
        if self.draft is not None:
            return serve_speculative(self, slots[0])
        batch, tokens, max_new = self._prefill(slots)
        outs: list[list[int]] | None = None if self.prefix is None else [[] for _ in slots]
        eos = self._eos if self.system.stop_at_eos else None
        live = len(slots)
        for step in range(max(max_new, 1)):
            if step:
                if self._stopping:
                    raise RuntimeError("engine stopped mid-batch")
                with self.events.phase("decode"):
                    tokens = batch.step()
                    if self._decode_delay_s:  # the planted diagnostic delay: real time in the decode step
                        time.sleep(self._decode_delay_s)
            t = now_s()
            items = []
            emitted = 0
            for i, slot in enumerate(slots):
                if slot.done:
                    continue
                if slot.cancelled:
                    self._finish(slot, "cancelled", t)
                    batch.finish_row(i)
                    live -= 1
                    continue
                if slot.request.max_new_tokens <= 0:
                    self._finish(slot, "length", t)
                    items.append((slot.queue, FinishEvent(slot.timings)))
                    batch.finish_row(i)
                    live -= 1
                    continue
                tok = tokens[i]
                if outs is not None:
                    outs[i].append(tok)
                slot.timings.token_s.append(t)
                slot.emitted += 1
                emitted += 1
                items.append((slot.queue, TokenEvent((tok,), t)))
                stop = None if slot.request.force_length else eos  # forced: past EOS, to the target length
                reason = "eos" if tok == stop else ("length" if slot.emitted >= slot.request.max_new_tokens else None)
                if reason is not None:
                    self._finish(slot, reason, t)
                    items.append((slot.queue, FinishEvent(slot.timings)))
                    batch.finish_row(i)
                    live -= 1
            self.tokens_generated += emitted
            self._post(items)
            if not live:
                break
        self.events.flush()
        self.kv.note(batch.cache, batch.batch_size * batch.context_len)  # after the last token went out
        if outs is not None:  # after the last token went out: the next batch waits for it, no request does
            self._store_prefixes(batch, [s.request.prompt_token_ids for s in slots], outs)

    def _prefill(self, slots: list[_Slot]) -> tuple[GreedyBatch, list[int], int]:
        """Build the batch and run its prefill; with the prefix cache, the lookup and the cached blocks' layout
        are timed as prefill (they are the cache's cost), and only the uncached suffixes are fed."""
        import torch

        prompts = [s.request.prompt_token_ids for s in slots]
        max_new = max(s.request.max_new_tokens for s in slots)
        past = None
        if self.prefix is not None:
            t = now_s()
            for slot in slots:
                slot.timings.context_ready_s = t
                slot.timings.prefill_start_s = t
            chains = [self.prefix.lookup(p) for p in prompts]
            past = batched_past(self.model, chains, self._device)
            cached = [len(c) * self.prefix.block_tokens for c in chains]
            for slot, n in zip(slots, cached, strict=True):
                slot.timings.cached_tokens = n
            prompts = [p[n:] for p, n in zip(prompts, cached, strict=True)]
        self.prefill_tokens += sum(len(p) for p in prompts)
        ids, mask = left_pad(prompts, self._pad, self._device)
        batch = GreedyBatch(
            self.model,
            ids,
            mask,
            max_new,
            pad_token_id=self._pad,
            kv_cache=self.system.kv_cache,
            kv_residual_length=self.system.kv_residual_length,
            past=past,
        )
        if self.prefix is None:
            t = now_s()
            for slot in slots:
                slot.timings.context_ready_s = t
                slot.timings.prefill_start_s = t
        with self.events.phase("prefill"):
            tokens = batch.prefill()
        if self._cuda:
            torch.cuda.synchronize()
        t = now_s()
        for slot in slots:
            slot.timings.prefill_end_s = t
        return batch, tokens, max_new

    def _store_prefixes(self, batch: GreedyBatch, prompts: list[list[int]], outs: list[list[int]]) -> None:
        """Every row's fed tokens (its prompt, then its decode inputs: all emitted tokens but the last) as blocks."""
        import torch

        with torch.no_grad():
            for row, (prompt, out) in enumerate(zip(prompts, outs, strict=True)):
                fed_decode = max(len(out) - 1, 0)
                columns = batch.fed_columns(row, fed_decode)
                self.prefix.store(
                    list(prompt) + out[:fed_decode], lambda a, b, r=row, c=columns: batch.row_kv(r, c[a:b])
                )


def _prefix_cache_for(model: Any, system: HFSystem) -> PrefixKVCache:
    """A prefix cache for `model`, refused when its own config makes sliding-window (or other non-plain) layers."""
    from transformers import DynamicCache

    odd = [type(layer).__name__ for layer in DynamicCache(config=model.config).layers if layer.is_sliding]
    if odd:
        raise RuntimeError(
            f"enable_prefix_caching: the model's config makes sliding-window cache layers ({odd[0]}), whose old keys "
            "are dropped, so cached blocks would not match; fix: enable_prefix_caching: false for this model"
        )
    return PrefixKVCache(system.prefix_cache_block_tokens, system.prefix_cache_max_bytes)
