"""Arrival processes: seeded inter-arrival gaps -> arrival offsets in seconds from the run's start.

Each process takes its own `numpy.random.Generator` (no global RNG). `describe()` gives a short label
like `poisson@2.00` for tables and run names.

Deliberately not here: trace replay from production logs (a later, separate reader).
"""

from __future__ import annotations

import numpy as np

from inferopt.config import ArrivalConfig, ConstantArrivals, GammaArrivals, PoissonArrivals


def arrival_offsets_s(cfg: ArrivalConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """n arrival times (s, ascending, first one at 0) for the configured process."""
    mean_gap_s = 1.0 / cfg.rate_per_s
    if isinstance(cfg, ConstantArrivals):
        gaps = np.full(n, mean_gap_s)
    elif isinstance(cfg, PoissonArrivals):
        gaps = rng.exponential(mean_gap_s, size=n)
    elif isinstance(cfg, GammaArrivals):
        # CV^2 of a gamma(shape k) gap is 1/k: burstiness b = CV^2 -> k = 1/b, scale keeps the mean.
        shape = 1.0 / cfg.burstiness
        gaps = rng.gamma(shape, mean_gap_s / shape, size=n)
    else:  # pragma: no cover - the config union is closed
        raise TypeError(f"unknown arrival process {cfg!r}")
    offsets = np.concatenate([[0.0], np.cumsum(gaps[:-1])]) if n else np.empty(0)
    return offsets


def describe(cfg: ArrivalConfig) -> str:
    label = f"{cfg.kind}@{cfg.rate_per_s:.2f}"
    if isinstance(cfg, GammaArrivals):
        label += f"(cv2={cfg.burstiness:g})"
    return label
