"""Killing a run mid-way (SIGKILL, no clean-up) leaves every finished request's record on disk."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from inferopt.records import read_records

SCRIPT = """
import sys
from inferopt.config import ConstantArrivals, FakeSystem, WorkloadConfig
from inferopt.measure.runner import RunTags
from inferopt.measure.session import run_system
from inferopt.workload import build_workload
table = build_workload(WorkloadConfig(name="k", num_requests=100000, arrival=ConstantArrivals(rate_per_s=300)))
run_system(FakeSystem(decode_step_ms=1.0), table, RunTags(arm="x"), timeout_s=5, records_path=sys.argv[1])
"""


def test_sigkill_keeps_finished_records(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(path)])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if path.exists() and path.read_text().count("\n") >= 100:
                break
            time.sleep(0.05)
        proc.kill()
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = path.read_text().splitlines()
    records = read_records(path)
    assert len(records) >= 100
    assert len(records) >= len(lines) - 1  # at most a torn last line
    assert len({r.request_id for r in records}) == len(records)
    assert all(r.outcome in {"ok", "timeout", "rejected", "error"} for r in records)
    assert all(r.client_done_s and r.intended_s for r in records)
