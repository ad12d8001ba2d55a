"""The serving cost model: step times fitted from a run's own records, per engine and system (issue 18 item 1).

Three pure functions of a step's shape, each a non-negative least-squares fit (`scipy.optimize.nnls`):
prefill time vs tokens computed in the step and attention pairs (new x (cached + new)), decode step time vs
sequences in the batch and total context, and the per-step overheads (admission to prefill, the gap between
batches, send lag and delivery to the client). The hf engine gives every step's timestamps
(`prefill_start_s/prefill_end_s`, the batch's shared `token_s`); vLLM's span join gives per-request phases
only, so its decode step is fitted from each request's mean token gap against the mean number of requests
decoding beside it (`observe.phase_observations`). The fit's spread is kept (`Spread`: each step's measured /
predicted time, the overheads' samples) for the simulator to resample, so its tails carry it.
A model carries its engine and a fingerprint of the system's cost-relevant fields (model, dtype, device,
threads, kernels — not the scheduling knobs the simulator models); `check_system` refuses any other, and
`carried_to` carries it across a weight or KV dtype change by the roofline prior (marked `carried`).
Deliberately not here: the scheduler (`simulate.scheduler`), calibration (`simulate.calibrate`).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
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
        "kv_cache_tokens",
        "startup_timeout_s",
        "tracing",
        "python",
        "max_model_len",
        "port",
        "extra_args",
    }
)

# cost-relevant fields the roofline prior carries a fitted model across (bytes per element): a decode step reads
# every weight once (its per-step constant scales with the weight bytes) and every live sequence's KV (its
# per-context term, and a token's bytes in the cache, scale with the KV bytes); prefill is left as fitted
WEIGHT_BYTES = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0, "int8": 1.0}
KV_BYTES = {"float32": 4.0, "fp16": 2.0, "bfloat16": 2.0, "float16": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0}
CARRIED_FIELDS = {"weight_dtype": WEIGHT_BYTES, "kv_cache_dtype": KV_BYTES}

PREFILL_FEATURES = ("step_s", "per_token_s", "per_kpair_s")  # 1, tokens computed, attention pairs / 1000
DECODE_FEATURES = ("step_s", "per_seq_s", "per_kctx_s")  # 1, sequences in the step, total context / 1000


class WrongSystem(ValueError):
    """A cost model asked about a system it was not fitted on."""


def cost_fields(system: Any) -> dict[str, Any]:
    """The system's cost-relevant fields (JSON values): everything but `SCHEDULING_FIELDS`."""
    data = system.model_dump(mode="json") if hasattr(system, "model_dump") else dict(system)
    return {k: v for k, v in sorted(data.items()) if k not in SCHEDULING_FIELDS}


def system_fingerprint(system: Any) -> str:
    """sha256 (16 hex) of the system's cost-relevant fields: its engine, model, dtype, device, threads and
    kernels; scheduling knobs excluded (`SCHEDULING_FIELDS`)."""
    return hashlib.sha256(json.dumps(cost_fields(system), sort_keys=True, default=str).encode()).hexdigest()[:16]


def elem_bytes(fields: dict[str, Any], name: str) -> float | None:
    """Bytes per element of a carried field's value; vLLM's KV "auto" is the model dtype's; None: unknown."""
    value = fields.get(name)
    if name == "kv_cache_dtype" and value == "auto":
        value = fields.get("dtype")
    return CARRIED_FIELDS[name].get(str(value))


@dataclass(frozen=True)
class Fit:
    """One least-squares fit: coefficients by feature name, residuals (measured - predicted, s), its R^2."""

    names: tuple[str, ...]
    coef: tuple[float, ...]
    residuals_s: tuple[float, ...]
    r2: float
    n: int
    span: tuple[tuple[float, ...], ...] = ()  # orthonormal rows spanning the measured features (column-scaled)
    scale: tuple[float, ...] = ()  # the column scales `span` is in

    def predict_s(self, x: Sequence[float]) -> float:
        return float(np.dot(self.coef, x))

    def identified(self, x: Sequence[float]) -> bool:
        """Whether a step's features lie in the span of the measured ones: outside it (a batch shape the
        measurements never varied, e.g. only batches of 1 measured), the split between coefficients was not
        measured and the prediction is an extrapolation. A fit without a kept span says True."""
        if not self.span:
            return True
        v = np.asarray(x, float) / np.asarray(self.scale, float)
        norm = float(np.linalg.norm(v))
        basis = np.asarray(self.span, float)
        return norm == 0 or float(np.linalg.norm(v - basis.T @ (basis @ v))) <= 1e-3 * norm

    @property
    def rel_residual_p50(self) -> float:
        return float(np.median(np.abs(self.residuals_s))) if self.residuals_s else math.nan


@dataclass(frozen=True)
class Overheads:
    """Per-step and per-request constants (s): admission -> prefill start, first token after prefill, the gap
    between one batch's end and the next's admission when requests were waiting, send lag, delivery. The first
    token's delivery may differ from the rest's: `first_deliver_s` plus `first_per_stream_s` per stream in
    flight (vLLM's API server: 5 ms alone, 25 ms beside 15 others, while a stream's last token lags 2 ms);
    None: it is delivered like any other token."""

    admit_s: float = 0.0
    first_token_s: float = 0.0
    batch_gap_s: float = 0.0
    send_lag_s: float = 0.0
    deliver_s: float = 0.0
    first_deliver_s: float | None = None
    first_per_stream_s: float = 0.0


@dataclass(frozen=True)
class Spread:
    """The measured spread around the fit, kept so that simulated tails carry it: per step kind, each measured
    step's time over the fit's prediction (`*_ratio`, dimensionless), and the per-step overheads' own samples
    (s; `deliver_s`: each token's server stamp to the client). The simulator multiplies each step by one of
    them drawn at random, normalised to mean 1 (`mean_one`): the mean stays the fit's, the spread is the
    measured one. Empty: steps run at their prediction."""

    prefill_ratio: tuple[float, ...] = ()
    decode_ratio: tuple[float, ...] = ()
    admit_s: tuple[float, ...] = ()
    first_token_s: tuple[float, ...] = ()
    batch_gap_s: tuple[float, ...] = ()
    deliver_s: tuple[float, ...] = ()
    first_deliver_ratio: tuple[float, ...] = ()  # each first token's delivery over its fitted one


def step_ratios(measured_s: Sequence[float], predicted_s: Sequence[float]) -> tuple[float, ...]:
    """measured / predicted per step, for the steps with a positive prediction and a finite, non-negative time."""
    m, p = np.asarray(measured_s, float), np.asarray(predicted_s, float)
    ok = (p > 0) & np.isfinite(m) & np.isfinite(p) & (m >= 0)
    return tuple(float(v) for v in m[ok] / p[ok])


def fit_ratios(fit: Fit, x: np.ndarray, y: np.ndarray) -> tuple[float, ...]:
    """`step_ratios` of a fit's own observations (rows `x`, times `y`) against its predictions."""
    x = np.asarray(x, float)
    return step_ratios(y, x @ np.asarray(fit.coef, float)) if len(x) else ()


def mean_one(values: Sequence[float]) -> np.ndarray:
    """The finite values, negatives as 0, divided by their mean (empty when none is left or the mean is 0)."""
    v = np.clip(np.asarray(values, float), 0.0, None)
    v = v[np.isfinite(v)]
    mean = float(v.mean()) if v.size else 0.0
    return v / mean if mean > 0 else np.array([])


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
    fields_json: str = ""  # the fitted system's `cost_fields` (JSON): what `carried_to` compares against
    carried: str = ""  # set on a model carried to another system by the roofline prior: what was scaled, how
    spread: Spread = Spread()  # the fit's relative residuals and the overheads' samples, resampled per step

    def prefill_s(self, tokens: float, attn_pairs: float) -> float:
        """One prefill step computing `tokens` new tokens with `attn_pairs` query-key pairs."""
        return max(0.0, self.prefill.predict_s((1.0, tokens, attn_pairs / 1000.0)))

    def decode_s(self, seqs: float, context_tokens: float) -> float:
        """One decode step over `seqs` sequences holding `context_tokens` context in all."""
        return max(0.0, self.decode.predict_s((1.0, seqs, context_tokens / 1000.0)))

    def mixed_step_s(
        self,
        seqs: int,
        context_tokens: float,
        tokens: float,
        attn_pairs: float,
        ratios: tuple[float, float] = (1.0, 1.0),
    ) -> float:
        """One continuous-batching step: `seqs` decoding sequences plus `tokens` prompt tokens (chunks); the
        per-step constant is paid once (the decode fit's, or the prefill fit's for a prefill-only step).
        `ratios`: (prefill, decode) multipliers, each on its own part of the step (`Spread`)."""
        r_pre, r_dec = ratios
        if not tokens:
            return self.decode_s(seqs, context_tokens) * r_dec
        if not seqs:
            return self.prefill_s(tokens, attn_pairs) * r_pre
        marginal = self.prefill_s(tokens, attn_pairs) - self.prefill.coef[0]
        return self.decode_s(seqs, context_tokens) * r_dec + max(0.0, marginal) * r_pre

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

    def carried_to(self, system: Any) -> CostModel:
        """This model for `system`: itself when the cost-relevant fields match; a copy scaled by the roofline
        prior when they differ only in `CARRIED_FIELDS` (`carry`); else `WrongSystem` (`check_system`)."""
        try:
            self.check_system(system)
            return self
        except WrongSystem:
            scaled = carry(self, system)
            if scaled is None:
                raise
            return scaled

    def summary(self) -> dict[str, float]:
        out = {f"prefill.{n}": c for n, c in zip(self.prefill.names, self.prefill.coef, strict=True)}
        out.update({f"decode.{n}": c for n, c in zip(self.decode.names, self.decode.coef, strict=True)})
        out.update({f"overhead.{k}": v for k, v in vars(self.overheads).items() if v is not None})
        out.update(prefill_r2=self.prefill.r2, decode_r2=self.decode.r2, prefill_n=self.prefill.n)
        out.update(decode_n=self.decode.n, **self.stats)
        for kind in ("prefill_ratio", "decode_ratio"):
            kept = mean_one(getattr(self.spread, kind))
            if kept.size:
                out[f"spread.{kind}_cv"] = float(kept.std())
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
    full = x / scale
    xs = full * independent_columns(full)  # a column the earlier ones span is zeroed: its coefficient stays 0
    coef, _ = nnls(xs, y)
    spread = float(np.median(np.abs(y - xs @ coef)))
    if spread > 0 and len(y) > x.shape[1]:  # robust refit: steps slowed by a busy machine weigh less (soft L1)
        coef = least_squares(lambda c: xs @ c - y, coef, bounds=(0, np.inf), loss="soft_l1", f_scale=spread).x
    coef = coef / scale
    resid = y - x @ coef
    ss = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum(resid**2)) / ss if ss > 0 else math.nan
    _, sv, vt = np.linalg.svd(full, full_matrices=False)  # what was measured, whichever term took the time
    span = tuple(tuple(float(v) for v in row) for row, s_ in zip(vt, sv, strict=True) if s_ > 1e-6 * sv[0])
    rows = tuple(float(r) for r in resid)
    return Fit(names, tuple(float(c) for c in coef), rows, r2, len(y), span, tuple(float(c) for c in scale))


def independent_columns(xs: np.ndarray, tol: float = 1e-6) -> np.ndarray:
    """Which columns to fit: each unless the earlier ones span it (features are ordered simplest first). One
    prompt length makes attention pairs proportional to tokens, one context per sequence makes context
    proportional to sequences: the data cannot split the time between them, and NNLS would hand it to either
    at random, extrapolating the quadratic term to every other length; the simpler term takes it instead."""
    keep = np.zeros(xs.shape[1], bool)
    for j in range(xs.shape[1]):
        col = xs[:, j]
        norm = float(np.linalg.norm(col))
        if norm == 0:
            continue
        basis = xs[:, keep]
        resid = col - basis @ np.linalg.lstsq(basis, col, rcond=None)[0] if keep.any() else col
        keep[j] = float(np.linalg.norm(resid)) > tol * norm
    return keep


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


def carry(model: CostModel, system: Any) -> CostModel | None:
    """`model` carried to `system` when the two differ (on one engine) only in the weight and/or KV dtype: the
    decode step's constant scaled by the weight bytes ratio, its per-context term and the KV bytes a token holds
    by the KV bytes ratio (a prior, not a measurement: `carried` says so); None when anything else differs or a
    dtype's bytes are unknown."""
    if not model.fields_json or getattr(system, "engine", None) != model.engine:
        return None
    old, new = json.loads(model.fields_json), cost_fields(system)
    diff = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    if not diff or not set(diff) <= CARRIED_FIELDS.keys():
        return None
    ratio = {}
    for k in diff:
        a, b = elem_bytes(old, k), elem_bytes(new, k)
        if not a or not b:
            return None
        ratio[k] = b / a
    r_w, r_kv = ratio.get("weight_dtype", 1.0), ratio.get("kv_cache_dtype", 1.0)
    step, per_seq, per_kctx = model.decode.coef
    decode = replace(model.decode, coef=(step * r_w, per_seq, per_kctx * r_kv))
    stats = dict(model.stats)
    if "kv_bytes_per_token" in stats:
        stats["kv_bytes_per_token"] *= r_kv
    note = (
        "carried by the roofline prior from "
        + model.system_name
        + ": "
        + ", ".join(f"{k} {old.get(k)} -> {new.get(k)} (bytes x{ratio[k]:.3g})" for k in diff)
    )
    return replace(
        model,
        fingerprint=system_fingerprint(system),
        system_name=getattr(system, "name", "?"),
        decode=decode,
        stats=stats,
        notes=(*model.notes, note),
        fields_json=json.dumps(new, sort_keys=True, default=str),
        carried=note,
    )
