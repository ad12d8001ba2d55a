"""Prefect task for the final verdict: `inferopt.verdict.judge` (the six steps' evidence, the benchmark-cheat lint
(SPEC V4), `decide`), logged on the parent run: `verdict.json`, `lint.json`, metrics and tags."""

from __future__ import annotations

from prefect import task

from inferopt.ablate import AblationResult
from inferopt.choose import Choice
from inferopt.config import CandidateConfig
from inferopt.gate import GateResult
from inferopt.locate import LocateResult
from inferopt.measure import MeasureResult
from inferopt.validate import ScenarioResult
from inferopt.verdict import Verdict, judge
from tasks.log_steps import log_verdict
from tasks.tracking import Tracker, logged_arms


@task(name="verdict")
def verdict_task(
    candidate: CandidateConfig,
    measured: MeasureResult,
    located: LocateResult,
    choice: Choice,
    ablation: AblationResult,
    scenarios: list[ScenarioResult],
    gate: GateResult,
    tracker: Tracker,
) -> Verdict:
    result = judge(candidate, measured, located, choice, ablation, scenarios, gate, logged_arms(tracker))
    log_verdict(tracker, result)
    return result.verdict
