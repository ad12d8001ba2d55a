"""The choose step (SPEC C1, C2, K1-K5): a catalogue of remedies — which located cause each one serves, which
config fields express it, whether it can change outputs (then the quality gate is mandatory, G1) — and
`choose`, which checks a candidate's changes against the located cause and warns loudly when they do not
match. The canonical wrong choice (C1): p99 from queueing, "fixed" with a faster attention kernel (K3: a kernel
changes neither queueing nor KV capacity).

A candidate's remedies are found from its changed dotted config fields (`remedies_for_changes`). Fields are the
hf engine's (`weight_quantization`, `kv_cache`, `speculative`, ...) and vLLM's flags (`quantization`,
`kv_cache_dtype`, `speculative_config`, ...); a few name knobs no engine has yet (`kv_cache.paged`, pools), so a
candidate that adds them is recognised.

What this module deliberately does not do: judge the size of an effect (ablation does), look at values (a dtype
change toward *higher* precision still counts as the precision remedy), or decide for the user — the warning is
loud but the run continues, and the ablation result has the last word.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from inferopt.locate.bottleneck import CAUSES


@dataclass(frozen=True)
class Remedy:
    """One lever: the causes it serves (`targets`), the config fields that set it, whether it can
    change outputs (quality gate needed, G1), whether it needs a numeric / starvation / fairness
    regression (V5: kernel and scheduler changes), its risk and its expected effect."""

    name: str
    targets: tuple[str, ...]
    config_fields: tuple[str, ...]
    changes_outputs: bool
    risk: str
    effect: str
    numeric_check: bool = False
    spec: str = ""


CATALOGUE: tuple[Remedy, ...] = (
    Remedy(
        name="attention_kernel",
        targets=("compute", "bandwidth", "host_overhead"),
        config_fields=("attn_implementation",),
        changes_outputs=False,
        numeric_check=True,
        spec="C1, C2, K3",
        risk="exact in math (online softmax) but not bitwise: needs numeric, quality and stability "
        "regression; no gain where attention IO is not the bottleneck (short sequences)",
        effect="FlashAttention-class / fused attention: less attention IO on long sequences (prefill), "
        "fewer dispatched ops; gains grow with sequence length. Changes neither KV capacity nor queueing.",
    ),
    Remedy(
        name="low_precision_weights",
        targets=("bandwidth", "compute"),
        config_fields=("dtype", "quantization", "weight_quantization", "bnb_double_quant", "weight_dtype"),
        changes_outputs=True,
        spec="C1, C2, K4",
        risk="outlier channels, dequantization overhead, calibration; 'faster' only with good kernels "
        "and a bandwidth-bound phase (not at small batch on slow kernels)",
        effect="fewer weight bytes moved per step (FP16 -> INT4 is 1/4); frees memory for KV; low-precision "
        "tensor-core math raises the compute roof",
    ),
    Remedy(
        name="continuous_batching",
        targets=("queueing", "bandwidth", "host_overhead"),
        config_fields=("batching.policy",),
        changes_outputs=False,
        numeric_check=True,
        spec="B1, C1",
        risk="per-step scheduling overhead; long/short fairness and starvation; p99 can rise under "
        "aggressive batching (worked case E)",
        effect="fills empty slots every step (removes finished sequences, inserts waiting ones): higher "
        "utilisation and throughput, shorter queues at the same load",
    ),
    Remedy(
        name="batch_size",
        targets=("queueing", "bandwidth", "host_overhead"),
        config_fields=(
            "batching.max_batch_size",
            "batching.max_batch_tokens",
            "max_num_seqs",
            "max_num_batched_tokens",
        ),
        changes_outputs=False,
        numeric_check=True,
        spec="C2",
        risk="more KV memory per step and longer waits to fill a batch (TTFT); batch-dependent numerics",
        effect="more weight reuse per decode step (higher arithmetic intensity), per-step overhead "
        "amortised over more sequences: a higher service rate, so shorter queues at the same load",
    ),
    Remedy(
        name="batch_wait_window",
        targets=("queueing", "bandwidth", "host_overhead"),
        config_fields=("batching.batch_wait_ms",),
        changes_outputs=False,
        spec="B4",
        risk="a longer window is added directly to TTFT; a shorter one gives smaller batches",
        effect="trades batch fill (throughput) against time waiting to be admitted (TTFT)",
    ),
    Remedy(
        name="admission_control",
        targets=("queueing",),
        config_fields=("batching.max_queue", "max_num_queued_reqs", "admission"),
        changes_outputs=False,
        spec="B5",
        risk="rejected requests are failures and count against the success rate and cost per task",
        effect="bounds the queue under overload (accept/reject on arrival, backpressure): the tail stops "
        "growing with load instead of amplifying latency",
    ),
    Remedy(
        name="chunked_prefill_and_pools",
        targets=("queueing",),
        config_fields=(
            "batching.chunked_prefill",
            "batching.prefill_chunk_tokens",
            "batching.pools",
            "batching.priority",
            "scheduling_policy",
            "enable_chunked_prefill",
        ),
        changes_outputs=False,
        numeric_check=True,
        spec="B2, B3, E",
        risk="preemption and priority can starve low-priority tenants; check fairness (V5)",
        effect="long prompts no longer block short requests' first token; interactive and offline queues "
        "separated (worked case E: pooled + chunked prefill met every interactive SLO)",
    ),
    Remedy(
        name="kv_paging",
        targets=("kv_capacity",),
        config_fields=("kv_cache.paged", "kv_cache.block_size", "kv_cache.num_blocks", "kv_cache.policy"),
        changes_outputs=False,
        spec="K1",
        risk="block-table overhead; eviction/preemption policy can add recompute latency",
        effect="fixed-size blocks: less fragmentation, shared prefixes, flexible eviction — manages KV, "
        "does not shrink it",
    ),
    Remedy(
        name="kv_budget",
        targets=("kv_capacity",),
        config_fields=("kv_cache_memory_bytes", "gpu_memory_utilization", "max_num_seqs", "kv_cache_tokens"),
        changes_outputs=False,
        spec="K1",
        risk="a bigger KV budget takes memory from elsewhere (activations, other processes); fewer running "
        "sequences lower throughput and lengthen the queue",
        effect="more KV blocks, or fewer sequences sharing them: fewer preemptions and recomputed prefills",
    ),
    Remedy(
        name="kv_quantization",
        targets=("kv_capacity", "bandwidth"),
        config_fields=("kv_cache_dtype", "kv_cache", "kv_residual_length"),  # hf: kv_cache names the cache kind
        changes_outputs=True,
        spec="K2, K4",
        risk="far-token retrieval precision, error accumulation over long outputs: an algorithm change",
        effect="fewer KV bytes per token: more concurrent requests fit, less KV read per decode step at long context",
    ),
    Remedy(
        name="kv_window_or_trimming",
        targets=("kv_capacity",),
        config_fields=("kv_cache.window", "sliding_window", "context_trimming", "kv_cache.compression"),
        changes_outputs=True,
        spec="K2",
        risk="the model no longer sees the whole history: long-context quality must pass the gate",
        effect="caps KV tokens per request (sliding window, compressed history)",
    ),
    Remedy(
        name="prefix_caching",
        targets=("compute", "queueing"),
        config_fields=("kv_cache.prefix_caching", "enable_prefix_caching"),
        changes_outputs=False,
        spec="K1",
        risk="pre-warmed caches hide cold start (V4): measure with the production hit rate",
        effect="shared prefixes skip their prefill: less prefill compute, shorter TTFT for cache hits",
    ),
    Remedy(
        name="speculative_decoding",
        targets=("bandwidth",),
        config_fields=("speculative", "speculative_config"),
        changes_outputs=False,
        numeric_check=True,
        spec="C2, K5",
        risk="low acceptance (domain mismatch, high temperature, capability gap) makes it slower than plain "
        "decoding; draft and verify cost; bursty streaming; nothing for prefill; lossless only with "
        "exact accept/reject",
        effect="fewer serial decode steps: 1 + a + ... + a^k tokens per round (a=0.8, k=4 -> 3.36); better "
        "TPOT and throughput in bandwidth-bound decode",
    ),
    Remedy(
        name="host_threads",
        targets=("host_overhead", "compute"),
        config_fields=("torch_threads",),
        changes_outputs=False,
        spec="FINDINGS",
        risk="more threads can be slower on a loaded host (contention, OpenMP busy-waiting)",
        effect="changes CPU parallelism of each op and the host's dispatch rate",
    ),
)

_BY_NAME = {r.name: r for r in CATALOGUE}
_MISMATCH_NOTES = {
    ("queueing", "attention_kernel"): "p99 from queueing is not fixed by a faster kernel (C1, K3): the wait "
    "is in the queue, not in attention. Bound the queue (admission control), "
    "schedule better (continuous batching, chunked prefill, pools) or add capacity.",
    ("kv_capacity", "attention_kernel"): "a faster attention kernel does not change KV capacity (K3).",
    (
        "kv_capacity",
        "speculative_decoding",
    ): "speculative decoding adds a draft model's KV: it does not relieve KV capacity.",
    ("compute", "speculative_decoding"): "speculative decoding does nothing for prefill (K5).",
}


@dataclass(frozen=True)
class Choice:
    """Does the candidate's change treat the located cause?"""

    cause: str
    recommended: tuple[Remedy, ...]
    candidate: tuple[Remedy, ...]
    unmatched_fields: tuple[str, ...]
    matches: bool
    warning: str | None
    quality_gate_required: bool
    numeric_check_required: bool = False
    changed_fields: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "cause": self.cause,
            "recommended": [r.name for r in self.recommended],
            "candidate": [r.name for r in self.candidate],
            "unmatched_fields": list(self.unmatched_fields),
            "changed_fields": list(self.changed_fields),
            "matches": self.matches,
            "warning": self.warning,
            "quality_gate_required": self.quality_gate_required,
            "numeric_check_required": self.numeric_check_required,
        }


def remedies_for(cause: str) -> tuple[Remedy, ...]:
    """Catalogue entries that serve `cause`, in catalogue order."""
    return tuple(r for r in CATALOGUE if cause in r.targets)


def remedies_for_changes(changes: Mapping[str, Any]) -> tuple[tuple[Remedy, ...], tuple[str, ...]]:
    """(remedies the changed dotted fields correspond to, fields no catalogue entry covers).

    A catalogue field matches a change when it is the same path or a parent of it (`kv_cache` matches
    `kv_cache.dtype`); `kv_cache` (the hf cache kind: quantized, static) counts as the KV-quantization lever
    whatever its value. Fields no entry covers are reported as unmatched and, to be safe, require the quality
    gate (`choose`)."""
    found: list[Remedy] = []
    unmatched: list[str] = []
    for dotted in changes:
        hits = [r for r in CATALOGUE if any(_covers(f, dotted) for f in r.config_fields)]
        if not hits:
            unmatched.append(dotted)
        for r in hits:
            if r not in found:
                found.append(r)
    return tuple(found), tuple(unmatched)


def choose(cause: str, changes: dict[str, Any]) -> Choice:
    """Match a candidate's `changes` (dotted baseline field -> new value) against the located `cause`.

    `matches` is True when at least one of the candidate's remedies targets the cause. Otherwise
    `warning` says, loudly, what the data show, what the candidate changes and what would serve the
    cause instead. `quality_gate_required` is True when any changed remedy can change outputs or a
    changed field is not in the catalogue.
    """
    if cause not in CAUSES:
        raise ValueError(f"unknown cause {cause!r}; one of {', '.join(CAUSES)}")
    recommended = remedies_for(cause)
    candidate, unmatched = remedies_for_changes(changes)
    matches = any(cause in r.targets for r in candidate)
    warning = None
    if not matches:
        warning = _warning(cause, candidate, unmatched, recommended)
    return Choice(
        cause=cause,
        recommended=recommended,
        candidate=candidate,
        unmatched_fields=unmatched,
        matches=matches,
        warning=warning,
        quality_gate_required=any(r.changes_outputs for r in candidate) or bool(unmatched),
        numeric_check_required=any(r.numeric_check for r in candidate) or bool(unmatched),
        changed_fields=tuple(changes),
    )


def _warning(
    cause: str, candidate: tuple[Remedy, ...], unmatched: tuple[str, ...], recommended: tuple[Remedy, ...]
) -> str:
    what = (
        ", ".join(
            [f"{r.name} ({'/'.join(r.targets)})" for r in candidate]
            + [f"{f} (not in the remedy catalogue)" for f in unmatched]
        )
        or "nothing"
    )
    if cause == "none":
        head = "WARNING: NO BOTTLENECK LOCATED: the data show no dominant cause, so this change treats nothing measured"
    else:
        head = f"WARNING: REMEDY DOES NOT MATCH THE CAUSE: the data show {cause.upper()}"
    notes = [_MISMATCH_NOTES[(cause, r.name)] for r in candidate if (cause, r.name) in _MISMATCH_NOTES]
    rec = ", ".join(r.name for r in recommended) or "none"
    return (
        f"{head}; the candidate changes {what}. "
        + (" ".join(notes) + " " if notes else "")
        + f"Remedies that serve {cause}: {rec}."
    )


def _covers(catalogue_field: str, changed: str) -> bool:
    return changed == catalogue_field or changed.startswith(catalogue_field + ".")
