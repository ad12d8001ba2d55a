"""Prefect task for step 5 (validate): `inferopt.validate.validate_candidate` — the candidate through its
scenarios (steady, burst, overload, node failure), each judged on the SLOs and on fairness/starvation, with
reasons — logged to `5-validate` (tables and verdicts)."""

from __future__ import annotations

from prefect import task

from inferopt.config import CandidateConfig
from inferopt.validate import ScenarioResult, validate_candidate
from tasks.log_steps import log_validation
from tasks.tracking import Tracker

STEP = "5-validate"


@task(name="validate", task_run_name="validate under concurrency")
def validate_task(candidate: CandidateConfig, tracker: Tracker, arm: str = "candidate") -> list[ScenarioResult]:
    tracker.child(STEP, tags={"inferopt.step": "validate", "inferopt.arm": arm})
    tracker.params(
        {
            "arm": arm,
            "slo": candidate.slo.model_dump(mode="json"),
            "scenarios": [s.model_dump(mode="json") for s in candidate.validation.scenarios],
            "fairness": candidate.validation.fairness.model_dump(mode="json"),
        },
        STEP,
    )
    results = validate_candidate(candidate, tracker.dir_for(STEP), arm=arm, run_tag=tracker.parent_run_id)
    log_validation(tracker, results, STEP)
    tracker.finish(STEP)
    return results
