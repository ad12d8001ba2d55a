"""The flow CLI's reaper: a small process that outlives a SIGKILLed flow and stops what the flow had started.

    python -m flows.reaper <pid>        # started by `start_reaper()` in each flow's main, in its own session

Our own launchers tie their servers to the flow (`inferopt.transport.lifetime`), but a library may start
processes of its own — Prefect's ephemeral API server (uvicorn) is one — that would outlive a SIGKILL. The
reaper notes the flow's descendants every `poll_s`; once the flow is gone it SIGTERMs those still running
(psutil checks each is the same process, not a reused pid), and SIGKILLs what is left after `grace_s`.

Deliberately not here: stopping servers on a normal exit (each launcher's own `stop`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil


def watch(pid: int, poll_s: float = 0.5, grace_s: float = 5.0) -> list[int]:
    """Block until `pid` ends, then stop its last-seen descendants; returns the pids it had to stop."""
    try:
        flow = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return []
    seen: list[psutil.Process] = []
    while True:
        try:
            if flow.status() == psutil.STATUS_ZOMBIE:
                break
            seen = [p for p in flow.children(recursive=True) if p.pid != os.getpid()]
        except psutil.NoSuchProcess:
            break
        time.sleep(poll_s)
    left = [p for p in seen if p.is_running()]
    for p in left:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _gone, stubborn = psutil.wait_procs(left, timeout=grace_s)
    for p in stubborn:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    return [p.pid for p in left]


def start_reaper() -> subprocess.Popen:
    """Start the reaper for this process (own session: a signal to the flow's process group spares it)."""
    return subprocess.Popen(
        [sys.executable, "-m", "flows.reaper", str(os.getpid())],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )


if __name__ == "__main__":
    watch(int(sys.argv[1]))
