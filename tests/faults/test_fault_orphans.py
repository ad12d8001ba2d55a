"""Parent death leaves no server behind: a flow process SIGKILLed while its servers run takes them with it — a
server launched the way every launcher here does (`tied_to_parent`: own process group + parent-death signal),
and the processes a vLLM server spawns (the launcher's watchdog stops its whole group)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]

REPLICA = """
import sys, time
from pathlib import Path
from inferopt.validate.node_failure import ProcessReplica
r = ProcessReplica("r", [sys.executable, "-c", "import time; time.sleep(120)"], 1, Path(sys.argv[1]))
r.start()
print(r.proc.pid, flush=True)
time.sleep(120)
"""

LAUNCHER = """
import os, subprocess, sys, time
sys.path.insert(0, "inferopt/engines/vllm")
import launch  # the vLLM launcher's watchdog, as it runs before vLLM starts
launch._watch_parent(os.getppid(), poll_s=0.1, grace_s=1.0)
stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
worker = subprocess.Popen([sys.executable, "-c", stubborn])
print(worker.pid, flush=True)
time.sleep(120)
"""

FLOW = """
import subprocess, sys, time
cmd = [sys.executable, "-c", sys.argv[1]]
server = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
print(server.pid, server.stdout.readline().strip(), flush=True)
time.sleep(120)
"""


def _gone(pids: list[int], within_s: float) -> list[int]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return []
        time.sleep(0.1)
    return alive


def _kill_all(pids: list[int]) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_a_launched_server_dies_with_its_sigkilled_parent(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", REPLICA, str(tmp_path / "r.log")], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    server = int(parent.stdout.readline())
    assert psutil.pid_exists(server)
    parent.kill()  # SIGKILL: no clean-up runs in the parent
    parent.wait(timeout=10)
    left = _gone([server], within_s=5.0)
    _kill_all(left)
    assert not left, f"orphaned server {left} outlived its parent"


def test_the_vllm_launcher_stops_its_whole_group_when_the_flow_is_killed() -> None:
    flow = subprocess.Popen([sys.executable, "-c", FLOW, LAUNCHER], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    launcher, worker = (int(x) for x in flow.stdout.readline().split())
    flow.kill()
    flow.wait(timeout=10)
    left = _gone([launcher, worker], within_s=8.0)  # SIGTERM, then SIGKILL after the 1 s grace (worker ignores TERM)
    _kill_all(left)
    assert not left, f"orphaned {left} outlived the flow"
