"""The `arm` flow: one arm of one candidate's ablation, run by a Prefect worker (deployment `arm/arm`).

With `ablation.dispatch: workers` the `optimize` flow submits one `arm` flow run per arm to the work pool
(`tasks/dispatch.py`); each worker — one per GPU node — starts that arm's engine locally, runs every planned
repeat (`inferopt.ablate.dispatch.run_arm_trials`) and logs the trial files to the arm's MLflow child run,
which the parent created under its own run. The parent downloads them and runs the statistics, so every arm
lands under one MLflow parent run whichever node ran it.

The arm's MLflow run gets where and when it ran: tags `inferopt.worker.host` / `.pid`, metrics
`worker.start_s` / `worker.end_s` (epoch seconds) and the trial files under `trials/`.

Deliberately not here: the statistics and the per-trial metrics (the parent logs both, as for inline arms).
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

from mlflow.entities import Metric, RunTag  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402
from prefect import flow  # noqa: E402

from inferopt.ablate.dispatch import run_arm_trials, trial_config  # noqa: E402
from tasks.dispatch import require_child  # noqa: E402


@flow(name="arm", log_prints=False, validate_parameters=True)
def arm_flow(
    config: dict[str, Any], arm: str, parent_run_id: str, arm_run_id: str, tracking_uri: str, repeats: int | None = None
) -> dict[str, Any]:
    """Run every planned repeat of `arm` of the resolved candidate `config` and log the trial files to the
    MLflow run `arm_run_id` (a child of `parent_run_id`) on `tracking_uri`."""
    cfg = trial_config(config)
    client = MlflowClient(tracking_uri=tracking_uri)
    require_child(client, arm_run_id, parent_run_id, "arm_run_id", f"pass the run the optimize flow made for arm-{arm}")
    out = Path(os.environ.get("INFEROPT_RESULTS", "results")) / parent_run_id / f"arm-{arm}" / "worker"
    host = socket.gethostname()
    client.log_batch(
        arm_run_id, tags=[RunTag("inferopt.worker.host", host), RunTag("inferopt.worker.pid", str(os.getpid()))]
    )

    def on_trial(trial: Any, run: Any) -> None:
        print(
            f"[arm {arm} on {host}] repeat {trial.repeat}: "
            + (f"FAILED {(run.error or '').splitlines()[0]}" if run.failed else f"{run.duration_s:.1f} s"),
            flush=True,
        )

    _runs, window = run_arm_trials(cfg, arm, out, run_tag=parent_run_id, on_trial=on_trial, repeats=repeats)
    client.log_artifacts(arm_run_id, str(out), artifact_path="trials")
    ts = int(window.end_s * 1000)
    client.log_batch(
        arm_run_id,
        metrics=[
            Metric("worker.start_s", window.start_s, ts, 0),
            Metric("worker.end_s", window.end_s, ts, 0),
            Metric("worker.trials", float(window.trials), ts, 0),
        ],
    )
    # a crashed trial is a result (the parent marks the arm failed and goes on), not a failed flow run
    return {
        "arm": arm,
        "trials": window.trials,
        "failed": window.failed,
        "window": json.loads(json.dumps(vars(window))),
    }
