"""Bad input to the search (`python -m flows.tune`, a fresh process): a budget too small, a workload or SLO
field out of range, a malformed or unknown `--set`, a knob the engine does not have — each exits 2 within
seconds with one message naming the file or flag and the fix, and nothing starts: no MLflow database, no
results/, no Prefect database."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
INPUTS = [
    str(ROOT / "configs/systems/fake.yaml"),
    "--workload",
    str(ROOT / "configs/workloads/fake-small.yaml"),
    "--slo",
    str(ROOT / "configs/slo/fake.yaml"),
    "--hardware",
    str(ROOT / "configs/hardware/cpu.yaml"),
]
CASES = {  # id: (extra argv, words the message must hold)
    "budget-one-trial": (["--budget", "1"], ["max_trials=1", "--budget 1", "fix:"]),
    "workload-rate-negative": (["--set", "workload.arrival.rate_per_s=-2"], ["fake-small.yaml", "--set workload."]),
    "set-without-part": (["--set", "num_requests=4"], ["prefix it with the file it sets", "fix:"]),
    "space-unknown-knob": (["--space", "max_num_seqs=8,16"], ["no field 'max_num_seqs'", "its fields there"]),
}
MAX_S = 30.0  # a few seconds here (imports ~4 s); generous for a loaded 2-core box


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_tune_refuses_before_prefect_and_mlflow_start(case_id: str, tmp_path: Path) -> None:
    extra, words = CASES[case_id]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_", "INFEROPT_RESULTS"))}
    env.update({"PYTHONPATH": str(ROOT), "PREFECT_HOME": str(tmp_path / "prefect-home")})
    work = tmp_path / "cwd"
    work.mkdir()
    t0 = time.perf_counter()
    argv = [sys.executable, "-m", "flows.tune", *INPUTS, *extra]
    proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert time.perf_counter() - t0 < MAX_S
    assert "Traceback" not in proc.stderr and all(w in proc.stderr for w in words), proc.stderr
    assert proc.stdout.strip() == "" and sorted(p.name for p in work.iterdir()) == []
    home = tmp_path / "prefect-home"
    assert not home.exists() or not list(home.rglob("*.db")), "a Prefect database was created"
