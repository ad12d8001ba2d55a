"""The README's main command on the real tiny model (slow): it completes with a verdict and an MLflow run
id, and killing it mid-run leaves every finished request's record on disk."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from inferopt.records import read_records

ROOT = Path(__file__).resolve().parents[2]
SMALL = [
    "--set",
    "workload.num_requests=12",
    "--set",
    "ablation.repeats=2",
    "--set",
    "ablation.max_repeats=null",  # the fixed design at 2 (the default candidate looks from 5 to 15)
    "--set",
    "gate.held_prompts=4",
    "--set",
    "validation.scenarios=[{name: steady, kind: steady, num_requests: 8}, {name: burst, kind: burst, num_requests: 8}]",
]


def _env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
        "INFEROPT_RESULTS": str(tmp_path / "results"),
        "PYTHONUNBUFFERED": "1",
    }


@pytest.mark.slow
def test_main_command_completes_with_verdict(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "flows.optimize", "configs/candidates/batching.yaml", *SMALL],
        cwd=ROOT,
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = next(json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"decision"'))
    run_dir = tmp_path / "results" / summary["mlflow_run_id"]
    verdict = json.loads((run_dir / "verdict.json").read_text())
    # which decision 12 requests x 2 repeats on this box reach is not fixed; that the printed one is the logged one is
    assert summary["decision"] == verdict["decision"] and verdict["reasons"][0].startswith(verdict["decision"].upper())
    assert f"VERDICT: {summary['decision'].upper()}" in proc.stdout
    assert verdict["evidence"]["measure"]["decomposition"]["adds_up"] is True
    assert len(read_records(run_dir / "1-measure" / "requests.jsonl")) == 12 + 2  # + declared warm-up


@pytest.mark.slow
def test_killing_main_command_keeps_finished_records(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "flows.optimize",
            "configs/candidates/batching.yaml",
            "--set",
            "workload.num_requests=400",
        ],
        cwd=ROOT,
        env=_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        found: list[Path] = []
        while time.monotonic() < deadline and proc.poll() is None:
            found = list((tmp_path / "results").glob("*/1-measure/requests.jsonl"))
            if found and found[0].read_text().count("\n") >= 10:
                break
            time.sleep(0.2)
        assert found, "the run never started writing records"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    lines = found[0].read_text().splitlines()
    records = read_records(found[0])
    assert len(records) >= 10 and len(records) >= len(lines) - 1
    assert all(r.outcome in {"ok", "timeout", "rejected", "error"} for r in records)
