"""Prefect task for step 1 (measure): run the baseline, log phases, slices, summary, plots."""

from __future__ import annotations

from prefect import task

from inferopt.config import CandidateConfig
from inferopt.measure.step import MeasureResult, measure
from inferopt.report import plots
from tasks.tracking import Tracker, log_records

STEP = "1-measure"


@task(name="measure", task_run_name="measure baseline")
def measure_task(candidate: CandidateConfig, tracker: Tracker) -> MeasureResult:
    tracker.child(STEP, tags={"inferopt.step": "measure", "inferopt.arm": "baseline"})
    tracker.params(candidate.baseline.model_dump(mode="json"), STEP)
    result = measure(candidate, tracker.dir_for(STEP), run_tag=tracker.parent_run_id)
    tracker.metrics(result.headline, STEP)
    tracker.metrics({f"decomposition.{k}": float(v) for k, v in result.decomposition.items()}, STEP)
    tracker.metrics({f"resources.{k}": v for k, v in result.resources.items() if isinstance(v, (int, float))}, STEP)
    tracker.json(
        {
            "engine": result.run.engine_info,
            "server_metrics_delta": result.run.server_metrics,
            "warmup_requests_excluded": result.run.warmup_declared,
            "decomposition": result.decomposition,
            "slice_edges": result.edges.__dict__,
            "resources": result.resources,
        },
        "measure.json",
        STEP,
    )
    tracker.table(result.workload, "workload.parquet", STEP)
    tracker.table(result.phases, "phases.parquet", STEP)
    tracker.table(result.summary, "summary.parquet", STEP)
    log_records(tracker, result.run.records, STEP)
    for dim in ("input_bucket", "output_bucket", "concurrency_bucket"):
        tracker.figure(plots.phase_stack(result.phases, dim), f"phase_stack_{dim}.png", STEP)
    tracker.figure(plots.latency_cdf(result.phases, "ttft_ms", by="input_bucket"), "ttft_cdf_by_input.png", STEP)
    tracker.finish(STEP)
    return result
