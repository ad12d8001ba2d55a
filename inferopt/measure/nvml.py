"""GPU power, memory and SM clock during a piece of work, read through NVML (the GPU side of step 1's resources).

    reader, reason = open_nvml()            # reason: "not available: <why>" where NVML cannot be used
    samples = [reader.read() for ...]       # taken by the sampler thread in `inferopt.measure.resources`
    summary = aggregate_gpu_samples(samples)

`open_nvml()` needs the `pynvml` module (package `nvidia-ml-py`), a loadable NVML library (an NVIDIA driver)
and a device; it reads the devices CUDA would use (`visible_indices`). One `read()` is one sample over them:
board power summed (W), memory used summed (bytes), SM clock averaged (MHz), the driver's cumulative energy
counter where the GPU has one (mJ, Volta and newer). `aggregate_gpu_samples` is pure: mean and peak power, energy
as the integral of power over time (checked against the counter), peak memory, mean and minimum SM clock (a
falling clock under load means throttling). Deliberately not here: starting a thread (resources.py samples),
attributing power to a process (NVML reports the whole board: run one arm at a time), timing kernels
(`inferopt.engines.hf.cuda_events`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

NOT_AVAILABLE = "not available: "


class NvmlReader:
    """Reads one sample over `indices` per `read()`; `close()` shuts NVML down."""

    def __init__(self, pynvml: Any, indices: Sequence[int]) -> None:
        self._nv = pynvml
        self.indices = list(indices)
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in self.indices]
        self.names = [_str(pynvml.nvmlDeviceGetName(h)) for h in self._handles]

    def read(self, t_s: float) -> dict[str, float]:
        nv = self._nv
        power_w = mem = 0.0
        clocks: list[float] = []
        energy_mj: float | None = 0.0
        for h in self._handles:
            power_w += nv.nvmlDeviceGetPowerUsage(h) / 1000.0  # mW -> W
            mem += float(nv.nvmlDeviceGetMemoryInfo(h).used)
            clocks.append(float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)))
            if energy_mj is not None:
                try:
                    energy_mj += float(nv.nvmlDeviceGetTotalEnergyConsumption(h))
                except nv.NVMLError:
                    energy_mj = None  # not on this GPU generation
        out = {"t_s": t_s, "power_w": power_w, "mem_used_bytes": mem, "sm_clock_mhz": float(np.mean(clocks))}
        if energy_mj is not None:
            out["energy_counter_mj"] = energy_mj
        return out

    def info(self) -> dict[str, Any]:
        return {"devices": self.names, "indices": self.indices}

    def close(self) -> None:
        with contextlib.suppress(Exception):  # shutting down must not fail the run
            self._nv.nvmlShutdown()


def visible_indices(device_count: int, env: dict[str, str] | None = None) -> list[int]:
    """The NVML indices CUDA would use: `CUDA_VISIBLE_DEVICES` when it lists integer indices, else all.
    (UUID/MIG forms are not mapped: all devices are read, and `info()` names them.)"""
    raw = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return list(range(device_count))
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if not parts:
        return []  # set but empty: CUDA sees no device
    if all(p.lstrip("-").isdigit() for p in parts):
        out = []
        for p in parts:
            i = int(p)
            if i < 0:
                break  # CUDA stops at the first invalid index
            if i < device_count:
                out.append(i)
        return out
    return list(range(device_count))


def open_nvml() -> tuple[NvmlReader | None, str | None]:
    """(reader, None) where NVML works and a device is visible, else (None, "not available: <why>")."""
    try:
        import pynvml
    except ImportError:
        return None, NOT_AVAILABLE + "pynvml not importable (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None, NOT_AVAILABLE + f"NVML could not start ({type(exc).__name__}: {exc}); no NVIDIA driver here"
    try:
        indices = visible_indices(int(pynvml.nvmlDeviceGetCount()))
        if not indices:
            pynvml.nvmlShutdown()
            return None, NOT_AVAILABLE + "NVML sees no visible NVIDIA device (CUDA_VISIBLE_DEVICES)"
        return NvmlReader(pynvml, indices), None
    except Exception as exc:  # noqa: BLE001
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
        return None, NOT_AVAILABLE + f"NVML device query failed ({type(exc).__name__}: {exc})"


def aggregate_gpu_samples(samples: Sequence[dict[str, float]]) -> dict[str, float]:
    """Summary of NVML samples (each with t_s, power_w, mem_used_bytes, sm_clock_mhz, optionally
    energy_counter_mj), in time order. Energy is the trapezoid integral of power over the sampled span
    (one sample: 0 J over 0 s). Empty input -> {} (nothing was sampled)."""
    if not samples:
        return {}
    rows = sorted(samples, key=lambda s: s["t_s"])
    t = np.array([s["t_s"] for s in rows], dtype=float)
    p = np.array([s["power_w"] for s in rows], dtype=float)
    span = float(t[-1] - t[0])
    energy = float(np.sum((p[1:] + p[:-1]) * np.diff(t)) / 2.0) if len(t) > 1 else 0.0
    clock = np.array([s["sm_clock_mhz"] for s in rows], dtype=float)
    out = {
        "gpu_samples": float(len(rows)),
        "gpu_span_s": span,
        "gpu_power_w_mean": energy / span if span > 0 else float(p.mean()),  # time-weighted
        "gpu_power_w_peak": float(p.max()),
        "gpu_energy_j": energy,
        "gpu_mem_used_bytes_peak": float(max(s["mem_used_bytes"] for s in rows)),
        "gpu_sm_clock_mhz_mean": float(clock.mean()),
        "gpu_sm_clock_mhz_min": float(clock.min()),
    }
    counters = [s.get("energy_counter_mj") for s in rows]
    if counters[0] is not None and counters[-1] is not None:
        out["gpu_energy_j_counter"] = (float(counters[-1]) - float(counters[0])) / 1000.0
    return out


def _str(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
