"""Prefect task for step 5 (validate): the candidate under steady and burst load, judged on the SLOs."""

from __future__ import annotations

from prefect import task

from inferopt.config import CandidateConfig
from inferopt.validation.scenarios import ScenarioResult, scenario_table, validate
from inferopt.report import plots
from tasks.tracking import Tracker, log_records

STEP = "5-validate"


@task(name="validate", task_run_name="validate under concurrency")
def validate_task(candidate: CandidateConfig, tracker: Tracker, arm: str = "candidate") -> list[ScenarioResult]:
    tracker.child(STEP, tags={"inferopt.step": "validate", "inferopt.arm": arm})
    system = candidate.candidate_system if arm == "candidate" else candidate.baseline
    tracker.params({"arm": arm, "slo": candidate.slo.model_dump(mode="json"),
                    "scenarios": [s.model_dump(mode="json") for s in candidate.validation.scenarios]}, STEP)
    results = validate(system, candidate.workload, candidate.validation.scenarios, candidate.slo, tracker.dir_for(STEP),
                       arm=arm, run_tag=tracker.parent_run_id, warmup_requests=candidate.measure.warmup_requests)
    table = scenario_table(results)
    tracker.table(table, "scenarios.parquet", STEP)
    for r in results:
        tracker.metrics({f"{r.scenario.name}.{k}": v for k, v in r.metrics.items()}, STEP)
        print(f"[validate] {r.scenario.name}: {'pass' if r.passed else 'FAIL'} — " + "; ".join(r.reasons))
    runs = [r.run for r in results if not r.run.failed]
    log_records(tracker, [rec for run in runs for rec in run.records], STEP)
    if runs:
        import pandas as pd

        phases = pd.concat([run.phases for run in runs], ignore_index=True)
        tracker.table(phases, "phases.parquet", STEP)
        tracker.figure(plots.latency_cdf(phases, "ttft_ms", by="scenario"), "ttft_cdf_by_scenario.png", STEP)
    tracker.finish(STEP)
    return results
