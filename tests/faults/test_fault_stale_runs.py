"""A flow SIGKILLed mid-run leaves its MLflow runs RUNNING; the next run that starts marks them (the parent and its
RUNNING children) KILLED with the reason in `inferopt.killed_reason`. A run whose process is alive is left alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tasks.tracking import Tracker

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import sys, time
from tasks.tracking import Tracker
t = Tracker.start("doomed", experiment="stale", results_root=sys.argv[1])
t.child("4-ablate")
print(t.parent_run_id, t.children["4-ablate"], flush=True)
time.sleep(120)
"""


@pytest.mark.slow  # ~18 s here: a subprocess that imports MLflow, and a fresh store
def test_runs_left_running_by_a_killed_flow_are_marked_killed_at_the_next_start(tmp_path: Path, monkeypatch) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "results")], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        parent, child = proc.stdout.readline().split()
    finally:
        proc.kill()  # SIGKILL: the run cannot end itself
        proc.wait(timeout=10)
    client = MlflowClient(tracking_uri=uri)
    assert client.get_run(parent).info.status == "RUNNING"
    alive = Tracker.start("alive", experiment="stale", results_root=tmp_path / "results")
    nxt = Tracker.start("next", experiment="stale", results_root=tmp_path / "results")
    for run_id in (parent, child):
        run = client.get_run(run_id)
        assert run.info.status == "KILLED"
        assert f"process {proc.pid}" in run.data.tags["inferopt.killed_reason"]
        assert "ended without closing the run" in run.data.tags["inferopt.killed_reason"]
    assert client.get_run(alive.parent_run_id).info.status == "RUNNING"  # its process (this one) is alive
    alive.finish()
    nxt.finish()
