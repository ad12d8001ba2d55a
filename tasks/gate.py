"""Prefect task for step 6 (gate): the sliced quality suite with paired CIs, output drift, and cost per
successful task — every table an MLflow artifact of the `6-gate` child run. `gate.json` and the
`inferopt.quality.path.<arm>` tags say how each arm was evaluated (served / in-memory / in-memory proxy)."""

from __future__ import annotations

from prefect import task

from inferopt.ablate.run import AblationResult
from inferopt.choose.remedies import Choice
from inferopt.config import CandidateConfig
from inferopt.gate.drift import next_token_drift, served_agreement
from inferopt.gate.judge import GateResult, combine_quality, cost_table, judge_cost, judge_quality
from inferopt.gate.suite_gate import sliced_gate
from inferopt.locate.step import LocateResult
from tasks.tracking import Tracker

STEP = "6-gate"


@task(name="gate", task_run_name="quality and cost gate")
def gate_task(
    candidate: CandidateConfig, ablation: AblationResult, located: LocateResult, choice: Choice, tracker: Tracker
) -> GateResult:
    tracker.child(STEP, tags={"inferopt.step": "gate"})
    served = served_agreement(ablation.records("baseline"), ablation.records("candidate"))
    try:
        drift = next_token_drift(candidate.baseline, candidate.candidate_system, candidate.gate)
    except Exception as exc:  # noqa: BLE001 - a failed check is evidence, not a crash
        drift = {"status": "skipped", "reason": f"drift check failed: {type(exc).__name__}: {exc}"}
    d_status, d_reasons = judge_quality(drift, served, candidate.gate, choice.quality_gate_required)
    suite = sliced_gate(candidate.baseline, candidate.candidate_system, candidate.gate)
    q_status, q_reasons = combine_quality(
        suite.status, suite.reasons, d_status, d_reasons, choice.quality_gate_required
    )
    if not suite.table.empty:
        tracker.table(suite.table, "quality_slices.parquet", STEP)
        tracker.table(suite.accuracy, "quality_accuracy.parquet", STEP)
    if not suite.calibration.empty:
        tracker.table(suite.calibration, "quality_calibration.parquet", STEP)
    for arm, samples in suite.samples.items():
        tracker.table(samples, f"quality_samples_{arm}.parquet", STEP)
    if suite.lm_eval_results:
        tracker.json(suite.lm_eval_results, "lm_eval_results.json", STEP)
    threads = {a.name: a.system.capabilities.cpu_threads for a in ablation.arms}
    costs = (
        cost_table(ablation.trials, candidate.slo, located.hardware, threads, suite.task_success_rate)
        if len(ablation.trials)
        else None
    )
    if costs is not None and len(costs):
        c_status, c_reasons = judge_cost(costs)
        tracker.table(costs, "cost.parquet", STEP)
    else:
        c_status, c_reasons = "skipped", ["no successful trial to cost"]
    result = GateResult(
        quality_status=q_status,
        quality_required=choice.quality_gate_required,
        quality_reasons=q_reasons,
        drift={"served": served, "next_token": drift},
        cost=costs,
        cost_status=c_status,
        cost_reasons=c_reasons,
    )
    tracker.json(
        {
            "quality": {
                "status": q_status,
                "required": choice.quality_gate_required,
                "reasons": q_reasons,
                "suite": {
                    "status": suite.status,
                    "model": suite.model,
                    "paths": suite.paths,
                    "evaluated": suite.evaluated,
                    "skipped_tasks": suite.skipped_tasks,
                    "task_success_rate": suite.task_success_rate,
                },
                **result.drift,
            },
            "cost": {"status": c_status, "reasons": c_reasons},
        },
        "gate.json",
        STEP,
    )
    flat = {f"served.{k}": v for k, v in served.items()} | {f"next_token.{k}": v for k, v in drift.items()}
    flat |= {f"task_success_rate.{arm}": v for arm, v in suite.task_success_rate.items()}
    tracker.metrics(flat, STEP)
    tracker.tags(
        {"inferopt.quality": q_status, "inferopt.quality.suite": suite.status, "inferopt.cost": c_status}
        | {f"inferopt.quality.path.{arm}": path for arm, path in suite.paths.items() if path},
        STEP,
    )
    for line in q_reasons + c_reasons:
        print(f"[gate] {line}")
    tracker.finish(STEP)
    return result
