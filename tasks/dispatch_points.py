"""`flows.tune --dispatch workers`: run the search's points as flow runs of the point deployment (`flows/point.py`)
on a Prefect work pool, a wave at a time, and fetch each point's capacity search back from MLflow.

A wave's points are submitted at once (`run_deployment(..., timeout=0)`), so with one worker per node they run
in parallel, then polled until final (`dispatch.wait_for_flow_runs`). The parameters carry no secret: the
search's input files (the same checkout on every node) with the `--set` overrides, and the one change the point
makes; the worker loads them itself and refuses to run when what it builds differs from the point the search
planned (compared redacted). Each point's MLflow child run (`point-NN`) is created here, before submission, so
the worker's files and the search's metrics land in one run. A point whose flow run does not complete (no
worker, timeout, worker died, files unreachable) gets a failed capacity that says so — infrastructure, not
evidence about the option — and the search goes on with the others.

Deliberately not here: the search (`inferopt.choose.search`) and the capacity search itself (the point flow).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from inferopt.choose.points import PointJob, PointRunner
from inferopt.config.redact import redacted
from inferopt.validate.capacity import CapacityBudget, CapacityResult
from inferopt.validate.capacity_io import load_capacity
from tasks.dispatch import wait_for_flow_runs
from tasks.tracking import Tracker


@dataclass(frozen=True)
class PointDispatch:
    """Where and how points run: the deployment, the search's input files and overrides, the capacity budget."""

    deployment: str
    inputs: dict[str, str]  # system, workload, slo, hardware: paths in the checkout every node shares
    overrides: dict[str, Any] | None
    budget: CapacityBudget
    warmup_requests: int = 2
    timeout_s: float = 3600.0
    poll_s: float = 2.0


def planned_system(system: Any) -> Any:
    """A system as the worker compares it: its JSON form, secrets redacted."""
    return json.loads(json.dumps(redacted(system.model_dump(mode="json")), default=str))


def point_runner(d: PointDispatch, tracker: Tracker) -> PointRunner:
    """The search's `run_points`: each call is one wave on the workers."""
    return lambda jobs: run_points_on_workers(jobs, d, tracker)


def run_points_on_workers(jobs: Sequence[PointJob], d: PointDispatch, tracker: Tracker) -> list[CapacityResult]:
    """Submit every job, wait for all, fetch each one's capacity search into its `out_dir`; results in order."""
    from prefect.deployments import run_deployment

    submitted: dict[str, tuple[str, str, PointJob]] = {}  # child run name -> (flow run id, mlflow run id, job)
    for job in jobs:
        name = f"point-{job.index:02d}"
        tags = {"inferopt.step": "tune", "inferopt.point": job.label, "inferopt.dispatch": "workers"}
        run_id = tracker.child(name, tags=tags)
        fr = run_deployment(
            d.deployment,
            timeout=0,
            flow_run_name=f"tune-{tracker.parent_run_id[:8]}:{job.label}",
            parameters={
                "inputs": d.inputs,
                "overrides": d.overrides,
                "change": job.change,
                "planned": planned_system(job.system),
                "budget": asdict(d.budget),
                "label": job.label,
                "warmup_requests": d.warmup_requests,
                "parent_run_id": tracker.parent_run_id,
                "point_run_id": run_id,
                "tracking_uri": tracker.uri,
            },
        )
        submitted[name] = (str(fr.id), run_id, job)
        tracker.tags({"inferopt.prefect_flow_run": str(fr.id)}, name)
        print(f"[tune] {name} {job.label}: submitted to {d.deployment} as flow run {fr.id}", flush=True)
    ids = {name: fr_id for name, (fr_id, _, _) in submitted.items()}
    final = wait_for_flow_runs(ids, d.deployment, d.timeout_s, d.poll_s, "tune")
    return [_fetch(tracker, name, *submitted[name], final[name], d.deployment) for name in submitted]


def _fetch(
    tracker: Tracker, name: str, fr_id: str, run_id: str, job: PointJob, final: tuple[str, str], deployment: str
) -> CapacityResult:
    state, message = final
    why = f"flow run {fr_id} of {deployment} ended {state} ({message})"
    if state == "COMPLETED":
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f"inferopt-point-{job.index:02d}-"))
            got = Path(tracker.client.download_artifacts(run_id, "capacity", str(tmp)))
            if job.out_dir.exists():
                shutil.rmtree(job.out_dir)
            job.out_dir.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(got), job.out_dir)
            return load_capacity(job.out_dir)
        except Exception as exc:  # noqa: BLE001 - the point is reported failed, the search goes on
            why += f", but its capacity files could not be fetched: {type(exc).__name__}: {exc}"
    tracker.tags({"inferopt.dispatch_error": why[:4000]}, name)
    print(f"[tune] {name} {job.label}: {why}", flush=True)
    return CapacityResult(
        status="failed",
        req_per_s=float("nan"),
        lo_req_per_s=None,
        hi_req_per_s=None,
        message=f"dispatch: {why} — infrastructure, not evidence about the option",
        probes=(),
    )
