"""Prefect task for step 2 (locate): `inferopt.locate.locate_step` (roofline, KV, op profile, the diagnosis),
logged to `2-locate`.

The op profile pass (hf systems: a few seconds of torch.profiler over one representative prefill and a few
decode steps, separate from the measured run) is on unless `INFEROPT_PROFILE=0` (or off/false/no).
"""

from __future__ import annotations

from prefect import task

from inferopt.config import CandidateConfig
from inferopt.locate import LocateResult, locate_step, profile_enabled
from inferopt.measure import MeasureResult
from tasks.log_steps import log_locate
from tasks.tracking import Tracker

STEP = "2-locate"


@task(name="locate", task_run_name="locate the bottleneck")
def locate_task(candidate: CandidateConfig, measured: MeasureResult, tracker: Tracker) -> LocateResult:
    tracker.child(STEP, tags={"inferopt.step": "locate"})
    result = locate_step(
        candidate,
        measured.phases,
        profile=profile_enabled(),
        server_metrics=measured.run.server_metrics,
        engine_info=measured.run.engine_info,
    )
    log_locate(tracker, result, STEP)
    tracker.finish(STEP)
    return result
