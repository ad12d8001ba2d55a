"""Per-phase op breakdown on the hf engine: where one prefill and N decode steps spend their time — attention,
matmul, other ops, or host (Python/framework between ops) — under torch.profiler.

An opt-in pass, separate from the measured run (a profiler perturbs the timings it watches, so it never runs
inside step 1): the system's model loaded exactly as `HFEngine` loads it, warmed up, then the engine's own
forward loop (`inferopt.engines.hf.loop.GreedyBatch`) inside `record_function("prefill")` / `("decode")`
ranges (`profile_phases`). Events are classified by `classify` and summed by `breakdown` (each says how);
`roof_work_share` and `host_share` are what the locate rules read.

What this module deliberately does not do: judge (bottleneck.py reads the shares), plot
(`inferopt.report.profile_plots`), count FLOPs (flops.py), profile served engines (vLLM: its own profiler
endpoints), or run NVML sampling.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from inferopt.config import HFSystem
from inferopt.measure.resources import process_usage, usage_delta
from inferopt.model.loading import load_system_model

PHASES = ("prefill", "decode")
CATEGORIES = ("attention", "matmul", "other", "host")
ROOF_WORK = ("attention", "matmul")
OPS_COLUMNS = (
    "phase",
    "category",
    "n_forwards",
    "self_cpu_ms",
    "self_cpu_ms_per_forward",
    "share",
    "self_device_ms",
    "device_share",
)
TOP_OPS_COLUMNS = ("phase", "op", "category", "calls", "self_cpu_ms", "self_device_ms")
MAX_DECODE_STEPS = 8  # profiled decode steps per repeat, at most
DEFAULT_REPEATS = 2

_ATTN_RE = re.compile(r"scaled_dot_product|flash_attention|efficient_attention|flex_attention|softmax")
_MATMUL_OPS = frozenset(
    f"aten::{n}"
    for n in ("linear", "mm", "addmm", "bmm", "baddbmm", "matmul", "mv", "addmv", "_addmm_activation", "dot")
)
_SHAPE_DEPENDENT = frozenset(("aten::matmul", "aten::bmm", "aten::baddbmm"))


@dataclass
class PhaseProfile:
    ops: pd.DataFrame  # OPS_COLUMNS
    top_ops: pd.DataFrame  # TOP_OPS_COLUMNS, 10 per phase
    resources: dict[str, Any] = field(default_factory=dict)  # inferopt.measure.resources.usage_delta
    settings: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "settings": self.settings,
            "resources": self.resources,
            "roof_work_share": {p: roof_work_share(self.ops, p) for p in PHASES},
            "host_share": {p: host_share(self.ops, p) for p in PHASES},
            "ops": self.ops.to_dict(orient="records"),
        }


def _phase_rows(ops: pd.DataFrame | None, phase: str) -> tuple[pd.DataFrame, str] | None:
    """`phase`'s rows and the share column to read (device time on CUDA, CPU time on CPU); None when the
    phase was not profiled."""
    if ops is None or ops.empty:
        return None
    rows = ops[ops["phase"] == phase]
    if rows.empty:
        return None
    return rows, ("device_share" if rows["device_share"].notna().any() else "share")


def roof_work_share(ops: pd.DataFrame | None, phase: str) -> float:
    """Share of `phase`'s time in matmul + attention ops; NaN when the phase was not profiled."""
    found = _phase_rows(ops, phase)
    if found is None:
        return math.nan
    rows, col = found
    return float(rows.loc[rows["category"].isin(ROOF_WORK), col].sum())


def host_share(ops: pd.DataFrame | None, phase: str) -> float:
    """Share of `phase`'s time in which the device that runs the model does no model op: on CPU the
    'host' category (Python/framework between aten ops; dispatcher cost inside tiny ops is not in it, so
    this is a lower bound on overhead); on CUDA 1 - (kernel time / phase wall time), the device's idle
    share. NaN when the phase was not profiled."""
    found = _phase_rows(ops, phase)
    if found is None:
        return math.nan
    rows, col = found
    if col == "device_share":
        return float(min(1.0, max(0.0, 1.0 - rows["device_share"].sum())))
    return float(rows.loc[rows["category"] == "host", "share"].sum())


def category_share(ops: pd.DataFrame | None, phase: str, category: str) -> float:
    """Share of `phase`'s time in one category (as `roof_work_share`); NaN when not profiled."""
    found = _phase_rows(ops, phase)
    if found is None:
        return math.nan
    rows, col = found
    return float(rows.loc[rows["category"] == category, col].sum())


def classify(name: str, input_shapes: Any = None, under_linear: bool = False) -> str | None:
    """The category an op's own name gives it, or None (unclassified: it inherits, else 'other').

    An op inherits the category of its outermost classified ancestor inside the phase, so `aten::linear ->
    aten::t` is matmul and a kernel launch counts for the op that launched it.
    - attention: the sdpa family, `flex_attention`, softmax, and a `matmul`/`bmm` outside any `linear` whose
      first input is 4-D (eager attention's Q K^T and P V: batch x heads x seq x dim);
    - matmul: `linear`, `mm`, `addmm`, `bmm`, `baddbmm`, `matmul`, `mv`, `addmv` otherwise (projections, MLP,
      LM head, and rotary's small position x frequency product);
    - other (None here): norms, rotary multiply, activations, residual adds, KV-cache `cat`, copies; also eager
      attention's scale and mask ops on the score matrix, which only their shapes would tell apart — so eager
      attention reads low and "other" high on long prompts: a known undercount;
    - host (`breakdown`): the phase range's own self time — inside the phase but in no aten op (Python, module
      calls, framework logic; includes the profiler's own per-op cost, so it reads a little high)."""
    if _ATTN_RE.search(name):
        return "attention"
    if name in _MATMUL_OPS:
        if name in _SHAPE_DEPENDENT and not under_linear and _first_input_rank(input_shapes) == 4:
            return "attention"
        return "matmul"
    return None


def representative_shape(phases: pd.DataFrame, max_positions: int | None = None) -> dict[str, int]:
    """The shape to profile for a measured phase table: the median uncached prompt length, the median
    batch at admission, and median output - 1 decode steps (at most MAX_DECODE_STEPS, at least 1)."""
    ok = phases[phases["outcome"] == "ok"] if "outcome" in phases else phases
    if ok.empty:
        ok = phases
    cached = ok["cached_tokens"] if "cached_tokens" in ok else 0
    prompt = float(np.nanmedian((ok["input_len"] - cached).clip(lower=1).to_numpy(float)))
    batch = (
        float(np.nanmedian(pd.to_numeric(ok["batch_size_at_admit"], errors="coerce").to_numpy(float)))
        if "batch_size_at_admit" in ok and ok["batch_size_at_admit"].notna().any()
        else 1.0
    )
    out = float(np.nanmedian(ok["output_len"].to_numpy(float))) if "output_len" in ok else 2.0
    steps = int(min(MAX_DECODE_STEPS, max(1, round(out) - 1)))
    prompt_len = max(1, int(round(prompt)))
    if max_positions:
        prompt_len = min(prompt_len, max(1, int(max_positions) - steps - 1))
    return {"prompt_len": prompt_len, "batch": max(1, int(round(batch))), "decode_steps": steps}


def profile_for_phases(system: HFSystem, phases: pd.DataFrame, **kwargs: Any) -> PhaseProfile:
    """`profile_phases` at `representative_shape(phases)` (the model's position limit respected)."""
    loaded = kwargs.pop("loaded", None) or load_system_model(system)
    max_pos = getattr(loaded.model.config, "max_position_embeddings", None)
    return profile_phases(system, **representative_shape(phases, max_pos), loaded=loaded, **kwargs)


def profile_phases(
    system: HFSystem,
    *,
    prompt_len: int,
    batch: int = 1,
    decode_steps: int = 8,
    repeats: int = DEFAULT_REPEATS,
    loaded: Any = None,
    seed: int = 0,
) -> PhaseProfile:
    """Profile `repeats` x (one prefill of `prompt_len` x `batch` + `decode_steps` decode steps) on the
    system's model, loaded as `HFEngine` loads it (`load_model` with the system's dtype, attention
    implementation, device and `torch_threads`) and warmed up. `loaded`: a `LoadedModel` already loaded for
    `system`. The result carries the pass's resource use (`inferopt.measure.resources`) and its settings."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    # lazy: imports torch and transformers
    from inferopt.engines.hf.loop import GreedyBatch, greedy_generate, left_pad, pad_token_id_of

    if prompt_len < 1 or batch < 1 or decode_steps < 0 or repeats < 1:
        raise ValueError(
            f"need prompt_len, batch, repeats >= 1 and decode_steps >= 0: "
            f"{prompt_len=} {batch=} {decode_steps=} {repeats=}"
        )
    old_threads = torch.get_num_threads()
    torch.set_num_threads(system.torch_threads)
    try:
        before = process_usage()
        if loaded is None:
            loaded = load_system_model(system)
        model, device = loaded.model, loaded.device
        cuda = str(device).startswith("cuda")
        sync = torch.cuda.synchronize if cuda else (lambda: None)
        pad = pad_token_id_of(model)
        ids_w, mask_w = left_pad([[1, 3, 4, 5]], pad, device)
        greedy_generate(model, ids_w, mask_w, 2)  # the engine's own warm-up
        gen = torch.Generator().manual_seed(seed)
        vocab = int(model.config.vocab_size)
        ids = torch.randint(min(3, vocab - 1), vocab, (batch, prompt_len), generator=gen).to(device)

        def one_pass(mark: bool) -> None:
            run = GreedyBatch(model, ids, None, max(decode_steps, 1), pad_token_id=pad)
            if mark:
                with record_function("prefill"):
                    run.prefill()
                for _ in range(decode_steps):
                    with record_function("decode"):
                        run.step()
            else:
                run.prefill()
                for _ in range(decode_steps):
                    run.step()
            sync()

        one_pass(False)  # warm-up at the profiled shape (allocator, kernel selection)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        start = process_usage()
        with profile(activities=activities, record_shapes=True) as prof:
            for _ in range(repeats):
                one_pass(True)
        profiled = usage_delta(start, process_usage())
        ops, top = breakdown(
            prof.events(), n_forwards={"prefill": repeats, "decode": repeats * decode_steps}, device=cuda
        )
        resources = usage_delta(before, process_usage())
        resources["profiled_wall_s"] = profiled["wall_s"]
        resources["profiled_cpu_s"] = profiled["cpu_s"]
        if cuda:
            resources["cuda_max_memory_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
    finally:
        torch.set_num_threads(old_threads)
    settings = {
        "system": system.name,
        "model": system.model.path,
        "dtype": system.dtype,
        "attn_implementation": system.attn_implementation,
        "device": str(device),
        "torch_threads": system.torch_threads,
        "prompt_len": int(prompt_len),
        "batch": int(batch),
        "decode_steps": int(decode_steps),
        "repeats": int(repeats),
        "torch_version": torch.__version__,
    }
    return PhaseProfile(ops=ops, top_ops=top, resources=resources, settings=settings)


def breakdown(events: Any, n_forwards: dict[str, int], device: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Sum the profiler's events into (phase, category) rows and the top ops per phase. `events`: the
    FunctionEvents of `prof.events()` (anything with name, cpu_parent, self_cpu_time_total,
    self_device_time_total, input_shapes, device_type works).

    One row per (phase, category): total self CPU ms over all profiled forwards, ms per forward, share of the
    phase's CPU time; on CUDA also the self device (kernel) ms and its share. On CPU the phase's time is its
    wall time on the calling thread; on CUDA the same wall time (each step ends with a host copy, which waits
    for the device) against the kernels' device time, so idle device time counts against the roofs."""
    cpu_ms: dict[tuple[str, str], float] = {}
    dev_ms: dict[tuple[str, str], float] = {}
    phase_wall: dict[str, float] = {}
    per_op: dict[tuple[str, str, str], list[float]] = {}
    for ev in events:
        if not _is_cpu(ev):
            continue
        if ev.name in PHASES:  # the record_function range itself
            phase = ev.name
            key = (phase, "host")
            phase_wall[phase] = phase_wall.get(phase, 0.0) + ev.cpu_time_total / 1e3
            cpu_ms[key] = cpu_ms.get(key, 0.0) + ev.self_cpu_time_total / 1e3
            dev_ms[key] = dev_ms.get(key, 0.0) + _self_device_us(ev) / 1e3
            continue
        phase, category = _phase_and_category(ev)
        if phase is None:
            continue
        key = (phase, category)
        c, d = ev.self_cpu_time_total / 1e3, _self_device_us(ev) / 1e3
        cpu_ms[key] = cpu_ms.get(key, 0.0) + c
        dev_ms[key] = dev_ms.get(key, 0.0) + d
        acc = per_op.setdefault((phase, ev.name, category), [0.0, 0.0, 0.0])
        acc[0] += 1
        acc[1] += c
        acc[2] += d
    rows = []
    for phase in PHASES:
        if phase not in phase_wall:
            continue
        total = sum(cpu_ms.get((phase, c), 0.0) for c in CATEGORIES)
        wall = phase_wall[phase]
        n = max(1, int(n_forwards.get(phase, 1)))
        for cat in CATEGORIES:
            c = cpu_ms.get((phase, cat), 0.0)
            d = dev_ms.get((phase, cat), 0.0)
            rows.append(
                {
                    "phase": phase,
                    "category": cat,
                    "n_forwards": n,
                    "self_cpu_ms": c,
                    "self_cpu_ms_per_forward": c / n,
                    "share": c / total if total > 0 else math.nan,
                    "self_device_ms": d if device else math.nan,
                    "device_share": (d / wall if wall > 0 else math.nan) if device else math.nan,
                }
            )
    ops = pd.DataFrame(rows, columns=list(OPS_COLUMNS))
    top_rows = [
        {
            "phase": p,
            "op": name,
            "category": cat,
            "calls": int(v[0]),
            "self_cpu_ms": v[1],
            "self_device_ms": v[2] if device else math.nan,
        }
        for (p, name, cat), v in per_op.items()
    ]
    top = pd.DataFrame(top_rows, columns=list(TOP_OPS_COLUMNS))
    if not top.empty:
        sort_col = "self_device_ms" if device else "self_cpu_ms"
        top = (
            top.sort_values(["phase", sort_col], ascending=[True, False])
            .groupby("phase", sort=False)
            .head(10)
            .reset_index(drop=True)
        )
    return ops, top


# --------------------------------------------------------------------------- helpers


def _phase_and_category(ev: Any) -> tuple[str | None, str]:
    """Walk up to the phase range; the outermost classified ancestor (or the op itself) decides."""
    chain = [ev]
    node = getattr(ev, "cpu_parent", None)
    phase = None
    while node is not None:
        if node.name in PHASES:
            phase = node.name
            break
        chain.append(node)
        node = getattr(node, "cpu_parent", None)
    if phase is None:
        return None, "other"
    category = None
    # outermost first; `under_linear` is known only walking down from the phase
    under_linear = False
    for node in reversed(chain):
        cat = classify(node.name, getattr(node, "input_shapes", None), under_linear)
        if node.name == "aten::linear":
            under_linear = True
        if cat is not None and category is None:
            category = cat
    return phase, category or "other"


def _first_input_rank(shapes: Any) -> int | None:
    try:
        first = shapes[0]
        return len(first) if isinstance(first, (list, tuple)) else None
    except (TypeError, IndexError):
        return None


def _is_cpu(ev: Any) -> bool:
    dt = getattr(ev, "device_type", None)
    return dt is None or "CPU" in str(dt)


def _self_device_us(ev: Any) -> float:
    try:
        return float(ev.self_device_time_total)
    except (AttributeError, AssertionError, TypeError):
        return 0.0
