"""Scale-out: two process workers on one machine (`prefect worker start --pool arms --limit 1`, twice) run the
two arms of one candidate in parallel (`ablation.dispatch: workers`), and both arms land under one MLflow
parent run; the same two workers run the search's points (`flows.tune --dispatch workers`), two at a time, each
into its own `point-NN` child run. The flows run here, against the same local Prefect server (`local_prefect`).

Parallel is shown, not assumed: each arm's run records its own process and wall-clock window (worker.start_s /
worker.end_s, written by the flow run on the worker); the two windows must overlap and the pids differ.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]  # the server start and deploy count too

# one change and no A/A arm: exactly two arms (baseline, candidate). Trials of ~5 s (250 requests at 50/s)
# so that each arm outlasts a worker's pick-up and start of its flow run (seconds here).
OVERRIDES = {
    "changes": {"batching.max_batch_size": 8},
    "ablation.aa_arm": False,
    "ablation.repeats": 3,
    "ablation.dispatch": "workers",
    "ablation.num_requests": 250,
    "workload.arrival.rate_per_s": 50.0,
    "ablation.dispatch_timeout_s": 600,
}


def test_two_workers_run_two_arms_in_parallel_into_one_parent(local_prefect, monkeypatch, tmp_path) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.optimize import optimize

    lp = local_prefect
    monkeypatch.chdir(lp.env["INFEROPT_REPO"])
    for key in ("MLFLOW_TRACKING_URI", "INFEROPT_RESULTS"):
        monkeypatch.setenv(key, lp.env[key])
    lp.start_worker("arms", limit=1, name="node-a")
    lp.start_worker("arms", limit=1, name="node-b")
    try:
        with temporary_settings({PREFECT_API_URL: lp.url}):
            result = optimize(candidate="configs/candidates/fake-batching.yaml", overrides=OVERRIDES)
    finally:
        logs = lp.worker_logs()
        lp.stop_workers()

    client = MlflowClient(tracking_uri=lp.env["MLFLOW_TRACKING_URI"])
    parent = client.get_run(result["run_id"])
    assert parent.info.status == "FINISHED", logs
    children = client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{result['run_id']}'"
    )
    arms = {c.info.run_name: c for c in children if c.info.run_name.startswith("arm-")}
    assert set(arms) == {"arm-baseline", "arm-candidate"}, logs
    for run in arms.values():
        assert run.data.tags["inferopt.dispatch"] == "workers"
        assert run.info.status == "FINISHED", logs
        assert run.data.metrics["worker.trials"] == 3
        assert len(client.get_metric_history(run.info.run_id, "ttft_ms_p99")) == 3  # the parent logged each trial
        assert {a.path for a in client.list_artifacts(run.info.run_id, "trials")} >= {
            "trials/trial-0",
            "trials/window.json",
        }
    a, b = (arms[n].data for n in ("arm-baseline", "arm-candidate"))
    assert a.tags["inferopt.worker.pid"] != b.tags["inferopt.worker.pid"]
    overlap_s = min(a.metrics["worker.end_s"], b.metrics["worker.end_s"]) - max(
        a.metrics["worker.start_s"], b.metrics["worker.start_s"]
    )
    assert overlap_s > 0, (a.metrics, b.metrics, logs)
    # the statistics ran in the parent on the workers' trials: batching improves the queue-bound fake load
    verdicts = {c.info.run_name: c.data.tags.get("inferopt.arm_verdict") for c in children}
    assert verdicts["arm-candidate"] == "improves", logs


def test_two_workers_run_the_search_points_in_parallel(local_prefect, monkeypatch, tmp_path) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from test_tune_flow import write_inputs

    from flows.tune import tune

    lp = local_prefect
    monkeypatch.chdir(lp.env["INFEROPT_REPO"])
    for key in ("MLFLOW_TRACKING_URI", "INFEROPT_RESULTS"):
        monkeypatch.setenv(key, lp.env[key])
    paths = write_inputs(tmp_path / "in")  # a queue-bound fake system; its batch sizes are the points
    lp.start_worker("arms", limit=1, name="node-a")
    lp.start_worker("arms", limit=1, name="node-b")
    try:
        with temporary_settings({PREFECT_API_URL: lp.url}):
            _both_online("point/point")  # else the first wave can go to the one worker up yet, in turn
            result = tune(
                **paths,
                budget=3,
                capacity={"max_probes": 5, "rel_tol": 0.2},
                overrides={"workload.num_requests": 480},  # ~3 s probes: each point outlasts a pick-up
                judge=0,
                dispatch="workers",
                parallel=2,
                experiment="test-tune-workers",  # the deployment test counts the optimize runs of its own
            )
    finally:
        logs = lp.worker_logs()
        lp.stop_workers()

    client = MlflowClient(tracking_uri=lp.env["MLFLOW_TRACKING_URI"])
    parent = client.get_run(result["run_id"])
    assert parent.info.status == "FINISHED" and result["decision"] in ("winner", "tie"), (result["message"], logs)
    children = client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{result['run_id']}'"
    )
    points = {c.info.run_name: c for c in children if c.info.run_name.startswith("point-")}
    assert set(points) == {"point-00", "point-01", "point-02"}, logs
    for run in points.values():  # the worker's files and the parent's metrics in one run
        assert run.data.tags["inferopt.dispatch"] == "workers" and run.info.status == "FINISHED", logs
        assert run.data.metrics["capacity.req_per_s"] > 0, run.data.tags.get("inferopt.capacity_message")
        assert "capacity/capacity.json" in {a.path for a in client.list_artifacts(run.info.run_id, "capacity")}
    a, b = (points[n].data for n in ("point-01", "point-02"))  # one wave of two
    assert a.tags["inferopt.worker.pid"] != b.tags["inferopt.worker.pid"]
    overlap_s = min(a.metrics["worker.end_s"], b.metrics["worker.end_s"]) - max(
        a.metrics["worker.start_s"], b.metrics["worker.start_s"]
    )
    assert overlap_s > 0, (a.metrics, b.metrics, logs)
    # the workers built the points with the override applied: 480 requests a probe, not the file's 40
    probes = pd.read_parquet(Path(lp.env["INFEROPT_RESULTS"]) / result["run_id"] / "point-01" / "probes.parquet")
    assert (probes["requests"] >= 400).all(), probes["requests"]  # (less the warm-up requests)


def _both_online(deployment: str, timeout_s: float = 180.0) -> None:
    import time

    from prefect.client.orchestration import get_client

    from tasks.dispatch import online_workers

    deadline = time.monotonic() + timeout_s
    with get_client(sync_client=True) as client:
        while online_workers(client, deployment)[1] < 2:
            assert time.monotonic() < deadline, "two workers did not come online"
            time.sleep(1.0)
