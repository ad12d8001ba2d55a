"""What a system can do, declared by the system itself: `system.capabilities` (every system config has it),
so a step asks "can it be profiled op by op?" or "where is its queue bound?" instead of testing its class.

`Capabilities` is plain data — the values the callers rely on (queue bound and its knob, max running
sequences, KV budget, prefix cache and its reset, launched processes, the quality-evaluation path, scripted
timings, op profiling, CPU threads, an in-process model, speculative decoding, knobs). Setting a queue bound
is `system.with_queue_bound(n)` (None: that system's bound cannot be set from here).

Deliberately not here: engine code (`inferopt.engines`), checks that need the machine (an interpreter on disk,
a CUDA device: `inferopt.engines.unavailable_reason`), or reading model files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

QualityPath = Literal["in-memory", "served", "endpoint"]
PrefixCacheReset = Literal["engine restart", "POST /reset_prefix_cache", "in-process reset"]

__all__ = ["Capabilities", "KVBudget", "PrefixCacheReset", "QualityPath", "Speculation"]


@dataclass(frozen=True)
class KVBudget:
    """A KV cache reserved when the server starts and paged in blocks (vLLM), not grown per batch."""

    configured_bytes: int | None  # the size it was given; None: a share of device memory (`memory_fraction`)
    memory_fraction: float  # device memory share the server may use when no size is given
    block_size_tokens: int  # tokens per KV block (the platform's default when the config leaves it unset)
    max_model_len: int | None  # the longest context the server accepts (None: the model's own)


@dataclass(frozen=True)
class Speculation:
    """Speculative decoding as configured: k draft tokens per round and where its statistics come from."""

    draft_tokens: int | None  # k; None: the config does not say (no K5 arithmetic then)
    method: str  # the draft: hf's draft_model, or vLLM's `method` ("ngram", "eagle", ...; "" when unset)
    stats_from: Literal["records", "server counters"]  # hf: rounds on each record; vLLM: spec_decode_* counters


@dataclass(frozen=True)
class Capabilities:
    """What one system declares about itself (see the module docstring); `None` = not known / not ours."""

    engine: str
    # admission control: the bound set now (None: unbounded, or unknown) and the field that sets it
    queue_bound: int | None
    queue_bound_knob: str | None  # dotted field; None: the bound cannot be set from here (an endpoint)
    max_running: int | None  # the most sequences decoded at once (None: unknown)
    kv_budget: KVBudget | None  # a reserved KV cache (None: the cache grows with the batch, or unknown)
    prefix_cache: bool | None  # keeps a cross-request prefix cache (None: cannot be told)
    prefix_cache_reset: PrefixCacheReset | None  # how that cache is emptied (None: no cache, or not ours)
    launches_processes: bool  # its serving processes are children to scan for resources
    replicable: bool  # can be launched as interchangeable server replicas behind a balancer (node failure)
    quality_eval: QualityPath | None  # how the quality suite evaluates it (None: it generates no text)
    scripted_timings: bool  # its timings are scripted (the fake engine): evidence for the pipeline only
    op_profile: bool  # can be profiled op by op in this process (torch.profiler)
    cpu_threads: int  # CPU threads it computes with (cost and roofline per core)
    in_process_model: bool  # holds its model in this process (next-token drift can teacher-force it)
    stops_at_eos: bool | None  # False: configured to ignore EOS; None: no such switch (engine or request decides)
    verbatim_args: tuple[str, ...]  # flags / KEY=VALUE env passed to the engine unread (the cheat lint scans them)
    speculative: Speculation | None
    model: Any  # the local `ModelSpec` it serves (hf, vllm), else None
    vocab_size: int | None  # a declared vocabulary (fake, openai); None: the model's config says
    pools: tuple[Any, ...]  # the systems behind a pooled one (empty for a single engine)
    knobs: tuple[str, ...]  # fields that change how it serves (what an arm may vary); identity and plumbing out
    # can hold a request to its target length when asked (`workload.output_lengths: forced`): hf's own loop,
    # vLLM's ignore_eos + min_tokens, an openai endpoint that declares it accepts them, the fake (always)
    forces_lengths: bool = False
    # a static batch computes a finished row until its longest ends (hf's padded batch, fed the pad token);
    # False: only the rows still generating (the fake engine). The simulator charges and fits steps by it.
    finished_rows_compute: bool = True
