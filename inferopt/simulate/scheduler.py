"""Discrete-event simulation of a serving scheduler on a workload table, emitting real `RequestRecord`s.

Two policies over one fitted `CostModel`: `StaticPolicy` mirrors the hf engine (the same `static_batch` and
`admit_on_arrival` decide; a left-padded batch runs until its longest member ends; with a fixed KV cache, the
fake engine's, the newest is preempted when a step does not fit) and `ContinuousPolicy` models vLLM's scheduler
(max_num_seqs, a per-step token budget, chunked prefill, fcfs or priority, a bounded queue counting waiting +
running, KV capacity in blocks with recompute preemption of the newest running request, prefix-cache hits in
whole blocks). Clients time out as the load runner's do. Each step is its prediction times a seeded draw from
the fit's kept spread (`Draws`), so tails carry the measured jitter. The event loop is a plain loop over
steps with a sorted arrival list, not SimPy or vidur: a single engine has only two event kinds (an arrival, a
step's end), and vidur (PyPI 0.0.26) wants per-operator GPU profiles of its own model registry plus
wandb/streamlit, not the per-step timings we measure. Records are marked simulated (`run_tag`), so
`inferopt.measure` metrics, slices and SLO checks apply unchanged.
Deliberately not here: fitting (`simulate.observe`), calibration against measurements (`simulate.calibrate`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from inferopt.config import BatchingKnobs
from inferopt.engines.scheduler import Waiting, admit_on_arrival, static_batch
from inferopt.records import RequestRecord
from inferopt.simulate.costs import CostModel, Overheads, Spread, attn_pairs, mean_one, padded_rows

SIM_TAG = "simulated"
SPREAD_KINDS = (  # `Spread`
    "prefill_ratio",
    "decode_ratio",
    "admit_s",
    "first_token_s",
    "batch_gap_s",
    "deliver_s",
    "first_deliver_ratio",
)


STRATA = 8  # each run of this many draws of one kind takes one value from each eighth of its sorted pool


def stratified_indices(size: int, strata: int, rng: np.random.Generator) -> np.ndarray:
    """One index into a sorted pool of `size` from each of `strata` equal slices of it, in random order: each
    index is still uniform over the pool, but a run of `strata` draws covers the whole spread (its tail in
    proportion, its mean close to the pool's), so a 40-request probe's p95 is not one lucky draw."""
    strata = max(1, min(strata, size))
    edges = np.floor(np.linspace(0, size, strata + 1)).astype(int)
    picks = edges[:-1] + np.floor(rng.random(strata) * (edges[1:] - edges[:-1])).astype(int)
    return rng.permutation(np.minimum(picks, size - 1))


class Draws:
    """Multipliers for simulated steps, resampled from a model's kept spread (`costs.Spread`): per kind, one
    of its values normalised to mean 1 (`mean_one`), by one seeded generator, stratified (`stratified_indices`).
    A kind with nothing kept is always 1 and draws nothing, so a model without a spread simulates as if it had
    none."""

    def __init__(self, spread: Spread, seed: int | Sequence[int] = 0) -> None:
        self._pools = {k: np.sort(mean_one(getattr(spread, k))) for k in SPREAD_KINDS}
        self._queued: dict[str, list[float]] = {k: [] for k in SPREAD_KINDS}
        self._rng = np.random.default_rng(seed)

    def __call__(self, kind: str) -> float:
        pool = self._pools[kind]
        if not pool.size:
            return 1.0
        queued = self._queued[kind]
        if not queued:
            queued.extend(float(v) for v in pool[stratified_indices(pool.size, STRATA, self._rng)])
        return queued.pop()


@dataclass(frozen=True)
class StaticPolicy:
    """The hf engine's static batching (its `BatchingKnobs`); `prefix_block_tokens`: its prefix cache's block
    size (None: no prefix cache). A group's prefix is cached once a batch holding it has finished.
    `kv_tokens`: a fixed KV cache in tokens (the fake engine's): a decode step whose live sequences do not fit
    sends the newest back to the queue, to be prefilled again with what it generated (None: no bound)."""

    knobs: BatchingKnobs
    prefix_block_tokens: int | None = None
    kv_tokens: float | None = None
    live_rows: bool = False  # a decode step computes only the rows still generating (the fake), not all (hf)


@dataclass(frozen=True)
class ContinuousPolicy:
    """vLLM-style continuous batching; `kv_blocks` None = unbounded KV, `max_queued` None = unbounded queue."""

    max_num_seqs: int = 16
    max_num_batched_tokens: int = 2048
    chunked_prefill: bool = True
    priority: bool = False
    max_queued: int | None = None
    kv_blocks: int | None = None
    block_size: int = 16
    prefix_caching: bool = False


@dataclass
class _Req:
    """One request's simulated life (seconds on the simulated clock)."""

    row: dict
    arrival_s: float
    admitted_s: float | None = None
    prefill_start_s: float | None = None
    prefill_end_s: float | None = None
    token_s: list[float] = field(default_factory=list)
    cached: int = 0
    batch_size: int | None = None
    outcome: str = "ok"
    done_s: float | None = None
    prefilled: int = 0  # prompt tokens computed so far (continuous)
    prompt_len: int = 0  # tokens to compute before it decodes: the prompt, after a preemption prompt + output
    streams_at_first: int = 0  # requests running when its first token came out (continuous)

    @property
    def deadline_s(self) -> float:
        return self.row["intended_s"] + self.row["timeout_s"]


def _rows(table: pd.DataFrame, timeout_s: float) -> list[dict]:
    rows = table.to_dict("records")
    for r in rows:
        r["intended_s"] = float(r["arrival_offset_s"])
        r["timeout_s"] = timeout_s
    return sorted(rows, key=lambda r: r["intended_s"])


def simulate(
    table: pd.DataFrame,
    policy: StaticPolicy | ContinuousPolicy,
    cost: CostModel,
    *,
    timeout_s: float = 30.0,
    arm: str = SIM_TAG,
    trial: int = 0,
    scenario: str = "",
    seed: int = 0,
) -> list[RequestRecord]:
    """Replay `table` (a workload: arrival offsets, lengths, tenants, priorities, prefixes) through `policy`
    with `cost`'s step times, each times a draw from its kept spread (`Draws`, seeded by (`seed`, `trial`):
    the same arguments give the same records); one record per row, as a real run's."""
    rows = _rows(table, timeout_s)
    reqs = [_Req(row=r, arrival_s=r["intended_s"] + cost.overheads.send_lag_s) for r in rows]
    draw = Draws(cost.spread, (seed & 0xFFFFFFFF, trial & 0xFFFFFFFF))
    if isinstance(policy, StaticPolicy):
        _run_static(reqs, policy, cost, draw)
    else:
        _run_continuous(reqs, policy, cost, draw)
    return [_record(q, cost, draw, (arm, trial, scenario)) for q in reqs]


def _run_static(reqs: list[_Req], policy: StaticPolicy, cost: CostModel, draw: Draws) -> None:
    """The hf worker loop: ask `static_batch` whenever the engine is free; arrivals beyond `max_queue` rejected."""
    knobs, cached_groups = policy.knobs, set()
    waiting: dict[str, _Req] = {}
    keys = {id(q): str(k) for k, q in enumerate(reqs)}  # a preempted request returns under its own key
    now_s, i, n = 0.0, 0, len(reqs)
    while i < n or waiting:
        while i < n and reqs[i].arrival_s <= now_s:
            q = reqs[i]
            if admit_on_arrival(knobs, len(waiting)):
                waiting[keys[id(q)]] = q
            else:
                q.outcome, q.done_s = "rejected", q.arrival_s
            i += 1
        for k in [k for k, q in waiting.items() if q.deadline_s <= now_s]:  # the client gave up while it waited
            waiting.pop(k).outcome = "timeout"
        items = [Waiting(k, q.arrival_s, int(q.row["priority"])) for k, q in waiting.items()]
        decision = static_batch(knobs, items, now_s)
        if decision.batch:
            batch = [waiting.pop(k) for k in decision.batch]
            hits = _hits(batch, policy.prefix_block_tokens, cached_groups)
            if policy.kv_tokens is None:
                now_s = _static_batch(batch, now_s, (cost, draw), hits, policy.live_rows)
            else:
                now_s, preempted = _static_batch_kv(batch, now_s, (cost, draw), hits, policy.kv_tokens)
                waiting.update((keys[id(q)], q) for q in preempted)  # back in line at its own arrival
            now_s += cost.overheads.batch_gap_s * draw("batch_gap_s")
            cached_groups.update(int(q.row["prefix_group"]) for q in batch if int(q.row["prefix_group"]) >= 0)
            continue
        nxt = reqs[i].arrival_s if i < n else math.inf
        now_s = min(nxt, now_s + decision.wait_s) if decision.wait_s is not None else nxt
        if math.isinf(now_s):
            break


def _hits(batch: Sequence[_Req], block_tokens: int | None, cached_groups: set[int]) -> list[int]:
    """Prompt tokens each row finds in the prefix cache: its group's shared prefix in whole blocks."""
    if not block_tokens:
        return [0] * len(batch)
    return [
        (int(q.row["prefix_len"]) // block_tokens) * block_tokens if int(q.row["prefix_group"]) in cached_groups else 0
        for q in batch
    ]


def _prefill_end_s(
    cost: CostModel, draw: Draws, now_s: float, new: Sequence[int], cached: Sequence[int]
) -> tuple[float, float]:
    """A static batch admitted at `now_s`: when its prefill starts and ends (each part times its draw)."""
    start_s = now_s + cost.overheads.admit_s * draw("admit_s")
    return start_s, start_s + cost.prefill_s(sum(new), attn_pairs(new, cached)) * draw("prefill_ratio")


def _static_batch(
    batch: Sequence[_Req], now_s: float, model: tuple[CostModel, Draws], hits: Sequence[int], live_rows: bool
) -> float:
    """One left-padded batch admitted at `now_s` (`hits`: cached prompt tokens per row); returns when its last
    step ends. Each decode step computes every row (`live_rows` False: hf) or those still generating."""
    cost, draw = model
    lens = [int(q.row["input_len"]) for q in batch]
    new, cached = padded_rows(lens, hits)
    start_s, end_s = _prefill_end_s(cost, draw, now_s, new, cached)
    steps = max(int(q.row["output_len"]) for q in batch)
    times = [end_s + cost.overheads.first_token_s * draw("first_token_s")]
    size = len(batch)
    for k in range(1, steps):
        rows = sum(1 for q in batch if int(q.row["output_len"]) > k) if live_rows else size
        times.append(times[-1] + cost.decode_s(rows, rows * (new[0] + max(cached) + k)) * draw("decode_ratio"))
    for q, hit in zip(batch, hits, strict=True):
        q.admitted_s, q.prefill_start_s, q.prefill_end_s, q.batch_size = now_s, start_s, end_s, size
        q.cached = hit
        q.token_s = times[: max(1, int(q.row["output_len"]))]
        q.done_s = q.token_s[-1]
    return times[-1]


def _static_batch_kv(
    batch: Sequence[_Req], now_s: float, model: tuple[CostModel, Draws], hits: Sequence[int], kv_tokens: float
) -> tuple[float, list[_Req]]:
    """`_static_batch` step by step under a fixed KV cache (the fake engine's `_fit_kv`): a resumed request
    recomputes its prompt and the tokens it had; before each step, while the live sequences' KV (context + this
    step's token) exceeds `kv_tokens`, the newest leaves for the queue (the last always runs). Returns when its
    last step ends and the requests it preempted."""
    cost, draw = model
    lens = [int(q.row["input_len"]) + len(q.token_s) for q in batch]
    first = [not q.token_s for q in batch]  # no token yet (a first admission, or preempted before its first)
    new, cached = padded_rows(lens, [h if f else 0 for h, f in zip(hits, first, strict=True)])
    start_s, t = _prefill_end_s(cost, draw, now_s, new, cached)
    for q, hit, f in zip(batch, hits, first, strict=True):
        if f:
            if q.admitted_s is None:
                q.admitted_s, q.batch_size = now_s, len(batch)
            q.prefill_start_s, q.prefill_end_s, q.cached = start_s, t, hit
    t += cost.overheads.first_token_s * draw("first_token_s")
    live, preempted = list(batch), []
    while live:
        used = [int(q.row["input_len"]) + len(q.token_s) + 1 for q in live]
        while len(live) > 1 and sum(used) > kv_tokens:
            preempted.append(live.pop())
            used.pop()
        for q in live:
            q.token_s.append(t)
        live = [q for q in live if len(q.token_s) < max(1, int(q.row["output_len"]))]
        if live:
            t += cost.decode_s(len(live), sum(used)) * draw("decode_ratio")
    for q in batch:
        if q not in preempted:
            q.done_s = q.token_s[-1]
    return t, preempted


def _blocks(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


@dataclass
class _Engine:
    """Continuous-batching state between steps."""

    policy: ContinuousPolicy
    waiting: list[_Req] = field(default_factory=list)
    running: list[_Req] = field(default_factory=list)
    held: dict[int, int] = field(default_factory=dict)  # id(request) -> KV blocks it holds
    cached_groups: set[int] = field(default_factory=set)

    @property
    def free_blocks(self) -> float:
        total = self.policy.kv_blocks
        return math.inf if total is None else total - sum(self.held.values())

    def context(self, q: _Req) -> int:
        return int(q.row["input_len"]) + len(q.token_s)

    def prompt(self, q: _Req) -> int:
        """Tokens to compute before the request decodes: its prompt, or after a preemption prompt + output."""
        return q.prompt_len or int(q.row["input_len"])

    def release(self, q: _Req) -> None:
        self.held.pop(id(q), None)
        if q in self.running:
            self.running.remove(q)

    def arrive(self, q: _Req) -> None:
        cap = self.policy.max_queued
        if cap is not None and len(self.waiting) + len(self.running) >= cap:
            q.outcome, q.done_s = "rejected", q.arrival_s
            return
        self.waiting.append(q)
        if self.policy.priority:
            self.waiting.sort(key=lambda w: (int(w.row["priority"]), w.arrival_s))

    def preempt_newest(self) -> None:
        """Recompute preemption: the newest running request goes back to the front of the queue."""
        q = self.running.pop()
        self.held.pop(id(q), None)
        q.prefilled = 0
        q.prompt_len = self.context(q)
        self.waiting.insert(0, q)


def _plan_step(e: _Engine) -> list[tuple[_Req, int]]:
    """The next step's work: (request, prompt tokens computed; 0 = one decode token), running first."""
    p, plan, budget = e.policy, [], e.policy.max_num_batched_tokens
    for q in list(e.running):
        if q not in e.running:
            continue
        remaining = e.prompt(q) - q.prefilled
        if remaining <= 0:
            while _blocks(e.context(q) + 1, p.block_size) > e.held[id(q)] and e.free_blocks < 1:
                e.preempt_newest()
            if q not in e.running:
                continue
            e.held[id(q)] = max(e.held[id(q)], _blocks(e.context(q) + 1, p.block_size))
            plan.append((q, 0))
            budget -= 1
        elif budget > 0:
            chunk = min(remaining, budget) if p.chunked_prefill else (remaining if remaining <= budget else 0)
            if chunk:
                plan.append((q, chunk))
                budget -= chunk
    while e.waiting and len(e.running) < p.max_num_seqs and budget > 0:
        q = e.waiting[0]
        group = int(q.row["prefix_group"])
        hit = p.prefix_caching and group >= 0 and group in e.cached_groups and not q.token_s
        cached = (int(q.row.get("prefix_len", 0)) // p.block_size) * p.block_size if hit else 0
        remaining = e.prompt(q) - cached
        chunk = min(remaining, budget) if p.chunked_prefill else (remaining if remaining <= budget else 0)
        need = _blocks(e.prompt(q) + 1, p.block_size)
        if not chunk or need > e.free_blocks:
            break
        e.waiting.pop(0)
        e.running.append(q)
        e.held[id(q)] = need
        q.cached, q.prefilled = (cached, cached) if not q.token_s else (q.cached, 0)
        plan.append((q, chunk))
        budget -= chunk
    return plan


def _step_s(e: _Engine, plan: Sequence[tuple[_Req, int]], cost: CostModel, draw: Draws) -> float:
    dec = [q for q, c in plan if c == 0]
    pre = [(q, c) for q, c in plan if c > 0]
    ctx = sum(e.context(q) for q in dec)
    tokens = sum(c for _, c in pre)
    pairs = sum(c * (q.prefilled + (c + 1) / 2.0) for q, c in pre)
    ratios = (draw("prefill_ratio") if pre else 1.0, draw("decode_ratio") if dec else 1.0)
    return cost.mixed_step_s(len(dec), ctx, tokens, pairs, ratios)


def _finish_step(e: _Engine, plan: Sequence[tuple[_Req, int]], now_s: float, start_s: float) -> None:
    """Tokens at the step's end: one per decoding request and per request whose prompt just completed."""
    batch = len(e.running)
    for q, chunk in plan:
        if q.admitted_s is None:
            q.admitted_s = q.prefill_start_s = start_s
            q.batch_size = batch
        if chunk:
            q.prefilled += chunk
            if q.prefilled < e.prompt(q):
                continue
            if q.prefill_end_s is None:
                q.prefill_end_s, q.streams_at_first = now_s, batch
            if int(q.row["prefix_group"]) >= 0:
                e.cached_groups.add(int(q.row["prefix_group"]))
        q.token_s.append(now_s)
        if len(q.token_s) >= max(1, int(q.row["output_len"])):
            q.done_s = now_s
            e.release(q)


def _run_continuous(reqs: list[_Req], policy: ContinuousPolicy, cost: CostModel, draw: Draws) -> None:
    """vLLM's step loop: arrivals, client timeouts (aborted), one scheduled step, its tokens."""
    e, now_s, i, n = _Engine(policy), 0.0, 0, len(reqs)
    while i < n or e.waiting or e.running:
        while i < n and reqs[i].arrival_s <= now_s:
            e.arrive(reqs[i])
            i += 1
        for q in [q for q in e.waiting + e.running if q.deadline_s <= now_s]:
            q.outcome = "timeout"
            e.release(q)
            if q in e.waiting:
                e.waiting.remove(q)
        plan = _plan_step(e)
        if not plan:
            if not e.running and e.waiting and i >= n and policy.kv_blocks is not None:
                for q in e.waiting:  # a prompt larger than the whole KV cache never runs
                    q.outcome = "error"
                break
            now_s = reqs[i].arrival_s if i < n else min(q.deadline_s for q in e.waiting) if e.waiting else now_s
            if i >= n and not e.waiting:
                break
            continue
        gap_s = cost.overheads.batch_gap_s * draw("batch_gap_s")
        start_s, now_s = now_s, now_s + _step_s(e, plan, cost, draw) + gap_s
        _finish_step(e, plan, now_s, start_s)


def _first_delivery_s(q: _Req, o: Overheads, draw: Draws) -> float:
    """The first token's delivery: like any other token's, or (`Overheads.first_deliver_s` set) its own fit at
    the streams in flight, times a draw from its own spread."""
    if o.first_deliver_s is None:
        return o.deliver_s * draw("deliver_s")
    return (o.first_deliver_s + o.first_per_stream_s * q.streams_at_first) * draw("first_deliver_ratio")


def _client_times(q: _Req, o: Overheads, draw: Draws) -> list[float]:
    """Each token's arrival at the client: its server time plus a delivery drawn from the spread (the first
    token's its own, `_first_delivery_s`), never before the token ahead of it (a stream arrives in order)."""
    out, last = [], -math.inf
    for i, t in enumerate(q.token_s):
        last = max(last, t + (_first_delivery_s(q, o, draw) if i == 0 else o.deliver_s * draw("deliver_s")))
        out.append(last)
    return out


def _record(q: _Req, cost: CostModel, draw: Draws, tags: tuple[str, int, str]) -> RequestRecord:
    """The request's record as the load runner would write it (client times = server + delivery)."""
    row, (arm, trial, scenario) = q.row, tags
    rec = RequestRecord(
        request_id=str(row["request_id"]),
        outcome="ok",
        input_len=int(row["input_len"]),
        target_output_len=int(row["output_len"]),
        tenant=str(row["tenant"]),
        priority=int(row["priority"]),
        prefix_group=int(row["prefix_group"]),
        intended_s=row["intended_s"],
        sent_s=q.arrival_s,
        arrival_s=q.arrival_s,
        run_tag=SIM_TAG,
        arm=arm,
        trial=trial,
        scenario=scenario,
    )
    if q.outcome == "error":
        rec.outcome = "error"
        rec.error = "error: the prompt needs more KV blocks than the cache has (simulated)"
        rec.client_done_s = q.arrival_s
        return rec
    if q.outcome == "rejected":
        rec.outcome, rec.error, rec.client_done_s = "rejected", "rejected: queue full (simulated)", q.arrival_s
        return rec
    client = _client_times(q, cost.overheads, draw)
    seen = [t for t in client if t <= q.deadline_s]
    timed_out = q.outcome == "timeout" or len(seen) < len(client) or not client
    rec.admitted_s, rec.context_ready_s, rec.prefill_start_s = q.admitted_s, q.prefill_start_s, q.prefill_start_s
    rec.prefill_end_s, rec.cached_tokens, rec.batch_size_at_admit = q.prefill_end_s, q.cached, q.batch_size
    rec.client_token_s = seen
    rec.client_chunk_s, rec.client_chunk_tokens = list(seen), [1] * len(seen)
    rec.output_len = len(seen)
    if timed_out:
        rec.outcome = "timeout"
        rec.error = f"not complete within {row['timeout_s']:g} s of its intended send time"
        rec.client_done_s = q.deadline_s
        rec.token_s = [t for t, c in zip(q.token_s, client, strict=True) if c <= q.deadline_s]
        return rec
    rec.token_s, rec.done_s = list(q.token_s), q.done_s
    rec.finish_reason, rec.client_done_s = "length", client[-1]
    return rec
