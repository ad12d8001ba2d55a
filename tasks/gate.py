"""Prefect task for step 6 (gate): `inferopt.gate.gate` (the sliced quality suite with paired CIs, output drift,
cost per successful task), logged to the `6-gate` child run. `gate.json` and the `inferopt.quality.path.<arm>`
tags say how each arm was evaluated (served / in-memory / in-memory proxy)."""

from __future__ import annotations

from prefect import task

from inferopt.ablate import AblationResult
from inferopt.choose import Choice
from inferopt.config import CandidateConfig
from inferopt.gate import GateResult, gate
from inferopt.locate import LocateResult
from tasks.log_steps import log_gate
from tasks.tracking import Tracker

STEP = "6-gate"


@task(name="gate", task_run_name="quality and cost gate")
def gate_task(
    candidate: CandidateConfig, ablation: AblationResult, located: LocateResult, choice: Choice, tracker: Tracker
) -> GateResult:
    tracker.child(STEP, tags={"inferopt.step": "gate"})
    result = gate(candidate, ablation, located, choice)
    log_gate(tracker, result, STEP)
    tracker.finish(STEP)
    return result
