"""A full disk stops the run loudly with what was kept: the error names the file, the count kept and the fix; the
file holds only complete lines. ENOSPC is injected into the writer (no tiny filesystem is mountable here), and a
tiny results filesystem is also enforced by the kernel itself (RLIMIT_FSIZE in a subprocess: EFBIG mid-line)."""

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


TINY_FS = """
import resource, signal, sys
from inferopt.records import RecordSink, RecordWriteError, RequestRecord
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit a write fails with EFBIG instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), int(sys.argv[2])))
sink = RecordSink(sys.argv[1], fsync=False)
try:
    for i in range(10_000):
        sink.write(RequestRecord(request_id=f"r{i}", outcome="ok", input_len=i))
except RecordWriteError as exc:
    print("STOPPED", sink.written, exc)
    sys.exit(3)
"""


def test_a_tiny_filesystem_enforced_by_the_kernel_stops_the_writer_with_whole_lines(tmp_path: Path) -> None:
    """Not an injected writer: the kernel refuses the bytes past RLIMIT_FSIZE (a results filesystem of 5000
    bytes), mid-line; the sink cuts the torn line back and says what it kept."""
    import subprocess
    import sys

    path = tmp_path / "requests.jsonl"
    proc = subprocess.run(
        [sys.executable, "-c", TINY_FS, str(path), "5000"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    kept = int(proc.stdout.split()[1])
    assert 0 < kept < 10_000 and "fix: free space" in proc.stdout
    text = path.read_text()
    assert len(text.encode()) <= 5000 and text.endswith("\n")
    assert [r.request_id for r in read_records(path)] == [f"r{i}" for i in range(kept)]
