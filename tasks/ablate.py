"""Prefect task for step 4 (ablate): `inferopt.ablate.ablate` — interleaved trials of every arm, effects with
CIs — logged to `4-ablate` with a child run per arm (baseline, the A/A arm, each single change, the candidate;
skipped arms too), the looks of the sequential test, the interaction table and the verdicts."""

from __future__ import annotations

from pathlib import Path

from prefect import task

from inferopt.ablate import AblationResult, ablate
from inferopt.config import CandidateConfig
from tasks.dispatch import run_arms_on_workers
from tasks.log_steps import log_ablation, trial_logger
from tasks.tracking import Tracker

STEP = "4-ablate"


@task(name="ablate", task_run_name="ablate baseline vs arms")
def ablate_task(candidate: CandidateConfig, tracker: Tracker, resume_from: Path | None = None) -> AblationResult:
    """`resume_from`: the `trials/` folder of a killed attempt of this run; its finished trials are loaded."""
    tracker.child(STEP, tags={"inferopt.step": "ablate"})
    tracker.params(candidate.ablation.model_dump(mode="json"), STEP)
    run_trial = None
    if candidate.ablation.dispatch == "workers":  # each arm on a Prefect worker; the statistics stay here
        run_trial = run_arms_on_workers(candidate, tracker)
    result = ablate(
        candidate,
        tracker.dir_for(STEP),
        run_tag=tracker.parent_run_id,
        on_trial=trial_logger(tracker),
        run_trial=run_trial,
        resume_from=resume_from,
    )
    if resume_from is not None:
        tracker.tags({"inferopt.ablate.resumed_trials": str(len(result.resumed))}, STEP)
        print(f"[ablate] resumed: {len(result.resumed)} finished trials loaded from {resume_from}", flush=True)
    log_ablation(tracker, result, STEP)
    tracker.finish(STEP)
    return result
