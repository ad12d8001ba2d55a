"""`ablation.dispatch: workers`: submit each arm of the ablation as a flow run of the arm deployment
(`flows/arm.py`) on a Prefect work pool, wait for all of them, and fetch their trial files back from MLflow.

All arms are submitted at once (`run_deployment(..., timeout=0)`), so with one worker per node they run in
parallel; then the runs are polled until each is final or `ablation.dispatch_timeout_s` passes (late ones are
cancelled). An engine that crashes inside an arm's flow run is a failed trial, reported like an inline crash
(the flow run itself completes). A flow run that does not complete — no worker came, the timeout passed, the
worker died, its files cannot be fetched — says nothing about the option: the step raises `ArmDispatchError`
naming each such arm's flow run and state (the optimize flow run fails), rather than calling the option failed.

Each arm's MLflow child run (`arm-<name>`) is created here, under the parent, before submission, so the
worker logs into the same run the parent later finishes.

Deliberately not here: running trials (the arm flow) and statistics (`inferopt.ablate.run`).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from inferopt.ablate.dispatch import TRIAL_SECTIONS, PrecomputedTrials
from inferopt.ablate.plan import plan_arms
from inferopt.config import CandidateConfig
from tasks.tracking import Tracker


class ArmDispatchError(RuntimeError):
    """An arm's flow run did not complete on a worker (no worker, timeout, worker died, files unreachable)."""


def run_arms_on_workers(candidate: CandidateConfig, tracker: Tracker, poll_s: float = 2.0) -> PrecomputedTrials:
    """Run every arm of `candidate` on the work pool behind `ablation.arm_deployment`; their trials, ready for
    `ablate(..., run_trial=...)`."""
    from prefect.client.schemas.objects import StateType
    from prefect.deployments import run_deployment

    settings = candidate.ablation
    config = {k: v for k, v in candidate.model_dump(mode="json").items() if k in TRIAL_SECTIONS}
    submitted: dict[str, tuple[str, str]] = {}  # arm -> (flow run id, mlflow arm run id)
    for arm in plan_arms(candidate):
        arm_run = tracker.child(
            f"arm-{arm.name}",
            tags={"inferopt.step": "ablate", "inferopt.arm": arm.name, "inferopt.dispatch": "workers"},
        )
        fr = run_deployment(
            settings.arm_deployment,
            timeout=0,
            flow_run_name=f"{candidate.name}:{arm.name}",
            parameters={
                "config": config,
                "arm": arm.name,
                "parent_run_id": tracker.parent_run_id,
                "arm_run_id": arm_run,
                "tracking_uri": tracker.uri,
            },
        )
        submitted[arm.name] = (str(fr.id), arm_run)
        tracker.tags({"inferopt.prefect_flow_run": str(fr.id)}, f"arm-{arm.name}")
        print(f"[ablate] arm {arm.name}: submitted to {settings.arm_deployment} as flow run {fr.id}", flush=True)

    ids = {name: fr_id for name, (fr_id, _) in submitted.items()}
    done = wait_for_flow_runs(ids, settings.arm_deployment, settings.dispatch_timeout_s, poll_s, "ablate")
    final = {name: state for name, (state, _) in done.items()}
    messages = {name: message for name, (_, message) in done.items()}

    fetched = Path(tempfile.mkdtemp(prefix=f"inferopt-arms-{tracker.parent_run_id[:8]}-"))
    arm_dirs: dict[str, Path] = {}
    missing: dict[str, str] = {}
    for name, (fr_id, arm_run) in submitted.items():
        why = f"flow run {fr_id} of {settings.arm_deployment} ended {final[name]} ({messages[name]})"
        if final[name] != StateType.COMPLETED.value:
            missing[name] = why
            continue
        try:
            arm_dirs[name] = Path(tracker.client.download_artifacts(arm_run, "trials", str(fetched / name)))
        except Exception as exc:  # noqa: BLE001 - reported with the others below
            missing[name] = f"{why}, but its trial files could not be fetched: {type(exc).__name__}: {exc}"
    if missing:
        for name, why in missing.items():
            tracker.tags({"inferopt.dispatch_error": why}, f"arm-{name}")
            tracker.finish(f"arm-{name}", status="FAILED")
        raise ArmDispatchError(
            "arms that did not come back from the workers (infrastructure, not evidence about "
            "the option; the finished arms' trials are in their MLflow runs):\n  "
            + "\n  ".join(f"{n}: {w}" for n, w in missing.items())
        )
    return PrecomputedTrials(arm_dirs)


def wait_for_flow_runs(
    flow_runs: dict[str, str], deployment: str, timeout_s: float, poll_s: float, step: str
) -> dict[str, tuple[str, str]]:
    """Poll each submitted flow run ({name: flow run id}) until it is final or `timeout_s` passes (then the late
    ones are cancelled, state "TIMEOUT"); {name: (final state type, "state name: message")}. Warns when no
    worker of the deployment's pool is online (the runs wait in the pool until one comes)."""
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelling

    deadline = time.monotonic() + timeout_s
    final: dict[str, tuple[str, str]] = {}
    with get_client(sync_client=True) as client:
        pool, online = online_workers(client, deployment)
        if not online:
            print(
                f"[{step}] WARNING: no worker online in work pool {pool!r}; start one per node: "
                f"prefect worker start --pool {pool} --limit 1",
                flush=True,
            )
        while len(final) < len(flow_runs):
            for name, fr_id in flow_runs.items():
                state = None if name in final else client.read_flow_run(fr_id).state
                if state is not None and state.is_final():
                    final[name] = (state.type.value, f"{state.name}: {state.message or ''}".strip())
                    print(f"[{step}] {name}: flow run {fr_id} {state.name}", flush=True)
            if len(final) < len(flow_runs) and time.monotonic() > deadline:
                for name, fr_id in flow_runs.items():
                    if name not in final:
                        why = "inferopt: dispatch_timeout_s passed"
                        client.set_flow_run_state(fr_id, Cancelling(message=why), force=True)
                        final[name] = ("TIMEOUT", f"not final after dispatch_timeout_s = {timeout_s:g} s (cancelled)")
                break
            if len(final) < len(flow_runs):
                time.sleep(poll_s)
    return final


def online_workers(client: Any, deployment: str) -> tuple[str | None, int]:
    """(the work pool behind `deployment`, how many of its workers are online now)."""
    pool = client.read_deployment_by_name(deployment).work_pool_name
    if not pool:
        return None, 0
    workers = client.read_workers_for_work_pool(pool)
    return pool, sum(1 for w in workers if str(w.status).upper().endswith("ONLINE"))


def require_child(client: Any, run_id: str, parent_run_id: str, what: str, fix: str) -> None:
    """ValueError unless the MLflow run `run_id` (`what`, e.g. "arm_run_id") is a child of `parent_run_id`: a
    worker logs only into the run its controller created for it."""
    parent_tag = client.get_run(run_id).data.tags.get("mlflow.parentRunId")
    if parent_tag != parent_run_id:
        raise ValueError(
            f"{what} {run_id} is not a child of parent_run_id {parent_run_id} (its parent: {parent_tag}); fix: {fix}"
        )
