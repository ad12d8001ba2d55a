"""Servers we launch die with us: `tied_to_parent()` is the Popen keywords that give a server its own process group
(`start_new_session`, so `os.killpg` stops its whole tree) and, on Linux, the parent-death signal
(`prctl(PR_SET_PDEATHSIG)` through ctypes, set between fork and exec), so a SIGKILLed flow leaves no vLLM,
nginx or replica server behind. The kernel sends the signal when the *thread* that started the child ends:
every launcher here starts and stops its server within one call on one thread (`run_system`, a scenario).

Deliberately not here: stopping a server (each launcher's `stop`), the vLLM launcher's own watchdog for the
processes vLLM spawns (`inferopt/engines/vllm/launch.py`).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

PR_SET_PDEATHSIG = 1
# resolved once, before any fork: the child between fork and exec must not load libraries (locks)
_PRCTL: Any = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def _die_with(parent_pid: int, sig: int) -> Callable[[], None]:
    def preexec() -> None:  # runs in the child between fork and exec
        if _PRCTL is not None:
            _PRCTL(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before the signal was armed
            os.kill(os.getpid(), sig)

    return preexec


def tied_to_parent(sig: int = signal.SIGTERM) -> dict[str, Any]:
    """Popen keywords: own process group, and `sig` (SIGTERM: a server may still stop its own workers) when
    this process dies. Elsewhere than Linux only the process group."""
    return {"start_new_session": True, "preexec_fn": _die_with(os.getpid(), sig)}
