"""Per-request SLO checks (SPEC M5): which requests met every bound, the share meeting each bound and all of
them, and goodput — requests (and output tokens) per second that met every bound, failures in the denominator.

Pure functions of a phase table (`inferopt.measure.phases`); a percentile SLO (TTFT p99 <= X) is judged per
request against X, as goodput is defined by vLLM's `--goodput` and DistServe.

Deliberately not here: judging a run's percentiles against the SLO (`inferopt.validate.judge`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from inferopt.config import SLOConfig, WorkloadConfig


@dataclass(frozen=True)
class RequestSLO:
    """The per-request view of an SLO: the deadline a failed request is censored at, and the bounds a request
    must meet to count toward goodput (ok, TTFT within the TTFT p99 bound, TPOT within the TPOT p95 bound, E2E
    within the E2E p99 bound when one is set)."""

    deadline_ms: float = WorkloadConfig.model_fields["timeout_s"].default * 1000.0
    ttft_ms: float = math.inf
    tpot_ms: float = math.inf
    e2e_ms: float = math.inf

    @classmethod
    def of(cls, workload: WorkloadConfig, slo: SLOConfig) -> RequestSLO:
        e2e = slo.e2e_p99_ms if slo.e2e_p99_ms is not None else math.inf
        return cls(workload.timeout_s * 1000.0, slo.ttft_p99_ms, slo.tpot_p95_ms, e2e)

    @classmethod
    def from_slo(cls, slo: SLOConfig) -> RequestSLO:
        """The bounds alone (goodput, attainment), with the default deadline."""
        e2e = slo.e2e_p99_ms if slo.e2e_p99_ms is not None else math.inf
        return cls(ttft_ms=slo.ttft_p99_ms, tpot_ms=slo.tpot_p95_ms, e2e_ms=e2e)

    def meets_slo(self, phases: pd.DataFrame) -> np.ndarray:
        """Per request: ok and within every per-request SLO bound (a one-token output has no TPOT to miss)."""
        ok = (phases["outcome"] == "ok").to_numpy()
        tpot = pd.to_numeric(phases["tpot_ms"], errors="coerce").fillna(0.0).to_numpy(float)
        within = (phases["ttft_ms"].to_numpy(float) <= self.ttft_ms) & (tpot <= self.tpot_ms)
        return ok & within & (phases["e2e_ms"].to_numpy(float) <= self.e2e_ms)

    def attainment(self, phases: pd.DataFrame, duration_s: float) -> dict[str, float]:
        """Shares of all requests meeting each bound and all of them, and goodput in req/s and tok/s."""
        n = len(phases)
        if n == 0:
            return {}
        ok = (phases["outcome"] == "ok").to_numpy()
        tpot = pd.to_numeric(phases["tpot_ms"], errors="coerce").fillna(0.0).to_numpy(float)
        met = self.meets_slo(phases)
        out_tokens = phases["output_len"].to_numpy(float)
        return {
            "slo_ttft_share": float((ok & (phases["ttft_ms"].to_numpy(float) <= self.ttft_ms)).mean()),
            "slo_tpot_share": float((ok & (tpot <= self.tpot_ms)).mean()),
            "slo_e2e_share": float((ok & (phases["e2e_ms"].to_numpy(float) <= self.e2e_ms)).mean()),
            "slo_attainment": float(met.mean()),
            "goodput_req_per_s": float(met.sum()) / max(duration_s, 1e-9),
            "goodput_tok_per_s": float(out_tokens[met].sum()) / max(duration_s, 1e-9),
        }
