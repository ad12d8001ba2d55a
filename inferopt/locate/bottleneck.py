"""The locate step's verdict (SPEC L1, L4, M4): which cause holds the latency back — kv_capacity, queueing,
compute, bandwidth, host_overhead or none — decided by explicit rules over step 1's per-request phase table,
the roofline table and the KV table, with every number each rule looked at returned as evidence.

The rules in the order they are tried (why, in docs/method.md, L1): 1. kv_capacity (`kv_rules.py`), before
queueing because a full KV cache shows up as a queue; 2. queueing (overload, or queue wait dominating the TTFT
tail); 3. the largest phase of E2E, then for prefill or decode the nearest roofline row's bound, unless the
measurement is far below the roof or a profile shows the host dominating (host_overhead); 4. none. Confidence
is the margin past the threshold (0.5 at it, 1.0 at a full margin). Per slice (M4) every value of the slice
columns gets its dominant phase and cause beside `look_at`, the phase M4 says to examine there.

What this module deliberately does not do: measure, compute the roofline or KV tables (`roofline.py`, `kv.py`),
judge against SLOs, or pick a remedy (`inferopt.choose.remedies`). Pure pandas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

from inferopt.locate.evidence import confidence as _conf
from inferopt.locate.evidence import evidence_row as _row
from inferopt.locate.kv_rules import kv_check
from inferopt.locate.profile import category_share, host_share, roof_work_share
from inferopt.stats.inference import percentile

Cause = Literal["queueing", "compute", "bandwidth", "kv_capacity", "host_overhead", "none"]
CAUSES: tuple[str, ...] = ("queueing", "compute", "bandwidth", "kv_capacity", "host_overhead", "none")

QUEUE_FAIL_RATE = 0.01  # rejected + timed-out share of requests above which the system is overloaded
TAIL_QUANTILE = 0.99  # the TTFT tail examined for queue share ("p99")
MIN_TAIL_ROWS = 5  # ...but never fewer requests than this in the tail
QUEUE_SHARE_DOMINANT = 0.5  # queue_ms / ttft_ms over the tail at or above which queueing dominates
HOST_OVERHEAD_EFFICIENCY = 0.05  # t_min / measured below this -> the roofs do not limit: host overhead
HOST_SHARE_DOMINANT = 0.5  # profiled share of a phase outside model ops at/above which the host dominates
ATTENTION_DOMINANT = 0.5  # profiled attention share of a phase at/above which attention is the main lever
SLICE_COLUMNS = ("input_bucket", "output_bucket", "concurrency_bucket", "cache_hit")
PHASES = ("queue", "context", "prefill", "decode")
_PHASE_CAUSE = {"queue": "queueing", "context": "host_overhead"}


@dataclass
class Diagnosis:
    """The located cause, how sure, the rule that fired (as text), every check's numbers, and the
    per-slice breakdown."""

    cause: Cause
    confidence: float
    rule: str
    evidence: list[dict[str, Any]] = field(default_factory=list)
    per_slice: pd.DataFrame = field(default_factory=pd.DataFrame)

    def to_dict(self) -> dict[str, Any]:
        return {
            "cause": self.cause,
            "confidence": self.confidence,
            "rule": self.rule,
            "evidence": self.evidence,
            "per_slice": self.per_slice.to_dict(orient="records"),
        }


def locate(
    phases: pd.DataFrame,
    roofline: pd.DataFrame,
    kv: pd.DataFrame,
    knobs: dict[str, Any],
    op_breakdown: pd.DataFrame | None = None,
) -> Diagnosis:
    """The diagnosis for one measured run, by the rules of the module docstring (thresholds: the constants above).

    `phases`: one row per request, times in ms (`inferopt.measure.phases.phase_table` with the
    `inferopt.measure.slices` buckets): outcome, input_len, output_len, cached_tokens, queue_ms, context_ms,
    prefill_ms, first_ms, ttft_ms, tpot_ms, e2e_ms, decode_ms, batch_size_at_admit and the slice columns. The
    KV rule's concurrency is the running batch (batch_size_at_admit), not requests in flight: queued requests
    hold no KV. `knobs` (flat or dotted keys, all optional): max_batch_size, observed_concurrency (peak running
    sequences the engine reported), kv_cache_usage_frac_max (0..1), num_preemptions (see `kv_rules.py`).
    `op_breakdown`: `PhaseProfile.ops` of `inferopt.locate.profile` (optional); it profiles one representative
    shape, so it informs the overall verdict only — per-slice causes use the roofline rule alone."""
    knobs = {k.split(".")[-1]: v for k, v in (knobs or {}).items()}
    evidence: list[dict[str, Any]] = []
    n = len(phases)
    if n == 0:
        return Diagnosis("none", 0.0, "no requests: nothing to locate", evidence, _empty_slices())
    ok = phases[phases["outcome"] == "ok"]
    per_slice = _per_slice(ok, roofline)

    # 1. kv_capacity
    kv_fire, kv_conf, kv_rule = kv_check(phases, ok, kv, knobs, evidence)
    # 2. queueing
    q_fire, q_conf, q_rule = _queue_check(phases, ok, evidence)
    if kv_fire:
        return Diagnosis("kv_capacity", kv_conf, kv_rule, evidence, per_slice)
    if q_fire:
        return Diagnosis("queueing", q_conf, q_rule, evidence, per_slice)

    # rule 4 before the split: nothing to split
    if ok.empty:
        return Diagnosis(
            "none", 0.0, "no successful request with phase timings: nothing to locate", evidence, per_slice
        )

    # rule 3: where the time goes, then the roofline of the dominant phase
    shares = _shares(ok)
    ranked = sorted(PHASES, key=lambda p: shares[p], reverse=True)
    top, second = ranked[0], ranked[1]
    dom_margin = (shares[top] - shares[second]) / shares[top] if shares[top] > 0 else 0.0
    for phase in PHASES:
        evidence.append(
            _row(
                "time_share." + phase,
                shares[phase],
                None,
                "fraction of E2E",
                phase == top,
                f"sum({phase} time) / sum(e2e_ms) over {len(ok)} successful requests",
            )
        )
    if top in _PHASE_CAUSE:
        cause = _PHASE_CAUSE[top]
        return Diagnosis(
            cause,
            _conf(dom_margin),  # type: ignore[arg-type]
            f"{top} is the largest share of E2E ({shares[top]:.0%}, next {second} {shares[second]:.0%}) -> {cause}",
            evidence,
            per_slice,
        )
    cause, conf, rule = _phase_cause(top, ok, roofline, evidence, op_breakdown)
    conf = min(conf, _conf(dom_margin))
    rule = f"{top} is the largest share of E2E ({shares[top]:.0%}, next {second} {shares[second]:.0%}); {rule}"
    return Diagnosis(cause, conf, rule, evidence, per_slice)  # type: ignore[arg-type]


def roofline_points(phases: pd.DataFrame) -> list[dict[str, Any]]:
    """The operating points to put on the roofline for this phase table: prefill at the median
    uncached prompt length and median batch, decode at the median mid-generation context and median
    batch. Pass them to `roofline.roofline_table(..., phases=...)` so `locate` compares like with like."""
    ok = phases[phases["outcome"] == "ok"] if "outcome" in phases else phases
    if ok.empty:
        return []
    batch = int(max(1, round(_median(ok.get("batch_size_at_admit"), 1.0))))
    uncached = (ok["input_len"] - ok.get("cached_tokens", 0)).clip(lower=1)
    ctx = ok["input_len"] + ok["output_len"] / 2.0
    return [
        {
            "phase": "prefill",
            "n_tokens": int(max(1, round(float(uncached.median())))),
            "batch": batch,
            "context_len": int(round(float(ok.get("cached_tokens", pd.Series([0])).median()))),
        },
        {"phase": "decode", "context_len": int(round(float(ctx.median()))), "batch": batch},
    ]


# --------------------------------------------------------------------------- the checks


def _queue_check(phases: pd.DataFrame, ok: pd.DataFrame, evidence: list[dict[str, Any]]) -> tuple[bool, float, str]:
    n = len(phases)
    failed = int(phases["outcome"].isin(["rejected", "timeout"]).sum())
    errors = int((phases["outcome"] == "error").sum())
    fail_rate = failed / n
    fail_fire = fail_rate > QUEUE_FAIL_RATE
    evidence.append(
        _row(
            "queue.reject_timeout_rate",
            fail_rate,
            QUEUE_FAIL_RATE,
            "fraction",
            fail_fire,
            f"{failed} of {n} requests rejected or timed out ({errors} errors, not counted here)",
        )
    )
    tail_share = math.nan
    if not ok.empty and ok["ttft_ms"].notna().any():
        valid = ok[ok["ttft_ms"].notna()]
        k = max(MIN_TAIL_ROWS, math.ceil(len(valid) * (1.0 - TAIL_QUANTILE)))
        tail = valid.nlargest(min(k, len(valid)), "ttft_ms")
        total = float(tail["ttft_ms"].sum())
        tail_share = float(tail["queue_ms"].fillna(0).sum()) / total if total > 0 else math.nan
        evidence.append(
            _row(
                "queue.share_of_tail_ttft",
                tail_share,
                QUEUE_SHARE_DOMINANT,
                "fraction",
                bool(tail_share >= QUEUE_SHARE_DOMINANT),
                f"sum(queue_ms) / sum(ttft_ms) over the {len(tail)} slowest-TTFT requests "
                f"(TTFT p99 {percentile(valid['ttft_ms'], 99):.4g} ms)",
            )
        )
    if fail_fire:
        conf = _conf(math.log10(fail_rate / QUEUE_FAIL_RATE))
        return (
            True,
            conf,
            (
                f"{fail_rate:.1%} of requests rejected or timed out (> {QUEUE_FAIL_RATE:.0%}): "
                "the system is overloaded -> queueing"
            ),
        )
    if math.isfinite(tail_share) and tail_share >= QUEUE_SHARE_DOMINANT:
        conf = _conf((tail_share - QUEUE_SHARE_DOMINANT) / (1.0 - QUEUE_SHARE_DOMINANT))
        return (
            True,
            conf,
            (f"queue wait is {tail_share:.0%} of TTFT over the TTFT tail (>= {QUEUE_SHARE_DOMINANT:.0%}) -> queueing"),
        )
    return False, 0.0, ""


def _phase_cause(
    phase: str,
    rows: pd.DataFrame,
    roofline: pd.DataFrame,
    evidence: list[dict[str, Any]] | None,
    op_breakdown: pd.DataFrame | None = None,
) -> tuple[str, float, str]:
    """Cause for a prefill- or decode-dominated set of requests: host_overhead or the roofline bound."""
    if phase == "prefill":
        measured_ms = _median(rows["prefill_ms"])
        size = _median((rows["input_len"] - rows.get("cached_tokens", 0)).clip(lower=1))
        key = "n_tokens"
    else:
        measured_ms = _median(rows["tpot_ms"])  # one decode step (NaN for single-token outputs)
        size = _median(rows["input_len"] + rows["output_len"] / 2.0)
        key = "context_len"
    batch = _median(rows.get("batch_size_at_admit"), 1.0)
    row = _nearest_row(roofline, phase, key, size, batch)
    usual = "compute" if phase == "prefill" else "bandwidth"
    if row is None:
        if evidence is not None:
            evidence.append(_row(f"roofline.{phase}", None, None, "", False, "no roofline row for this phase"))
        return usual, 0.5, f"no roofline row for {phase}: assumed the usual {usual} bound (L2), low confidence"
    t_min_ms = float(row["t_min_s"]) * 1e3
    eff = t_min_ms / measured_ms if measured_ms and measured_ms > 0 and math.isfinite(measured_ms) else math.nan
    host = math.isfinite(eff) and eff < HOST_OVERHEAD_EFFICIENCY
    ai = float(row["ai_flop_per_byte"])
    ridge = float(row["ridge_flop_per_byte"]) if "ridge_flop_per_byte" in row else math.nan
    if evidence is not None:
        evidence.append(
            _row(
                f"roofline.{phase}.efficiency",
                eff,
                HOST_OVERHEAD_EFFICIENCY,
                "t_min / measured",
                host,
                f"median measured {measured_ms:.4g} ms vs roofline t_min {t_min_ms:.4g} ms "
                f"(row: {key} {row[key]}, batch {row['batch']}; measured {key} ~{size:.4g}, batch ~{batch:.3g})",
            )
        )
        evidence.append(
            _row(
                f"roofline.{phase}.ai_flop_per_byte",
                ai,
                ridge,
                "FLOP/byte (threshold = ridge)",
                not host,
                f"roofline bound {row['bound']}",
            )
        )
    prof = _profile_check(phase, op_breakdown, evidence)
    if host:
        conf = _conf(math.log10(HOST_OVERHEAD_EFFICIENCY / eff)) if eff > 0 else 1.0
        return (
            "host_overhead",
            conf,
            (
                f"measured {phase} ({measured_ms:.4g} ms) reaches only {eff:.1%} of the roofline minimum "
                f"({t_min_ms:.4g} ms; < {HOST_OVERHEAD_EFFICIENCY:.0%}): the roofs do not limit it -> host_overhead"
                + (f"; {prof['text']}" if prof else "")
            ),
        )
    if prof and prof["host"] >= HOST_SHARE_DOMINANT:
        conf = _conf((prof["host"] - HOST_SHARE_DOMINANT) / (1.0 - HOST_SHARE_DOMINANT))
        return (
            "host_overhead",
            conf,
            (
                f"{phase} runs at {eff:.0%} of the roofline minimum "
                f"({t_min_ms:.4g} ms vs measured {measured_ms:.4g} ms), "
                f"but the op profile puts {prof['host']:.0%} of it outside model ops (>= {HOST_SHARE_DOMINANT:.0%}): "
                f"the host sets the pace, not the {row['bound']} roof -> host_overhead; {prof['text']}"
            ),
        )
    cause = str(row["bound"])
    margin = abs(math.log10(ai / ridge)) if ai > 0 and ridge > 0 and math.isfinite(ai / ridge) else 1.0
    conf = _conf(margin)
    text = f"{phase} AI {ai:.3g} FLOP/B vs ridge {ridge:.3g} FLOP/B, at {eff:.0%} of the roof -> {cause}"
    if prof:
        conf = min(conf, _conf((HOST_SHARE_DOMINANT - prof["host"]) / HOST_SHARE_DOMINANT))
        text += (
            f"; {prof['text']} (host < {HOST_SHARE_DOMINANT:.0%}: most of the time is in model ops, so the "
            f"roof's bound stands; host time and kernels below the roof are why it is at {eff:.0%} of it)"
        )
    return cause, conf, text


def _profile_check(
    phase: str, ops: pd.DataFrame | None, evidence: list[dict[str, Any]] | None
) -> dict[str, Any] | None:
    """The profile's host and attention shares of `phase` as evidence rows, or None without a profile."""
    if ops is None or len(ops) == 0 or phase not in set(ops["phase"]):
        return None
    host = host_share(ops, phase)
    if not math.isfinite(host):
        return None
    attn = category_share(ops, phase, "attention")
    matmul = category_share(ops, phase, "matmul")
    work = roof_work_share(ops, phase)
    text = (
        f"op profile of {phase}: host {host:.0%}, matmul {matmul:.0%}, attention {attn:.0%}, "
        f"other ops {max(0.0, 1.0 - host - matmul - attn):.0%}"
    )
    if evidence is not None:
        evidence.append(
            _row(
                f"profile.{phase}.host_share",
                host,
                HOST_SHARE_DOMINANT,
                "fraction",
                host >= HOST_SHARE_DOMINANT,
                f"share of the profiled {phase} time outside model ops (CPU: Python/framework between "
                f"aten ops; CUDA: device idle); matmul + attention = {work:.0%}",
            )
        )
        evidence.append(
            _row(
                f"profile.{phase}.attention_share",
                attn,
                ATTENTION_DOMINANT,
                "fraction",
                attn >= ATTENTION_DOMINANT,
                f"an attention kernel (C1, K3) can shorten at most this share of {phase} (Amdahl)",
            )
        )
    return {"host": host, "attention": attn, "matmul": matmul, "text": text}


# --------------------------------------------------------------------------- per slice


def _per_slice(ok: pd.DataFrame, roofline: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for dim in SLICE_COLUMNS:
        if dim not in ok or ok.empty:
            continue
        groups = list(ok.groupby(ok[dim].astype(str), dropna=False, sort=True))
        look = _look_at(dim, groups)
        for value, g in groups:
            shares = _shares(g)
            dominant = max(PHASES, key=lambda p: shares[p])
            if dominant in _PHASE_CAUSE:
                cause = _PHASE_CAUSE[dominant]
            else:
                cause = _phase_cause(dominant, g, roofline, None)[0]
            rows.append(
                {
                    "slice_dim": dim,
                    "slice_value": value,
                    "n": len(g),
                    **{f"{p}_share": shares[p] for p in PHASES},
                    "dominant_phase": dominant,
                    "cause": cause,
                    "look_at": look.get(value, ""),
                    "ttft_ms_p99": percentile(g["ttft_ms"], 99),
                    "e2e_ms_p99": percentile(g["e2e_ms"], 99),
                }
            )
    return pd.DataFrame(rows, columns=list(_empty_slices().columns))


def _look_at(dim: str, groups: list[tuple[str, pd.DataFrame]]) -> dict[str, str]:
    """M4 guidance: the longest-input bucket -> prefill, the longest-output bucket -> decode, the
    shortest bucket of either -> queue, the highest-concurrency bucket -> queue."""
    if len(groups) < 2:
        return {}
    if dim == "input_bucket":
        med = {v: float(g["input_len"].median()) for v, g in groups}
        return {max(med, key=med.get): "prefill", min(med, key=med.get): "queue"}
    if dim == "output_bucket":
        med = {v: float(g["output_len"].median()) for v, g in groups}
        return {max(med, key=med.get): "decode", min(med, key=med.get): "queue"}
    if dim == "concurrency_bucket":
        col = next((c for c in ("concurrency", "batch_size_at_admit") if c in groups[0][1]), None)
        if col is None:
            return {}
        med = {v: _median(g[col], 0.0) for v, g in groups}
        return {max(med, key=med.get): "queue"}
    return {}


# --------------------------------------------------------------------------- helpers


def _shares(rows: pd.DataFrame) -> dict[str, float]:
    total = float(rows["e2e_ms"].fillna(0).sum())
    parts = {
        "queue": rows["queue_ms"],
        "context": rows["context_ms"],
        "prefill": rows["prefill_ms"].fillna(0) + rows["first_ms"].fillna(0),
        "decode": rows["decode_ms"],
    }
    return {p: (float(s.fillna(0).sum()) / total if total > 0 else 0.0) for p, s in parts.items()}


def _nearest_row(roofline: pd.DataFrame, phase: str, key: str, size: float, batch: float) -> pd.Series | None:
    if roofline is None or roofline.empty:
        return None
    cand = roofline[roofline["phase"] == phase]
    if cand.empty:
        return None
    s = max(size, 1.0) if math.isfinite(size) else 1.0
    b = max(batch, 1.0) if math.isfinite(batch) else 1.0
    dist = (
        np.log(cand[key].clip(lower=1).astype(float) / s) ** 2
        + np.log(cand["batch"].clip(lower=1).astype(float) / b) ** 2
    )
    return cand.loc[dist.idxmin()]


def _median(values: pd.Series | None, default: float = math.nan) -> float:
    if values is None:
        return default
    arr = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)
    arr = arr[np.isfinite(arr)]
    return float(np.median(arr)) if arr.size else default


def _empty_slices() -> pd.DataFrame:
    return pd.DataFrame(
        columns=[
            "slice_dim",
            "slice_value",
            "n",
            *(f"{p}_share" for p in PHASES),
            "dominant_phase",
            "cause",
            "look_at",
            "ttft_ms_p99",
            "e2e_ms_p99",
        ]
    )
