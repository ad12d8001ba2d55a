"""A full disk (ENOSPC injected into the record writer: no tiny filesystem is mountable here) stops the run loudly
with what was kept: the error names the file, the count kept and the fix; the file holds only complete lines."""

from __future__ import annotations

from pathlib import Path

import faultkit
import pytest

from inferopt.records import RecordSink, RecordWriteError, RequestRecord, read_records


def test_a_full_disk_cuts_back_to_complete_lines_and_every_later_write_raises(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    sink = RecordSink(path, write_bytes=faultkit.enospc_after(3))  # the 4th write tears its line, then ENOSPC
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
    out = faultkit.disk_full(tmp_path, fill_after=40)  # 2000 requests at 200/s: it stops, it does not run 10 s
    assert out.survived and out.records_lost == 0, out.detail
    assert "Kept: 40 finished records" in out.detail
