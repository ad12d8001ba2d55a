"""The device's roofs for one dtype (SPEC L2): peak FLOP/s, memory bandwidth, memory, power and price, either from
a hardware YAML (vendor spec sheet figures) or measured at run time with short micro-benchmarks.

`load_hardware(cfg, dtype, threads)` returns a frozen `HardwareProfile`. When `cfg.measure_at_runtime` is set
(CPU: spec sheets say nothing useful about a shared, loaded VM) it times a square matmul at `dtype` (2 n^3 FLOPs
per call) and a large tensor copy (bytes read + written), best of a few samples at `threads` torch threads,
within about two seconds, and caches the result as JSON under `cache_root()/hardware/` keyed by (hostname, kind,
dtype, threads), so a run measures once per machine and setting. On `kind: gpu` it runs on CUDA when present.

What this module deliberately does not do: claim the measured numbers are the hardware's true peak (they are
what torch reaches here, a practical ceiling, which is what a roofline verdict needs), measure power (tdp_w and
price are the config's estimates, labelled as such in `source`), or import torch outside `measure_device`.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable

from inferopt.config import HardwareConfig
from inferopt.model.build import cache_root

MATMUL_BUDGET_S = 0.8  # time allowed for the matmul benchmark (after sizing)
COPY_BUDGET_S = 0.6  # time allowed for the copy benchmark
MIN_SAMPLE_S = 0.01  # one timed sample runs at least this long (inner loop)
MAX_SAMPLES = 5  # best of at most this many samples
CPU_COPY_BYTES = 256 * 2**20  # per tensor; well above any L3 cache
GPU_COPY_BYTES = 2 * 2**30  # per tensor; well above any L2 cache


@dataclass(frozen=True)
class HardwareProfile:
    """The roofs the analysis uses, for one dtype. `measured` says whether peak and bandwidth come from
    this machine's micro-benchmarks (True) or from the config's spec figures (False); `source` says
    where every number came from."""

    name: str
    kind: str
    dtype: str
    peak_flops_per_s: float
    mem_bandwidth_bytes_per_s: float
    memory_bytes: float
    tdp_w: float
    price_per_hour_usd: float
    measured: bool
    source: str
    threads: int | None = None

    @property
    def ridge_flop_per_byte(self) -> float:
        return self.peak_flops_per_s / self.mem_bandwidth_bytes_per_s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_hardware(cfg: HardwareConfig, dtype: str, threads: int, *, use_cache: bool = True) -> HardwareProfile:
    """The profile for `dtype` at `threads` torch threads (see the module docstring).

    Without runtime measurement the config must list `dtype` in `peak_flops_per_s`. With it, a cached
    measurement for this (hostname, kind, dtype, threads) is reused when `use_cache`; a failed
    measurement falls back to the config figures with the failure written into `source`.
    """
    if cfg.measure_at_runtime:
        cached = _read_cache(cfg, dtype, threads) if use_cache else None
        if cached is not None:
            return _profile_from_measurement(cfg, dtype, threads, cached, cached_note=True)
        try:
            measurement = measure_device(dtype, threads, device="cuda" if cfg.kind == "gpu" else "cpu")
        except Exception as exc:  # noqa: BLE001 - a failed micro-benchmark must not stop the run
            fallback = _from_config(cfg, dtype, threads)
            return replace(
                fallback, source=f"{fallback.source}; runtime measurement failed ({type(exc).__name__}: {exc})"
            )
        _write_cache(cfg, dtype, threads, measurement)
        return _profile_from_measurement(cfg, dtype, threads, measurement, cached_note=False)
    return _from_config(cfg, dtype, threads)


def _from_config(cfg: HardwareConfig, dtype: str, threads: int) -> HardwareProfile:
    if dtype not in cfg.peak_flops_per_s:
        raise ValueError(
            f"hardware {cfg.name!r} has no peak_flops_per_s for dtype {dtype!r}; fix: add it to the hardware "
            f"config (has: {', '.join(sorted(cfg.peak_flops_per_s))})"
        )
    return HardwareProfile(
        name=cfg.name,
        kind=cfg.kind,
        dtype=dtype,
        peak_flops_per_s=float(cfg.peak_flops_per_s[dtype]),
        mem_bandwidth_bytes_per_s=float(cfg.mem_bandwidth_bytes_per_s),
        memory_bytes=float(cfg.memory_bytes),
        tdp_w=float(cfg.tdp_w),
        price_per_hour_usd=float(cfg.price_per_hour_usd),
        measured=False,
        source=f"config: {cfg.source or cfg.name} (spec figures; tdp and price are estimates)",
        threads=threads,
    )


def _profile_from_measurement(
    cfg: HardwareConfig, dtype: str, threads: int, m: dict[str, Any], cached_note: bool
) -> HardwareProfile:
    memory = float(m.get("memory_bytes") or cfg.memory_bytes)
    when = "cached " if cached_note else ""
    return HardwareProfile(
        name=cfg.name,
        kind=cfg.kind,
        dtype=dtype,
        peak_flops_per_s=float(m["matmul_flop_per_s"]),
        mem_bandwidth_bytes_per_s=float(m["copy_bytes_per_s"]),
        memory_bytes=memory,
        tdp_w=float(cfg.tdp_w),
        price_per_hour_usd=float(cfg.price_per_hour_usd),
        measured=True,
        source=(
            f"{when}runtime micro-benchmark on {m.get('hostname')} at {m.get('measured_at')}: "
            f"matmul n={m.get('matmul_n')} {dtype}, copy {m.get('copy_bytes')} B, {threads} threads on "
            f"{m.get('device')}; memory from {m.get('memory_source', 'config')}; tdp and price: config estimates"
        ),
        threads=threads,
    )


# --------------------------------------------------------------------------- the micro-benchmarks


def measure_device(dtype: str, threads: int, device: str = "cpu") -> dict[str, Any]:
    """Time a matmul (FLOP/s at `dtype`) and a large copy (read + write bytes/s) on `device`, at
    `threads` torch threads (restored afterwards). About two seconds; returns a JSON-able dict."""
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        device = "cpu"
    torch_dtype = getattr(torch, dtype)
    old_threads = torch.get_num_threads()
    torch.set_num_threads(int(threads))
    try:
        sync: Callable[[], None] = torch.cuda.synchronize if device == "cuda" else (lambda: None)
        flop_s, n = _matmul_flop_per_s(torch, torch_dtype, device, sync)
        copy_bytes = GPU_COPY_BYTES if device == "cuda" else CPU_COPY_BYTES
        byte_s, copy_bytes = _copy_bytes_per_s(torch, device, sync, copy_bytes)
        memory, memory_source = _device_memory_bytes(torch, device)
    finally:
        torch.set_num_threads(old_threads)
    return {
        "hostname": socket.gethostname(),
        "device": device,
        "dtype": dtype,
        "threads": int(threads),
        "matmul_n": n,
        "matmul_flop_per_s": flop_s,
        "copy_bytes": copy_bytes,
        "copy_bytes_per_s": byte_s,
        "memory_bytes": memory,
        "memory_source": memory_source,
        "torch_version": torch.__version__,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def _best_rate(run: Callable[[], None], sync: Callable[[], None], work: float, budget_s: float) -> float:
    """Best work/s over up to MAX_SAMPLES samples within `budget_s`; each sample repeats `run` until it
    lasts at least MIN_SAMPLE_S (so tiny fast calls are not timer noise)."""
    run()
    sync()  # warm-up (allocation, kernel selection)
    t0 = time.perf_counter()
    run()
    sync()
    one = max(time.perf_counter() - t0, 1e-9)
    inner = max(1, int(MIN_SAMPLE_S / one))
    best = work / one
    deadline = time.perf_counter() + budget_s
    for _ in range(MAX_SAMPLES):
        if time.perf_counter() + inner * one > deadline:
            break
        t0 = time.perf_counter()
        for _ in range(inner):
            run()
        sync()
        best = max(best, work * inner / (time.perf_counter() - t0))
    return best


def _matmul_flop_per_s(torch: Any, dtype: Any, device: str, sync: Callable[[], None]) -> tuple[float, int]:
    """Grow n until one (warm) n x n matmul takes >= 20 ms (or n hits the cap), then time it. On an H200
    the unwarmed version stopped at n=256 and reported 2 TFLOP/s instead of ~800."""
    cap = 8192 if device == "cuda" else 2048
    n = 256
    while True:
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        torch.mm(a, b)
        sync()  # first call at a size pays library init / kernel selection (cuBLAS: ~1 s)
        t0 = time.perf_counter()
        torch.mm(a, b)
        sync()
        took = time.perf_counter() - t0
        if took >= 0.02 or n >= cap or took * 8 > MATMUL_BUDGET_S / 2:
            break
        n *= 2
    out = torch.empty(n, n, device=device, dtype=dtype)
    rate = _best_rate(lambda: torch.mm(a, b, out=out), sync, 2.0 * n**3, MATMUL_BUDGET_S)
    return rate, n


def _copy_bytes_per_s(torch: Any, device: str, sync: Callable[[], None], nbytes: int) -> tuple[float, int]:
    n = nbytes // 4
    src = torch.ones(n, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    rate = _best_rate(lambda: dst.copy_(src), sync, 2.0 * n * 4, COPY_BUDGET_S)
    return rate, n * 4


def _device_memory_bytes(torch: Any, device: str) -> tuple[float | None, str]:
    if device == "cuda":
        return float(torch.cuda.get_device_properties(0).total_memory), "torch.cuda total_memory"
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")), "os.sysconf physical pages"
    except (ValueError, OSError, AttributeError):
        return None, "config"


# --------------------------------------------------------------------------- the cache


def hardware_cache_dir() -> Path:
    return cache_root() / "hardware"


def _cache_path(cfg: HardwareConfig, dtype: str, threads: int) -> Path:
    host = "".join(c if c.isalnum() or c in "-_." else "_" for c in socket.gethostname())
    return hardware_cache_dir() / f"{host}-{cfg.kind}-{dtype}-t{int(threads)}.json"


def _read_cache(cfg: HardwareConfig, dtype: str, threads: int) -> dict[str, Any] | None:
    path = _cache_path(cfg, dtype, threads)
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if not (data.get("matmul_flop_per_s", 0) > 0 and data.get("copy_bytes_per_s", 0) > 0):
        return None
    return data


def _write_cache(cfg: HardwareConfig, dtype: str, threads: int, measurement: dict[str, Any]) -> None:
    path = _cache_path(cfg, dtype, threads)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(measurement, indent=1, sort_keys=True))
        tmp.replace(path)
    except OSError:
        pass  # a read-only cache only costs a re-measurement next time
