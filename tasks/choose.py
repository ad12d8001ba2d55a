"""Prefect task for step 3 (choose): `inferopt.choose.choose` — does the candidate's change serve the located
cause? — logged to `3-choose` (`choice.json`, a loud warning when it does not)."""

from __future__ import annotations

from prefect import task

from inferopt.choose import Choice, choose
from inferopt.config import CandidateConfig
from inferopt.locate import LocateResult
from tasks.log_steps import log_choice
from tasks.tracking import Tracker

STEP = "3-choose"


@task(name="choose", task_run_name="choose: does the candidate match the cause?")
def choose_task(candidate: CandidateConfig, located: LocateResult, tracker: Tracker) -> Choice:
    tracker.child(STEP, tags={"inferopt.step": "choose"})
    choice = choose(located.diagnosis.cause, dict(candidate.changes))
    log_choice(tracker, choice, STEP)
    tracker.finish(STEP)
    return choice
