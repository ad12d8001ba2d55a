"""The `point` flow: one point of the search's space, its capacity under the SLO, run by a Prefect worker
(deployment `point/point`; `flows.tune --dispatch workers` submits one flow run per point, tasks/dispatch_points.py).

The worker loads the search's input files from its own checkout (the same path on every node), applies the
`--set` overrides and the point's one change, and refuses (the flow run fails, the search marks the point
failed) when the system it builds differs from the one the search planned — compared redacted, as the
parameters carry no secret. It runs the capacity search (`validate.capacity`) locally and logs the directory,
with `capacity.json` (`validate.capacity_io`), to the point's MLflow child run under `capacity/`, plus where and
when it ran (tags `inferopt.worker.host` / `.pid`, metrics `worker.start_s` / `worker.end_s`).

Deliberately not here: the search, its ranking and the per-point metrics (the parent logs them).
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

from mlflow.entities import Metric, RunTag  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402
from prefect import flow  # noqa: E402

from inferopt.config.models import apply_changes  # noqa: E402
from inferopt.config.precheck import check_tune  # noqa: E402
from inferopt.validate.capacity import CapacityBudget, capacity  # noqa: E402
from inferopt.validate.capacity_io import save_capacity  # noqa: E402
from tasks.dispatch import require_child  # noqa: E402
from tasks.dispatch_points import planned_system  # noqa: E402


def built_system(
    inputs: dict[str, str], overrides: dict[str, Any] | None, change: dict[str, Any] | None, planned: dict[str, Any]
) -> tuple[Any, Any, Any]:
    """The point's (system, workload, slo) from this node's files; ValueError naming what differs from `planned`."""
    cfg = check_tune(inputs, overrides)
    system = apply_changes(cfg.baseline, change) if change else cfg.baseline
    here = planned_system(system)
    if here != planned:
        keys = sorted(k for k in set(here) | set(planned) if here.get(k) != planned.get(k))
        raise ValueError(
            f"point: the system built on {socket.gethostname()} from {inputs['system']} differs from the one the "
            f"search planned in {', '.join(keys)}; fix: the same checkout (and INFEROPT_REPO) on every node"
        )
    return system, cfg.workload, cfg.slo


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)[:60]


@flow(name="point", log_prints=False, validate_parameters=True)
def point_flow(
    inputs: dict[str, str],
    overrides: dict[str, Any] | None,
    change: dict[str, Any] | None,
    planned: dict[str, Any],
    budget: dict[str, Any],
    label: str,
    parent_run_id: str,
    point_run_id: str,
    tracking_uri: str,
    warmup_requests: int = 2,
) -> dict[str, Any]:
    """Run the capacity search of the point `label` and log it to the MLflow run `point_run_id` (a child of
    `parent_run_id`, created by the search) on `tracking_uri`."""
    client = MlflowClient(tracking_uri=tracking_uri)
    require_child(client, point_run_id, parent_run_id, "point_run_id", "pass the run the tune flow made for this point")
    system, workload, slo = built_system(inputs, overrides, change, planned)
    host, start_s = socket.gethostname(), time.time()
    client.log_batch(
        point_run_id, tags=[RunTag("inferopt.worker.host", host), RunTag("inferopt.worker.pid", str(os.getpid()))]
    )
    out = Path(os.environ.get("INFEROPT_RESULTS", "results")) / parent_run_id / f"point-{_slug(label)}" / "worker"
    shutil.rmtree(out, ignore_errors=True)  # a retried flow run starts clean: probes.jsonl is appended to
    cap = capacity(
        system,
        workload,
        slo,
        out,
        budget=CapacityBudget(**budget),
        arm=label,
        run_tag=parent_run_id,
        warmup_requests=warmup_requests,
    )
    save_capacity(cap, out)
    client.log_artifacts(point_run_id, str(out), artifact_path="capacity")
    end_s = time.time()
    ts = int(end_s * 1000)
    metrics = [Metric("worker.start_s", start_s, ts, 0), Metric("worker.end_s", end_s, ts, 0)]
    client.log_batch(point_run_id, metrics=metrics)
    print(f"[point {label} on {host}] {cap.status}: {cap.message}", flush=True)
    return {"label": label, "status": cap.status, "req_per_s": cap.req_per_s, "host": host}
