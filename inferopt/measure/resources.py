"""Process resource usage around a piece of work (the CPU side): resident memory and CPU time, and the sampler
every ablation trial runs under.

- `process_usage` / `usage_delta`: before/after snapshots of *this* process, standard library only
  (`resource.getrusage`, `/proc/self/statm`).
- `ResourceSampler`: a daemon thread sampling the process tree serving the work (this process plus the
  descendants that appeared after it started, e.g. a `vllm serve` and its workers) and, where present, NVML;
  `summary(window)` reduces the samples over the trial's measured load with `window_usage`, a pure function.

What this module deliberately does not do: device memory (NVML, `nvml.py`; torch.cuda elsewhere), per-op
profiles (`inferopt.locate.profile`), or attribution between processes that share this one's tree.
"""

from __future__ import annotations

import os
import resource
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any, Self

import numpy as np

from inferopt.measure.nvml import aggregate_gpu_samples, open_nvml
from inferopt.records import now_s

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
    """What happened between two `process_usage()` snapshots:

        before = process_usage(); ...work...; delta = usage_delta(before, process_usage())

    wall_s, cpu_user_s, cpu_sys_s, cpu_s and cpu_util (CPU seconds per wall second: 1.0 = one core busy; all
    threads), rss_bytes_before / rss_bytes_after and rss_peak_bytes (ru_maxrss: the peak since the process
    started, not the window's — read it as "peak so far")."""
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


# --------------------------------------------------------------------------- the per-trial sampler

DEFAULT_INTERVAL_S = 0.5
DISCOVER_EVERY = 4  # samples between scans for new descendant processes


def window_usage(
    samples: Sequence[dict[str, float]], start_s: float | None = None, end_s: float | None = None
) -> dict[str, float]:
    """Peak RSS and CPU time of sampled (t_s, rss_bytes, cpu_s[, own_maxrss_bytes]) rows, in time order,
    over [start_s, end_s] (None: the first / last sample). Pure.

    cpu_time_s: the cumulative CPU reading interpolated linearly at both ends of the window, subtracted.
    peak_rss_bytes: the largest sampled RSS in the window (the two samples around it when none falls
    inside), raised to this process's ru_maxrss when that grew within the window (a new lifetime high
    of the serving process itself: exact, not sampled). Empty input -> {}."""
    if not samples:
        return {}
    rows = sorted(samples, key=lambda r: r["t_s"])
    t = np.array([r["t_s"] for r in rows], dtype=float)
    cpu = np.array([r["cpu_s"] for r in rows], dtype=float)
    rss = np.array([r["rss_bytes"] for r in rows], dtype=float)
    lo = float(t[0]) if start_s is None else float(start_s)
    hi = float(t[-1]) if end_s is None else float(end_s)
    if hi < lo:
        raise ValueError(f"window ends before it starts: [{lo}, {hi}]")
    inside = (t >= lo) & (t <= hi)
    if not inside.any():  # a window shorter than one interval: the samples on either side
        i = int(np.clip(np.searchsorted(t, lo), 1, len(t) - 1)) if len(t) > 1 else 0
        inside = np.zeros(len(t), dtype=bool)
        inside[max(i - 1, 0) : i + 1] = True
    peak = float(rss[inside].max())
    if "own_maxrss_bytes" in rows[0]:
        own = np.array([r["own_maxrss_bytes"] for r in rows], dtype=float)
        before = own[t <= lo].max() if (t <= lo).any() else own[0]
        after = own[t <= hi].max() if (t <= hi).any() else own[0]
        if after > before:
            peak = max(peak, float(after))
    cpu_s = float(np.interp(hi, t, cpu) - np.interp(lo, t, cpu))
    wall = hi - lo
    return {
        "peak_rss_bytes": peak,
        "cpu_time_s": cpu_s,
        "wall_s": wall,
        "cpu_util": cpu_s / wall if wall > 0 else float("nan"),
        "samples": float(inside.sum()),
    }


def load_window(records: Sequence[Any]) -> tuple[float, float] | None:
    """The measured load of a run: from the first intended send to the last client completion (records'
    `intended_s` / `client_done_s`, `inferopt.records.now_s` clock); None without records."""
    starts = [r.intended_s for r in records if getattr(r, "intended_s", None) is not None]
    ends = [r.client_done_s for r in records if getattr(r, "client_done_s", None) is not None]
    if not starts or not ends:
        return None
    return float(min(starts)), float(max(ends))


class ResourceSampler:
    """Samples the serving process tree (and NVML where present) every `interval_s` while in its `with`
    block. `summary(window)` -> the per-trial metrics.

    Each sample is (t_s, RSS summed over the tree, CPU seconds summed over the tree: a process that exits
    keeps its last reading); children that existed before the sampler started (e.g. Prefect's API server)
    are not counted. Without NVML the summary says "not available: <why>". Within the window, this process's
    own peak is exact when it set a new lifetime high (ru_maxrss grew) and sampled otherwise; CPU time has
    the resolution of one interval at each end. RSS summed over processes counts shared pages once per
    process: an upper bound on the tree's footprint, consistent between arms.

    Cost: reading a known process takes ~0.1 ms (psutil reads /proc); finding new descendants scans every
    process on the machine (~4 ms of CPU with 160 processes, under the GIL), so it runs every
    DISCOVER_EVERY-th sample (and at the first and last); a child that lives less than DISCOVER_EVERY x
    interval_s may go unseen. An engine serving in this process (hf, fake) or elsewhere (an external
    endpoint) samples with `children=False`: no scans at all — a 4 ms hold of the GIL every 2 s is noise in
    the very latencies the trial measures (benchmarks/verdict_error_rates.py detected a planted 10 % TPOT
    regression 87.5 % of the time with it, A/A 5.0 %; without, 100 %, A/A 3.3 %)."""

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S, gpu: bool = True, children: bool = True) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.interval_s = interval_s
        self.samples: list[dict[str, float]] = []
        self.gpu_samples: list[dict[str, float]] = []
        self.gpu_status = "not available: GPU sampling off" if not gpu else ""
        self._want_gpu = gpu
        self._children = children  # False: an in-process engine, nothing to discover (no /proc scans)
        self._gpu: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._procs: dict[int, Any] = {}  # pid -> psutil.Process, descendants born after start
        self._cpu_last: dict[int, float] = {}  # pid -> last CPU seconds read (kept after it exits)
        self._old: set[int] = set()
        self._me: Any = None
        self._cpu0 = 0.0
        self._ticks = 0
        self.error: str | None = None

    def __enter__(self) -> Self:
        import psutil

        self._now = now_s
        self._me = psutil.Process()
        self._old = {c.pid for c in self._safe_children()} if self._children else set()
        t = self._me.cpu_times()
        self._cpu0 = t.user + t.system
        if self._want_gpu:
            self._gpu, reason = open_nvml()
            self.gpu_status = reason or "nvml: " + ", ".join(self._gpu.info()["devices"])
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="inferopt-resource-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10 * self.interval_s + 5)
        self._sample()
        if self._gpu is not None:
            self._gpu.close()
            self._gpu = None

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _safe_children(self) -> list[Any]:
        import psutil

        try:
            return self._me.children(recursive=True)
        except psutil.Error:
            return []

    def _sample(self) -> None:
        import psutil

        try:
            t = self._now()
            if self._children and (self._ticks % DISCOVER_EVERY == 0 or self._stop.is_set()):
                for child in self._safe_children():
                    if child.pid not in self._old and child.pid not in self._procs:
                        self._procs[child.pid] = child
            self._ticks += 1
            own = self._me.cpu_times()
            rss = float(self._me.memory_info().rss)
            for pid, proc in self._procs.items():
                try:
                    with proc.oneshot():
                        ct = proc.cpu_times()
                        mem = proc.memory_info().rss
                    self._cpu_last[pid] = ct.user + ct.system
                    rss += float(mem)
                except psutil.Error:
                    pass  # exited: its last CPU reading stays in the sum, its memory is gone
            cpu = own.user + own.system - self._cpu0 + sum(self._cpu_last.values())
            self.samples.append(
                {
                    "t_s": t,
                    "rss_bytes": rss,
                    "cpu_s": cpu,
                    "processes": float(1 + len(self._procs)),
                    "own_maxrss_bytes": float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * _MAXRSS_UNIT),
                }
            )
            if self._gpu is not None:
                self.gpu_samples.append(self._gpu.read(t))
        except Exception as exc:  # noqa: BLE001 - sampling must never break the trial; the error is kept
            self.error = f"{type(exc).__name__}: {exc}"

    def summary(self, window: tuple[float, float] | None = None) -> dict[str, Any]:
        """Per-trial metrics: `peak_rss_bytes`, `cpu_time_s`, `cpu_util` over `window` (None: the whole
        trial), `trial_peak_rss_bytes` / `trial_cpu_time_s` / `trial_wall_s` over everything sampled,
        `processes` (the tree's size), `gpu` (what was read, or "not available: <why>") and, with NVML, the
        `gpu_*` aggregates over the window."""
        out: dict[str, Any] = {}
        whole = window_usage(self.samples)
        part = window_usage(self.samples, *window) if window is not None and self.samples else whole
        for k in ("peak_rss_bytes", "cpu_time_s", "cpu_util"):
            out[k] = part.get(k, float("nan"))
        out["window_s"] = part.get("wall_s", float("nan"))
        out["trial_peak_rss_bytes"] = whole.get("peak_rss_bytes", float("nan"))
        out["trial_cpu_time_s"] = whole.get("cpu_time_s", float("nan"))
        out["trial_wall_s"] = whole.get("wall_s", float("nan"))
        out["processes"] = max((s["processes"] for s in self.samples), default=float("nan"))
        out["gpu"] = self.gpu_status
        if self.gpu_samples:
            lo, hi = window if window is not None else (-np.inf, np.inf)
            out.update(aggregate_gpu_samples([s for s in self.gpu_samples if lo <= s["t_s"] <= hi] or self.gpu_samples))
        if self.error:
            out["sampler_error"] = self.error
        return out
