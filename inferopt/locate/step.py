"""Step 2, locate: put the measured phases next to their ceilings (roofline, KV capacity) and name the
dominant cause with its evidence (L1–L4). Then step 3's `choose` matches remedies to that cause.

With `profile=True` (hf systems only) a short torch.profiler pass over one representative prefill and a
few decode steps (`inferopt.locate.profile`) adds the per-phase op breakdown, which the verdict uses as
evidence (host share, attention share). A failing profile pass is recorded in `profile_error` and the
verdict is made without it.

On a vLLM baseline the KV table uses the KV budget the server was given (`kv_cache_memory_bytes`; else an
estimate: device memory x gpu_memory_utilization - weights - workspace) and the KV cache dtype; the run's
`engine_info` (what `VLLMEngine.info()` reported) adds the server's peak KV usage and running sequences
to the verdict's knobs, and `kv_vllm` compares our KV math with vLLM's own report (`kv_vllm.py`).

Deliberately not here: the rules themselves (`bottleneck.py`) and the remedy catalogue (`inferopt.choose.remedies`).
"""

from __future__ import annotations

import json
import os
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from inferopt.config import AnySystem, CandidateConfig, HardwareConfig
from inferopt.locate.bottleneck import Diagnosis, locate, roofline_points
from inferopt.locate.hardware import HardwareProfile, load_hardware
from inferopt.locate.kv import kv_budget_bytes, kv_bytes_per_token, kv_table
from inferopt.locate.kv_vllm import kv_comparison
from inferopt.locate.profile import PhaseProfile, profile_for_phases
from inferopt.locate.roofline import ModelDims, achieved, roofline_table, weight_bytes
from inferopt.model.loading import resolve_model_dir

BYTES_PER_ELEM = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}


@dataclass
class LocateResult:
    hardware: HardwareProfile
    dims: ModelDims | None
    roofline: pd.DataFrame  # ceilings per phase operating point
    measured: pd.DataFrame  # the same points with achieved FLOP/s and bandwidth from measured times
    kv: pd.DataFrame
    diagnosis: Diagnosis
    profile: PhaseProfile | None = None  # the op breakdown, when profiled
    profile_error: str | None = None  # why the profile pass failed, when it did
    kv_vllm: pd.DataFrame = field(default_factory=pd.DataFrame)  # our KV math vs vLLM's report (vLLM baselines)


def model_dims(system: AnySystem) -> ModelDims | None:
    """The dimensions of the local model `system` serves (None: it serves none we can read, e.g. an endpoint)."""
    model = system.capabilities.model
    if model is None:
        return None

    return ModelDims.from_hf_config(json.loads((resolve_model_dir(model) / "config.json").read_text()))


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
        rows.append(
            {
                "phase": r["phase"],
                "measured_ms": t_ms,
                "roofline_min_ms": r["t_min_s"] * 1000.0,
                "ai_flop_per_byte": r["ai_flop_per_byte"],
                **a,
            }
        )
    return pd.DataFrame(rows)


def max_batch_size(system: AnySystem) -> int | None:
    """The most sequences the system decodes at once (None: unknown, an endpoint we did not launch)."""
    return system.capabilities.max_running


def vllm_kv_budget(system: AnySystem, memory_bytes: float, weight_bytes_: float) -> tuple[int, str]:
    """The KV budget a server with a reserved KV cache (vLLM) works with: its `kv_cache_memory_bytes`, else
    device memory x gpu_memory_utilization minus weights and a 10 % workspace (an estimate: vLLM profiles
    activations). The system must declare a `kv_budget`."""
    declared = system.capabilities.kv_budget
    if declared is None:
        raise ValueError(f"system {system.name!r} ({system.engine}) reserves no KV budget")
    if declared.configured_bytes is not None:
        return int(declared.configured_bytes), "kv_cache_memory_bytes"
    util = declared.memory_fraction
    return kv_budget_bytes(
        memory_bytes * util, weight_bytes_
    ), f"estimate: memory x {util:g} - weights - 10 % workspace"


def kv_bytes_per_elem(system: AnySystem, dtype_bytes: float) -> float:
    """Bytes per cached K or V element: an fp8 KV cache stores 1 byte, else the model dtype's size."""
    kv_dtype = str(getattr(system, "kv_cache_dtype", "auto"))
    return 1.0 if kv_dtype.startswith("fp8") else dtype_bytes


def profile_enabled() -> bool:
    """The op profile pass runs unless the environment says INFEROPT_PROFILE=0 (or off/false/no)."""
    return os.environ.get("INFEROPT_PROFILE", "1").strip().lower() not in {"0", "off", "false", "no"}


def locate_step(
    candidate: CandidateConfig,
    phases: pd.DataFrame,
    *,
    profile: bool = False,
    server_metrics: dict[str, float] | None = None,
    engine_info: dict[str, Any] | None = None,
) -> LocateResult:
    """Roofline, KV table and verdict for the candidate's baseline (`locate_system` on its hardware)."""
    return locate_system(
        candidate.baseline,
        candidate.hardware,
        phases,
        profile=profile,
        server_metrics=server_metrics,
        engine_info=engine_info,
    )


def locate_system(
    system: AnySystem,
    hardware: HardwareConfig,
    phases: pd.DataFrame,
    *,
    profile: bool = False,
    server_metrics: dict[str, float] | None = None,
    engine_info: dict[str, Any] | None = None,
) -> LocateResult:
    """Roofline, KV table and verdict for `system`'s measured `phases` on `hardware`; `profile`: also run the op
    profile pass (hf systems; ignored for others) and give the verdict its evidence. `server_metrics`: the
    run's server counter deltas (vLLM: preemptions feed the KV-capacity rule). `engine_info`: the run's
    engine report (vLLM: peaks of KV usage and running sequences, its KV cache report)."""
    prof: PhaseProfile | None = None
    prof_error: str | None = None
    caps = system.capabilities
    if profile and caps.op_profile and len(phases):
        try:
            prof = profile_for_phases(system, phases)
        except Exception as exc:  # noqa: BLE001 - the verdict can be made without the profile
            prof_error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
    dtype = getattr(system, "dtype", "float32")
    dtype = dtype if dtype in BYTES_PER_ELEM else "float32"  # vLLM's "auto": the tiny checkpoints are fp32
    threads = caps.cpu_threads
    hw = load_hardware(hardware, dtype, threads)
    dims = model_dims(system)
    gauges = (engine_info or {}).get("server_gauge_peaks") or {}
    kv_vllm = pd.DataFrame()
    if dims is None:
        roof = pd.DataFrame()
        kv = pd.DataFrame()
        measured = pd.DataFrame()
    else:
        b = BYTES_PER_ELEM[dtype]
        roof = roofline_table(
            dims,
            hw.peak_flops_per_s,
            hw.mem_bandwidth_bytes_per_s,
            roofline_points(phases),
            weight_bytes_per_elem=b,
            kv_bytes_per_elem=b,
            act_bytes_per_elem=b,
        )
        ok = phases[phases["outcome"] == "ok"]
        ctx = (ok["input_len"] + ok["output_len"]).to_numpy(float)
        ctx_lens = sorted({int(np.quantile(ctx, q)) for q in (0.5, 0.95, 1.0)}) if len(ctx) else [512]
        kv_b = kv_bytes_per_elem(system, b)
        budget = None
        if caps.kv_budget is not None:
            budget, _ = vllm_kv_budget(system, hw.memory_bytes, weight_bytes(dims, b))
        kv = kv_table(
            dims,
            ctx_lens,
            max_batch_size(system) or 1,
            kv_b,
            hw.memory_bytes,
            weight_bytes(dims, b),
            budget_bytes=budget,
        )
        measured = _measured_points(roof, phases, hw)
        if caps.kv_budget is not None:  # the server reports its KV cache: compare our math with it
            long_ctx = float(np.quantile(ctx, 0.95)) if len(ctx) else float(caps.kv_budget.max_model_len or 512)
            kv_vllm = _vllm_comparison(
                system, dims, kv_b, int(budget), long_ctx, engine_info or {}, server_metrics or {}
            )
    knobs: dict[str, Any] = {"max_batch_size": max_batch_size(system)}
    preemptions = (server_metrics or {}).get("num_preemptions_total")
    if preemptions is not None:
        knobs["num_preemptions"] = preemptions
    if "kv_cache_usage_perc_max" in gauges:
        knobs["kv_cache_usage_frac_max"] = float(gauges["kv_cache_usage_perc_max"])
    if "num_requests_running_max" in gauges:
        knobs["observed_concurrency"] = float(gauges["num_requests_running_max"])
    diagnosis = locate(phases, roof, kv, knobs, op_breakdown=prof.ops if prof is not None else None)
    return LocateResult(
        hardware=hw,
        dims=dims,
        roofline=roof,
        measured=measured,
        kv=kv,
        diagnosis=diagnosis,
        profile=prof,
        profile_error=prof_error,
        kv_vllm=kv_vllm,
    )


def _vllm_comparison(
    system: AnySystem,
    dims: ModelDims,
    kv_b: float,
    budget: int,
    long_ctx: float,
    engine_info: dict[str, Any],
    server_metrics: dict[str, float],
) -> pd.DataFrame:
    """`kv_vllm.kv_comparison` fed from the system config, the engine's KV report and the run's peaks."""
    report = engine_info.get("kv_cache_report") or {}
    cfg = report.get("cache_config") or {}
    log = report.get("log") or {}
    gauges = engine_info.get("server_gauge_peaks") or {}
    declared = system.capabilities.kv_budget
    block = cfg.get("block_size") or declared.block_size_tokens
    reported = {
        "num_gpu_blocks": cfg.get("num_gpu_blocks"),
        "block_size": cfg.get("block_size"),
        "kv_cache_memory_bytes": cfg.get("kv_cache_memory_bytes"),
        # the start-up log's figures; cache_config_info carries the same two (vLLM >= 0.3x), used when the log has none
        "kv_cache_tokens": log.get("kv_cache_tokens", cfg.get("kv_cache_size_tokens")),
        "max_concurrency": log.get("max_concurrency", cfg.get("kv_cache_max_concurrency")),
        "num_requests_running_max": gauges.get("num_requests_running_max"),
        "kv_cache_usage_frac_max": gauges.get("kv_cache_usage_perc_max"),
        "num_preemptions": server_metrics.get("num_preemptions_total"),
    }
    reported = {k: (v if isinstance(v, (int, float)) else None) for k, v in reported.items()}
    per_tok = kv_bytes_per_token(dims.n_layers, dims.n_kv_heads, dims.head_dim, kv_b)
    return kv_comparison(
        kv_bytes_per_token=per_tok,
        budget_bytes=budget,
        block_size=int(block),
        max_model_len=declared.max_model_len,
        context_len_tok=long_ctx,
        reported=reported,
    )
