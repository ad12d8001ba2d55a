"""SPEC K5 beside the effects: for every ablation arm that decodes speculatively, the measured acceptance rate a, the
predicted tokens per round 1 + a + ... + a^k, the measured tokens per round, and the predicted speed-up next to
the measured one (TPOT p50, baseline / arm, with the CI of the effects table), and the arm's ITL raw (per token
as received) against smoothed (each round spread over its tokens): where the bursts of verification show.

- hf engine (`HFSystem.speculative`): every measured request's rounds (`spec_drafted`, `spec_accepted`), pooled
  over the arm's trials; c = mean draft forward (the engine's `spec_*` counters over each trial) / the
  baseline's TPOT p50. Leviathan et al. price a verify forward at one plain step; a (k+1)-token verify costs
  more (on CPU with a tiny model about two steps), so `predicted_speedup_with_verify_cost` prices it as timed.
- vLLM (`VLLMSystem.speculative_config`): the server's `vllm:spec_decode_*` counters over each trial. vLLM counts
  accepted tokens per position but not drafted tokens per round, so the rounds that ended in a rejection are
  bounded from above: exact when every round drafts k tokens, else a is a lower bound. c = 0 for `ngram`.

Deliberately not here: the arithmetic (`inferopt.ablate.speculative_math`) and running trials (`run.py`).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from inferopt.ablate.speculative_math import SpeculativeSummary, predicted_speedup, summarize, summarize_counters
from inferopt.config import AnySystem
from inferopt.records import pooled_itl_ms

SPEEDUP_METRIC = "tpot_ms_p50"


def speculative_k(system: AnySystem) -> int | None:
    """k (draft tokens per round) of a speculative system, None for a plain one."""
    spec = system.capabilities.speculative
    return spec.draft_tokens if spec is not None else None


def _sum(runs: list[Any], key: str) -> float:
    return float(sum(r.server_metrics.get(key, 0.0) for r in runs))


def _hf_summary(k: int, runs: list[Any], plain_step_ms: float) -> tuple[SpeculativeSummary, dict[str, float]]:
    drafted: list[int] = []
    accepted: list[int] = []
    for run in runs:
        for rec in run.records:
            drafted += rec.spec_drafted
            accepted += rec.spec_accepted
    df, vf = _sum(runs, "spec_draft_forwards"), _sum(runs, "spec_verify_forwards")
    draft_ms = 1000.0 * _sum(runs, "spec_draft_s") / df if df else math.nan
    verify_ms = 1000.0 * _sum(runs, "spec_verify_s") / vf if vf else math.nan
    step = plain_step_ms if plain_step_ms > 0 else math.nan
    s = summarize(k, drafted, accepted, draft_ms / step)
    v = verify_ms / step
    return s, {
        "draft_ms_per_forward": draft_ms,
        "verify_ms_per_forward": verify_ms,
        "plain_step_ms": plain_step_ms,
        "verify_cost_ratio": v,
        "predicted_speedup_with_verify_cost": (
            predicted_speedup(s.acceptance_rate, k, s.cost_ratio, v)
            if all(map(math.isfinite, (s.acceptance_rate, s.cost_ratio, v))) and v > 0
            else math.nan
        ),
    }


def _vllm_summary(k: int, method: str, runs: list[Any]) -> SpeculativeSummary:
    drafts, drafted = _sum(runs, "spec_decode_num_drafts"), _sum(runs, "spec_decode_num_draft_tokens")
    accepted = _sum(runs, "spec_decode_num_accepted_tokens")
    at_last = _sum(runs, f"spec_decode_num_accepted_tokens_per_pos.{k - 1}")
    full = max(at_last, drafts - (drafted - accepted))  # see module doc: rejected rounds bounded from above
    c = 0.0 if method == "ngram" else math.nan  # a prompt lookup drafts without a forward
    return summarize_counters(k, drafts, drafted, accepted, full, c)


def speculative_table(arms: list[Any], runs: list[Any], effects: pd.DataFrame) -> pd.DataFrame:
    """One row per speculative arm that ran (see module doc); empty when no arm decodes speculatively."""
    rows = []
    for arm in arms:
        k = speculative_k(arm.system)
        if k is None:
            continue
        ok = [r for r in runs if r.tags.arm == arm.name and not r.failed]
        if not ok:
            continue
        eff = effects[(effects["arm"] == arm.name) & (effects["metric"] == SPEEDUP_METRIC)] if len(effects) else effects
        step_ms = float(eff.iloc[0]["baseline_value"]) if len(eff) else math.nan  # the plain arm's TPOT p50
        spec = arm.system.capabilities.speculative
        if spec.stats_from == "records":
            s, costs = _hf_summary(k, ok, step_ms)
        else:
            s, costs = _vllm_summary(k, spec.method, ok), {}
        row: dict[str, Any] = {
            "arm": arm.name,
            "engine": arm.system.engine,
            "trials": len(ok),
            **s.as_dict(),
            **costs,
            "speedup_metric": SPEEDUP_METRIC,
            "measured_speedup": math.nan,
            "measured_speedup_lo": math.nan,
            "measured_speedup_hi": math.nan,
        }
        if len(eff):
            e = eff.iloc[0]
            row["measured_speedup"] = 1.0 / e["ratio"] if e["ratio"] else math.nan
            row["measured_speedup_lo"] = 1.0 / e["ratio_hi"] if e["ratio_hi"] else math.nan
            row["measured_speedup_hi"] = 1.0 / e["ratio_lo"] if e["ratio_lo"] else math.nan
        row |= _itl_columns(ok)
        rows.append(row)
    return pd.DataFrame(rows)


def _itl_columns(runs: list[Any]) -> dict[str, float]:
    """The arm's pooled ITL, raw and smoothed (ms), and its largest burst (tokens in one chunk)."""
    itl = pooled_itl_ms([rec for run in runs for rec in run.records])
    keys = ("itl_ms_p50", "itl_ms_p99", "itl_ms_max", "itl_smoothed_ms_p50", "itl_smoothed_ms_p99", "max_chunk_tokens")
    return {k: itl.get(k, math.nan) for k in keys}
