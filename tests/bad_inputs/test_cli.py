"""Through the real CLI (`python -m flows.optimize`, a fresh process, imports included): a handful of corpus
cases exit with code 2 within seconds, print one message (no traceback) and leave no trace of a run: no
MLflow database or artifact store, no results/, no Prefect database."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from bad_input_cases import CASES, materialize

ROOT = Path(__file__).resolve().parents[2]
CLI_CASES = ["yaml-alias-bomb", "tr-input-negative", "set-no-equals", "hw-gpu-for-cpu-run", "cand-cheat-single-request"]
MAX_S = 30.0  # a few seconds here (imports ~4 s); generous for a loaded 2-core CI box


@pytest.mark.parametrize("case_id", CLI_CASES)
def test_cli_refuses_before_prefect_and_mlflow_start(case_id: str, tmp_path: Path) -> None:
    case = next(c for c in CASES if c.id == case_id)
    work = tmp_path / "cwd"
    cand, sets = materialize(case, tmp_path / "case")
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_", "INFEROPT_RESULTS"))}
    env.update({"PYTHONPATH": str(ROOT), "PREFECT_HOME": str(tmp_path / "prefect-home")})
    argv = [sys.executable, "-m", "flows.optimize", str(cand), *(a for s in sets for a in ("--set", s))]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert elapsed < MAX_S, f"{elapsed:.1f} s"
    assert "Traceback" not in proc.stderr and "fix" in proc.stderr
    assert proc.stdout.strip() == ""  # nothing started, nothing reported
    assert sorted(p.name for p in work.iterdir()) == []  # no mlflow.db, mlruns/, results/
    home = tmp_path / "prefect-home"
    assert not home.exists() or not list(home.rglob("*.db")), "a Prefect database was created"
