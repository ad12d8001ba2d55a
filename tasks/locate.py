"""Prefect tasks for step 2 (locate: roofline, KV, op profile, bottleneck verdict) and step 3 (choose: remedies).

The op profile pass (hf systems: a few seconds of torch.profiler over one representative prefill and a few
decode steps, separate from the measured run) is on unless `INFEROPT_PROFILE=0` (or off/false/no).
"""

from __future__ import annotations

import os

from prefect import task

from inferopt.choose.remedies import Choice, choose
from inferopt.config import CandidateConfig
from inferopt.locate.step import LocateResult, locate_step
from inferopt.measure.step import MeasureResult
from inferopt.report import plots, profile_plots
from tasks.tracking import Tracker

LOCATE, CHOOSE = "2-locate", "3-choose"


def profile_enabled() -> bool:
    """The op profile pass runs unless INFEROPT_PROFILE is 0/off/false/no."""
    return os.environ.get("INFEROPT_PROFILE", "1").strip().lower() not in {"0", "off", "false", "no"}


@task(name="locate", task_run_name="locate the bottleneck")
def locate_task(candidate: CandidateConfig, measured: MeasureResult, tracker: Tracker) -> LocateResult:
    tracker.child(LOCATE, tags={"inferopt.step": "locate"})
    result = locate_step(
        candidate,
        measured.phases,
        profile=profile_enabled(),
        server_metrics=measured.run.server_metrics,
        engine_info=measured.run.engine_info,
    )
    tracker.params({"hardware": result.hardware.to_dict()}, LOCATE)
    log_profile(result, tracker)
    v = result.diagnosis
    tracker.tags({"inferopt.cause": v.cause}, LOCATE)
    tracker.metrics({"confidence": v.confidence}, LOCATE)
    tracker.json(v.to_dict(), "bottleneck.json", LOCATE)
    tracker.table(v.per_slice, "per_slice.parquet", LOCATE)
    if len(result.roofline):
        tracker.table(result.roofline, "roofline.parquet", LOCATE)
        tracker.table(result.kv, "kv_capacity.parquet", LOCATE)
        if len(result.kv_vllm):  # vLLM baselines: our KV math beside vLLM's own report (blocks, usage, preemptions)
            tracker.table(result.kv_vllm, "kv_capacity_vllm.parquet", LOCATE)
        if len(result.measured):
            tracker.table(result.measured, "roofline_measured.parquet", LOCATE)
            tracker.metrics(
                {
                    f"{r.phase}.{k}": getattr(r, k)
                    for r in result.measured.itertuples()
                    for k in ("mfu", "mbu", "measured_ms", "roofline_min_ms")
                },
                LOCATE,
            )
        tracker.figure(
            plots.roofline(
                result.roofline,
                result.hardware.peak_flops_per_s,
                result.hardware.mem_bandwidth_bytes_per_s,
                result.measured,
            ),
            "roofline.png",
            LOCATE,
        )
    print(f"[locate] cause: {v.cause} (confidence {v.confidence:.2f}) — {v.rule}")
    tracker.finish(LOCATE)
    return result


def log_profile(result: LocateResult, tracker: Tracker) -> None:
    """The op breakdown (table, top ops, settings and resources, stacked-bar figure) on the locate run."""
    from inferopt.locate.profile import PHASES, category_share, host_share

    if result.profile_error:
        tracker.tags({"inferopt.profile_error": result.profile_error[:4000]}, LOCATE)
        print(f"[locate] op profile failed (verdict made without it): {result.profile_error.splitlines()[0]}")
    prof = result.profile
    if prof is None:
        return
    tracker.table(prof.ops, "op_breakdown.parquet", LOCATE)
    tracker.table(prof.top_ops, "top_ops.parquet", LOCATE)
    tracker.json(prof.to_dict(), "profile.json", LOCATE)
    metrics = {}
    for phase in PHASES:
        metrics[f"profile.{phase}.host_share"] = host_share(prof.ops, phase)
        for cat in ("attention", "matmul", "other"):
            metrics[f"profile.{phase}.{cat}_share"] = category_share(prof.ops, phase, cat)
    metrics.update({f"profile.resources.{k}": v for k, v in prof.resources.items() if isinstance(v, (int, float))})
    tracker.metrics(metrics, LOCATE)
    s = prof.settings
    tracker.figure(
        profile_plots.op_breakdown(
            prof.ops, f"{s['system']}: prefill {s['prompt_len']} tok x {s['batch']}, {s['decode_steps']} decode steps"
        ),
        "op_breakdown.png",
        LOCATE,
    )


@task(name="choose", task_run_name="choose: does the candidate match the cause?")
def choose_task(candidate: CandidateConfig, located: LocateResult, tracker: Tracker) -> Choice:
    tracker.child(CHOOSE, tags={"inferopt.step": "choose"})
    choice = choose(located.diagnosis.cause, dict(candidate.changes))
    tracker.json(choice.to_dict(), "choice.json", CHOOSE)
    tracker.tags(
        {
            "inferopt.matches_cause": str(choice.matches),
            "inferopt.quality_gate_required": str(choice.quality_gate_required),
        },
        CHOOSE,
    )
    if choice.warning:
        tracker.tags({"inferopt.warning": choice.warning[:4000]}, CHOOSE)
        print(f"[choose] WARNING: {choice.warning}")
    else:
        print(f"[choose] the candidate's remedy matches the cause '{choice.cause}'")
    tracker.finish(CHOOSE)
    return choice
