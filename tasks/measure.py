"""Prefect task for step 1 (measure): `inferopt.measure.measure` on the baseline, logged to `1-measure` (phases,
slices, summary, the M3 decomposition check, plots)."""

from __future__ import annotations

from prefect import task

from inferopt.config import CandidateConfig
from inferopt.measure import MeasureResult, measure
from tasks.log_steps import log_measure
from tasks.tracking import Tracker

STEP = "1-measure"


@task(name="measure", task_run_name="measure baseline")
def measure_task(candidate: CandidateConfig, tracker: Tracker) -> MeasureResult:
    tracker.child(STEP, tags={"inferopt.step": "measure", "inferopt.arm": "baseline"})
    tracker.params(candidate.baseline.model_dump(mode="json"), STEP)
    result = measure(candidate, tracker.dir_for(STEP), run_tag=tracker.parent_run_id)
    log_measure(tracker, result, STEP)
    tracker.finish(STEP)
    return result
