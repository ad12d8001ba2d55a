"""The serving cost model: step times fitted from a run's own records, per engine and system (issue 18 item 1).

Three pure functions of a step's shape, each a non-negative least-squares fit (`scipy.optimize.nnls`) whose
residuals are kept: prefill time vs tokens computed in the step and attention pairs (new x (cached + new)),
decode step time vs sequences in the batch and total context, and the per-step overheads (admission to
prefill, the gap between batches, send lag and delivery to the client). The hf engine gives every step's
timestamps (`prefill_start_s/prefill_end_s`, the batch's shared `token_s`); vLLM's span join gives per-request
phases only, so its decode step is fitted from each request's mean token gap against the mean number of
requests decoding beside it (`observations_from_phases`).

A model carries its engine and a fingerprint of the system's cost-relevant fields (model, dtype, device,
threads, kernels — not the scheduling knobs the simulator models); `check_system` refuses any other.
Deliberately not here: the scheduler (`simulate.scheduler`), calibration (`simulate.calibrate`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import least_squares, nnls

# fields of a system that the simulator itself models (scheduling, admission, KV size) or that do not change
# a step's cost: they stay out of the fingerprint so one fit serves every value of them
SCHEDULING_FIELDS = frozenset(
    {
        "name",
        "batching",
        "stop_at_eos",
        "max_num_seqs",
        "max_num_batched_tokens",
        "enable_chunked_prefill",
        "enable_prefix_caching",
        "scheduling_policy",
        "max_num_queued_reqs",
        "kv_cache_memory_bytes",
        "startup_timeout_s",
        "tracing",
        "python",
        "max_model_len",
        "port",
        "extra_args",
    }
)

PREFILL_FEATURES = ("step_s", "per_token_s", "per_kpair_s")  # 1, tokens computed, attention pairs / 1000
DECODE_FEATURES = ("step_s", "per_seq_s", "per_kctx_s")  # 1, sequences in the step, total context / 1000


class WrongSystem(ValueError):
    """A cost model asked about a system it was not fitted on."""


def system_fingerprint(system: Any) -> str:
    """sha256 (16 hex) of the system's cost-relevant fields: its engine, model, dtype, device, threads and
    kernels; scheduling knobs excluded (`SCHEDULING_FIELDS`)."""
    data = system.model_dump(mode="json") if hasattr(system, "model_dump") else dict(system)
    kept = {k: v for k, v in sorted(data.items()) if k not in SCHEDULING_FIELDS}
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Fit:
    """One least-squares fit: coefficients by feature name, residuals (measured - predicted, s), its R^2."""

    names: tuple[str, ...]
    coef: tuple[float, ...]
    residuals_s: tuple[float, ...]
    r2: float
    n: int

    def predict_s(self, x: Sequence[float]) -> float:
        return float(np.dot(self.coef, x))

    @property
    def rel_residual_p50(self) -> float:
        return float(np.median(np.abs(self.residuals_s))) if self.residuals_s else math.nan


@dataclass(frozen=True)
class Overheads:
    """Per-step and per-request constants (s): admission -> prefill start, first token after prefill, the gap
    between one batch's end and the next's admission when requests were waiting, send lag, delivery."""

    admit_s: float = 0.0
    first_token_s: float = 0.0
    batch_gap_s: float = 0.0
    send_lag_s: float = 0.0
    deliver_s: float = 0.0


@dataclass(frozen=True)
class CostModel:
    """Fitted step times for one engine on one system (see the module docstring)."""

    engine: str
    fingerprint: str
    system_name: str
    prefill: Fit
    decode: Fit
    overheads: Overheads = Overheads()
    notes: tuple[str, ...] = ()
    stats: dict[str, float] = field(default_factory=dict)

    def prefill_s(self, tokens: float, attn_pairs: float) -> float:
        """One prefill step computing `tokens` new tokens with `attn_pairs` query-key pairs."""
        return max(0.0, self.prefill.predict_s((1.0, tokens, attn_pairs / 1000.0)))

    def decode_s(self, seqs: float, context_tokens: float) -> float:
        """One decode step over `seqs` sequences holding `context_tokens` context in all."""
        return max(0.0, self.decode.predict_s((1.0, seqs, context_tokens / 1000.0)))

    def mixed_step_s(self, seqs: int, context_tokens: float, tokens: float, attn_pairs: float) -> float:
        """One continuous-batching step: `seqs` decoding sequences plus `tokens` prompt tokens (chunks); the
        per-step constant is paid once (the decode fit's, or the prefill fit's for a prefill-only step)."""
        if not tokens:
            return self.decode_s(seqs, context_tokens)
        if not seqs:
            return self.prefill_s(tokens, attn_pairs)
        marginal = self.prefill_s(tokens, attn_pairs) - self.prefill.coef[0]
        return self.decode_s(seqs, context_tokens) + max(0.0, marginal)

    def check_system(self, system: Any) -> None:
        """Raise `WrongSystem` unless `system` is the engine and system this model was fitted on."""
        engine = getattr(system, "engine", "?")
        if engine != self.engine:
            raise WrongSystem(
                f"this cost model was fitted on the {self.engine!r} engine (system {self.system_name!r}); it cannot "
                f"predict {getattr(system, 'name', '?')!r} on the {engine!r} engine: step times do not carry across "
                f"engines; fix: fit a model from that engine's own measured runs"
            )
        fp = system_fingerprint(system)
        if fp != self.fingerprint:
            raise WrongSystem(
                f"this cost model was fitted on system {self.system_name!r} (fingerprint {self.fingerprint}); "
                f"{getattr(system, 'name', '?')!r} differs in a cost-relevant field (model, dtype, device, threads, "
                f"kernels; fingerprint {fp}); fix: fit on measured runs of that system"
            )

    def summary(self) -> dict[str, float]:
        out = {f"prefill.{n}": c for n, c in zip(self.prefill.names, self.prefill.coef, strict=True)}
        out.update({f"decode.{n}": c for n, c in zip(self.decode.names, self.decode.coef, strict=True)})
        out.update({f"overhead.{k}": v for k, v in vars(self.overheads).items()})
        out.update(prefill_r2=self.prefill.r2, decode_r2=self.decode.r2, prefill_n=self.prefill.n)
        out.update(decode_n=self.decode.n, **self.stats)
        return out


def fit_nnls(x: np.ndarray, y: np.ndarray, names: tuple[str, ...]) -> Fit:
    """Non-negative least squares of y on the columns of x (each scaled to unit norm first, for conditioning),
    then refitted with a soft-L1 loss at the residuals' median scale: on a shared machine some steps are slowed
    by other work, and squared loss would let those few set the coefficients."""
    x = np.asarray(x, float)
    y = np.asarray(y, float)
    if len(y) == 0:
        raise ValueError("no observations to fit; fix: records with server timings (an ok request at least)")
    scale = np.linalg.norm(x, axis=0)
    scale[scale == 0] = 1.0
    xs = x / scale
    coef, _ = nnls(xs, y)
    spread = float(np.median(np.abs(y - xs @ coef)))
    if spread > 0 and len(y) > x.shape[1]:  # robust refit: steps slowed by a busy machine weigh less (soft L1)
        coef = least_squares(lambda c: xs @ c - y, coef, bounds=(0, np.inf), loss="soft_l1", f_scale=spread).x
    coef = coef / scale
    resid = y - x @ coef
    ss = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum(resid**2)) / ss if ss > 0 else math.nan
    return Fit(names, tuple(float(c) for c in coef), tuple(float(r) for r in resid), r2, len(y))


def attn_pairs(new_tokens: Sequence[int], cached_tokens: Sequence[int]) -> float:
    """Causal query-key pairs of a prefill over rows of (new, cached) tokens: each new token attends to the
    cached ones and the new ones up to itself."""
    new = np.asarray(new_tokens, float)
    return float((new * (np.asarray(cached_tokens, float) + (new + 1.0) / 2.0)).sum())


def prefill_features(new_tokens: Sequence[int], cached_tokens: Sequence[int]) -> tuple[float, float, float]:
    """(1, tokens computed, attention pairs / 1000) of one prefill step over rows of (new, cached) tokens."""
    return 1.0, float(np.sum(new_tokens)), attn_pairs(new_tokens, cached_tokens) / 1000.0


def padded_rows(input_lens: Sequence[int], cached: Sequence[int]) -> tuple[list[int], list[int]]:
    """A left-padded static batch (the hf engine): every row computes the widest row's new tokens."""
    width = max(int(n) - int(c) for n, c in zip(input_lens, cached, strict=True))
    return [width] * len(input_lens), [int(c) for c in cached]
