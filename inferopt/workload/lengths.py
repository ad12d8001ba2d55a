"""Joint input/output token lengths: a bivariate lognormal with a log-space correlation, clipped.

Deliberately not here: empirical length histograms from traces (a later reader feeds the same columns).
"""

from __future__ import annotations

import numpy as np

from inferopt.config import LengthConfig


def sample_lengths(cfg: LengthConfig, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """(input_len, output_len) integer arrays of length n, correlated in log space."""
    z = rng.standard_normal((n, 2))
    rho = cfg.correlation
    z_out = rho * z[:, 0] + np.sqrt(max(0.0, 1.0 - rho * rho)) * z[:, 1]
    inp = np.exp(np.log(cfg.input_median) + cfg.input_sigma * z[:, 0])
    out = np.exp(np.log(cfg.output_median) + cfg.output_sigma * z_out)
    inp = np.clip(np.rint(inp), cfg.input_min, cfg.input_max).astype(int)
    out = np.clip(np.rint(out), cfg.output_min, cfg.output_max).astype(int)
    return inp, out
