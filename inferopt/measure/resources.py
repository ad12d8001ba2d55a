"""Process resource usage around a piece of work (issue 4, item 4, the CPU side): resident memory and
CPU time, from the standard library only (`resource.getrusage` and `/proc/self/statm`; no psutil).

    before = process_usage(); ...work...; delta = usage_delta(before, process_usage())

`usage_delta` gives: wall_s, cpu_user_s, cpu_sys_s, cpu_s and cpu_util (CPU seconds per wall second: 1.0 =
one core busy; all of the process's threads together), rss_bytes_before / rss_bytes_after (resident set now,
from /proc/self/statm; None where /proc is missing) and rss_peak_bytes (ru_maxrss: the process's peak
since it started, not the window's — a later, smaller arm cannot lower it; read it as "peak so far").

What this module deliberately does not do: sample during the work (a thread would perturb what is
measured; before/after is enough for CPU time, and the peak comes from the kernel), measure other
processes (a served engine's workers), or device memory (GPU: torch.cuda / NVML, elsewhere).
"""

from __future__ import annotations

import os
import resource
import sys
import time
from typing import Any

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
# ru_maxrss is KiB on Linux, bytes on macOS
_MAXRSS_UNIT = 1 if sys.platform == "darwin" else 1024


def rss_bytes() -> int | None:
    """Resident set size of this process now (bytes), or None where /proc/self/statm is unavailable."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def process_usage() -> dict[str, Any]:
    """A snapshot: wall clock (monotonic), user and system CPU seconds, current RSS, peak RSS."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return {
        "t_s": time.perf_counter(),
        "cpu_user_s": ru.ru_utime,
        "cpu_sys_s": ru.ru_stime,
        "rss_bytes": rss_bytes(),
        "rss_peak_bytes": ru.ru_maxrss * _MAXRSS_UNIT,
    }


def usage_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """What happened between two `process_usage()` snapshots (see the module docstring)."""
    wall = max(after["t_s"] - before["t_s"], 0.0)
    user = after["cpu_user_s"] - before["cpu_user_s"]
    sys_ = after["cpu_sys_s"] - before["cpu_sys_s"]
    return {
        "wall_s": wall,
        "cpu_user_s": user,
        "cpu_sys_s": sys_,
        "cpu_s": user + sys_,
        "cpu_util": (user + sys_) / wall if wall > 0 else float("nan"),
        "rss_bytes_before": before.get("rss_bytes"),
        "rss_bytes_after": after.get("rss_bytes"),
        "rss_peak_bytes": after.get("rss_peak_bytes"),
    }
