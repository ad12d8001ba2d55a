"""A full disk (ENOSPC injected into the record writer: no tiny filesystem is mountable here) stops the run loudly
with what was kept: the error names the file, the count kept and the fix; the file holds only complete lines."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import pytest

from inferopt.config import ConstantArrivals, FakeSystem, WorkloadConfig
from inferopt.measure.runner import RunTags
from inferopt.measure.session import run_system
from inferopt.records import RecordSink, RecordWriteError, RequestRecord, read_records
from inferopt.workload import build_workload


def full_after(n_ok: int):
    """`os.write` that fills the disk after `n_ok` writes: the next one writes half its bytes, then ENOSPC."""
    state = {"calls": 0, "half_done": False}

    def write(fd: int, data: bytes) -> int:
        state["calls"] += 1
        if state["calls"] <= n_ok:
            return os.write(fd, data)
        if not state["half_done"]:
            state["half_done"] = True
            return os.write(fd, data[: len(data) // 2])  # a torn line on disk...
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # ...then the disk is full

    return write


def test_a_full_disk_cuts_back_to_complete_lines_and_every_later_write_raises(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    sink = RecordSink(path, write_bytes=full_after(3))
    for i in range(3):
        sink.write(RequestRecord(request_id=f"r{i}", outcome="ok"))
    with pytest.raises(RecordWriteError, match=r"requests.jsonl: writing request records failed .*Kept: 3 .*fix: free"):
        sink.write(RequestRecord(request_id="r3", outcome="ok"))
    with pytest.raises(RecordWriteError):
        sink.write(RequestRecord(request_id="r4", outcome="ok"))
    sink.close()
    lines = path.read_text().splitlines(keepends=True)
    assert len(lines) == 3 and all(line.endswith("\n") for line in lines)
    assert [r.request_id for r in read_records(path)] == ["r0", "r1", "r2"]


def test_a_run_whose_disk_fills_stops_loudly_instead_of_dropping_records(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    table = build_workload(WorkloadConfig(name="d", num_requests=2000, arrival=ConstantArrivals(rate_per_s=200)))
    t0 = time.monotonic()
    with pytest.raises(RecordWriteError, match=r"Kept: 40 finished records"):
        run_system(
            FakeSystem(decode_step_ms=0.5),
            table,
            RunTags(arm="x"),
            timeout_s=5,
            records_path=path,
            open_sink=lambda p: RecordSink(p, write_bytes=full_after(40)),
        )
    assert time.monotonic() - t0 < 8, "the run stops when the disk fills, not after all 2000 requests (10 s)"
    records = read_records(path)
    assert len(records) == 40 and len(path.read_text().splitlines()) == 40  # no torn line, none silently lost
