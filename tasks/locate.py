"""Prefect tasks for step 2 (locate: roofline, KV, bottleneck verdict) and step 3 (choose: remedies)."""

from __future__ import annotations

from prefect import task

from inferopt.analysis.locate_step import LocateResult, locate_step
from inferopt.analysis.remedies import Choice, choose
from inferopt.config import CandidateConfig
from inferopt.measure.step import MeasureResult
from inferopt.report import plots
from tasks.tracking import Tracker

LOCATE, CHOOSE = "2-locate", "3-choose"


@task(name="locate", task_run_name="locate the bottleneck")
def locate_task(candidate: CandidateConfig, measured: MeasureResult, tracker: Tracker) -> LocateResult:
    tracker.child(LOCATE, tags={"inferopt.step": "locate"})
    result = locate_step(candidate, measured.phases)
    tracker.params({"hardware": result.hardware.to_dict()}, LOCATE)
    v = result.verdict
    tracker.tags({"inferopt.cause": v.cause}, LOCATE)
    tracker.metrics({"confidence": v.confidence}, LOCATE)
    tracker.json(v.to_dict(), "bottleneck.json", LOCATE)
    tracker.table(v.per_slice, "per_slice.parquet", LOCATE)
    if len(result.roofline):
        tracker.table(result.roofline, "roofline.parquet", LOCATE)
        tracker.table(result.kv, "kv_capacity.parquet", LOCATE)
        if len(result.measured):
            tracker.table(result.measured, "roofline_measured.parquet", LOCATE)
            tracker.metrics({f"{r.phase}.{k}": getattr(r, k) for r in result.measured.itertuples()
                             for k in ("mfu", "mbu", "measured_ms", "roofline_min_ms")}, LOCATE)
        tracker.figure(plots.roofline(result.roofline, result.hardware.peak_flops_per_s,
                                      result.hardware.mem_bandwidth_bytes_per_s, result.measured), "roofline.png", LOCATE)
    print(f"[locate] cause: {v.cause} (confidence {v.confidence:.2f}) — {v.rule}")
    tracker.finish(LOCATE)
    return result


@task(name="choose", task_run_name="choose: does the candidate match the cause?")
def choose_task(candidate: CandidateConfig, located: LocateResult, tracker: Tracker) -> Choice:
    tracker.child(CHOOSE, tags={"inferopt.step": "choose"})
    choice = choose(located.verdict.cause, dict(candidate.changes))
    tracker.json(choice.to_dict(), "choice.json", CHOOSE)
    tracker.tags({"inferopt.matches_cause": str(choice.matches),
                  "inferopt.quality_gate_required": str(choice.quality_gate_required)}, CHOOSE)
    if choice.warning:
        tracker.tags({"inferopt.warning": choice.warning[:4000]}, CHOOSE)
        print(f"[choose] WARNING: {choice.warning}")
    else:
        print(f"[choose] the candidate's remedy matches the cause '{choice.cause}'")
    tracker.finish(CHOOSE)
    return choice
