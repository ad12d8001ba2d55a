"""Prefect task for step 5 (validate): the candidate through its scenarios (steady, burst, overload, node
failure), each judged on the SLOs and on fairness/starvation, with reasons; tables and verdicts to MLflow."""

from __future__ import annotations

from prefect import task

from inferopt.config import CandidateConfig
from inferopt.report import plots
from inferopt.validate.scenarios import ScenarioResult, scenario_table, validate
from tasks.tracking import Tracker, log_records, metric_key

STEP = "5-validate"


@task(name="validate", task_run_name="validate under concurrency")
def validate_task(candidate: CandidateConfig, tracker: Tracker, arm: str = "candidate") -> list[ScenarioResult]:
    tracker.child(STEP, tags={"inferopt.step": "validate", "inferopt.arm": arm})
    system = candidate.candidate_system if arm == "candidate" else candidate.baseline
    tracker.params(
        {
            "arm": arm,
            "slo": candidate.slo.model_dump(mode="json"),
            "scenarios": [s.model_dump(mode="json") for s in candidate.validation.scenarios],
            "fairness": candidate.validation.fairness.model_dump(mode="json"),
        },
        STEP,
    )
    results = validate(
        system,
        candidate.workload,
        candidate.validation.scenarios,
        candidate.slo,
        tracker.dir_for(STEP),
        arm=arm,
        run_tag=tracker.parent_run_id,
        warmup_requests=candidate.measure.warmup_requests,
        fairness=candidate.validation.fairness,
    )
    table = scenario_table(results)
    tracker.table(table, "scenarios.parquet", STEP)
    verdicts = {}
    for r in results:
        name = r.scenario.name
        tracker.metrics(
            {metric_key(f"{name}.{k}"): v for k, v in r.metrics.items()}
            | {metric_key(f"{name}.passed"): float(r.passed)},
            STEP,
        )
        for tname, t in r.tables.items():  # fairness, queue growth, attempts, failure segments, ...
            if len(t):
                tracker.table(t, f"{name}.{tname}.parquet", STEP)
        verdicts[name] = {
            "kind": r.scenario.kind,
            "passed": r.passed,
            "reasons": r.reasons,
            "starved": r.fairness.starved if r.fairness else [],
        }
        print(f"[validate] {name} ({r.scenario.kind}): {'pass' if r.passed else 'FAIL'} — " + "; ".join(r.reasons))
    tracker.json(verdicts, "scenario_verdicts.json", STEP)
    tracker.tags({f"inferopt.scenario.{n}": "pass" if v["passed"] else "fail" for n, v in verdicts.items()}, STEP)
    runs = [run for r in results for run in (r.run, *r.extra_runs) if not run.failed]
    log_records(tracker, [rec for run in runs for rec in run.records], STEP)
    if runs:
        import pandas as pd

        phases = pd.concat([run.phases for run in runs], ignore_index=True)
        tracker.table(phases, "phases.parquet", STEP)
        tracker.figure(plots.latency_cdf(phases, "ttft_ms", by="scenario"), "ttft_cdf_by_scenario.png", STEP)
    tracker.finish(STEP)
    return results
