"""Step 2, locate: put the measured phases next to their ceilings (roofline, KV capacity) and name the
dominant cause with its evidence (L1–L4). Then step 3's `choose` matches remedies to that cause.

With `profile=True` (hf systems only) a short torch.profiler pass over one representative prefill and a
few decode steps (`inferopt.analysis.profile`) adds the per-phase op breakdown, which the verdict uses as
evidence (host share, attention share). A failing profile pass is recorded in `profile_error` and the
verdict is made without it.

Deliberately not here: the rules themselves (`bottleneck.py`) and the remedy catalogue (`remedies.py`).
"""

from __future__ import annotations

import json
import traceback
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from inferopt.analysis.bottleneck import Verdict, locate, roofline_points
from inferopt.analysis.hardware import HardwareProfile, load_hardware
from inferopt.analysis.kv import kv_table
from inferopt.analysis.profile import PhaseProfile, profile_for_phases
from inferopt.analysis.roofline import ModelDims, achieved, roofline_table, weight_bytes
from inferopt.config import AnySystem, CandidateConfig, HFSystem, VLLMSystem

BYTES_PER_ELEM = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}


@dataclass
class LocateResult:
    hardware: HardwareProfile
    dims: ModelDims | None
    roofline: pd.DataFrame          # ceilings per phase operating point
    measured: pd.DataFrame          # the same points with achieved FLOP/s and bandwidth from measured times
    kv: pd.DataFrame
    verdict: Verdict
    profile: PhaseProfile | None = None  # the op breakdown, when profiled
    profile_error: str | None = None     # why the profile pass failed, when it did


VLLM_DEFAULT_MAX_NUM_SEQS = 256  # vLLM's default when max_num_seqs is unset


def model_dims(system: AnySystem) -> ModelDims | None:
    if not isinstance(system, (HFSystem, VLLMSystem)):
        return None
    from inferopt.model.loading import resolve_model_dir

    return ModelDims.from_hf_config(json.loads((resolve_model_dir(system.model) / "config.json").read_text()))


def _measured_points(roof: pd.DataFrame, phases: pd.DataFrame, hw: HardwareProfile) -> pd.DataFrame:
    ok = phases[phases["outcome"] == "ok"]
    rows = []
    for _, r in roof.iterrows():
        if r["phase"] == "prefill":
            t_ms = float(ok["prefill_ms"].median())
        else:
            steps = (ok["output_len"] - 1).clip(lower=1)
            t_ms = float((ok["decode_ms"] / steps).median())
        if not np.isfinite(t_ms) or t_ms <= 0:
            continue
        a = achieved(r["flops"], r["bytes"], t_ms / 1000.0, hw.peak_flops_per_s, hw.mem_bandwidth_bytes_per_s)
        rows.append({"phase": r["phase"], "measured_ms": t_ms, "roofline_min_ms": r["t_min_s"] * 1000.0,
                     "ai_flop_per_byte": r["ai_flop_per_byte"], **a})
    return pd.DataFrame(rows)


def max_batch_size(system: AnySystem) -> int | None:
    """The most sequences the system decodes at once (None: unknown, an endpoint we did not launch)."""
    if isinstance(system, VLLMSystem):
        return system.max_num_seqs or VLLM_DEFAULT_MAX_NUM_SEQS
    batching = getattr(system, "batching", None)
    return batching.max_batch_size if batching is not None else None


def locate_step(candidate: CandidateConfig, phases: pd.DataFrame, *, profile: bool = False,
                server_metrics: dict[str, float] | None = None) -> LocateResult:
    """Roofline, KV table and verdict for the baseline's measured `phases`; `profile`: also run the op
    profile pass (hf systems; ignored for others) and give the verdict its evidence. `server_metrics`: the
    run's server counter deltas (vLLM: preemptions feed the KV-capacity rule)."""
    system = candidate.baseline
    prof: PhaseProfile | None = None
    prof_error: str | None = None
    if profile and isinstance(system, HFSystem) and len(phases):
        try:
            prof = profile_for_phases(system, phases)
        except Exception as exc:  # noqa: BLE001 - the verdict can be made without the profile
            prof_error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
    dtype = getattr(system, "dtype", "float32")
    dtype = dtype if dtype in BYTES_PER_ELEM else "float32"  # vLLM's "auto": the tiny checkpoints are fp32
    threads = system.torch_threads if isinstance(system, HFSystem) else 1
    hw = load_hardware(candidate.hardware, dtype, threads)
    dims = model_dims(system)
    if dims is None:
        roof = pd.DataFrame()
        kv = pd.DataFrame()
        measured = pd.DataFrame()
    else:
        b = BYTES_PER_ELEM[dtype]
        roof = roofline_table(dims, hw.peak_flops_per_s, hw.mem_bandwidth_bytes_per_s, roofline_points(phases),
                              weight_bytes_per_elem=b, kv_bytes_per_elem=b, act_bytes_per_elem=b)
        ok = phases[phases["outcome"] == "ok"]
        ctx = (ok["input_len"] + ok["output_len"]).to_numpy(float)
        ctx_lens = sorted({int(np.quantile(ctx, q)) for q in (0.5, 0.95, 1.0)}) if len(ctx) else [512]
        kv = kv_table(dims, ctx_lens, max_batch_size(system) or 1, b, hw.memory_bytes, weight_bytes(dims, b))
        measured = _measured_points(roof, phases, hw)
    knobs: dict[str, Any] = {"max_batch_size": max_batch_size(system)}
    preemptions = (server_metrics or {}).get("num_preemptions_total")
    if preemptions is not None:
        knobs["num_preemptions"] = preemptions
    verdict = locate(phases, roof, kv, knobs, op_breakdown=prof.ops if prof is not None else None)
    return LocateResult(hardware=hw, dims=dims, roofline=roof, measured=measured, kv=kv, verdict=verdict,
                        profile=prof, profile_error=prof_error)
