"""Effects of an arm against the baseline, beyond noise: paired bootstrap CIs per metric, Holm across
metrics, and a per-arm verdict (improves / regresses / no detectable change / failed).

Each metric is a statistic over per-request values within a trial (p50, p99 ... of TTFT, TPOT, E2E) or a
trial rate (output tokens/s: per-request tokens / trial duration, summed). The bootstrap resamples
trials and requests within trials (`inferopt.analysis.stats.paired_bootstrap_diff`).

Deliberately not here: running trials, and judging SLOs (validation) or quality (gate).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

import numpy as np
import pandas as pd

from inferopt.analysis.stats import holm, paired_bootstrap_diff


@dataclass(frozen=True)
class MetricSpec:
    name: str
    column: str
    stat: Callable[[np.ndarray], float]
    lower_is_better: bool
    unit: str


def _q(values: np.ndarray, q: float) -> float:
    return float(np.quantile(values, q)) if len(values) else float("nan")


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("ttft_ms_p50", "ttft_ms", partial(_q, q=0.5), True, "ms"),
    MetricSpec("ttft_ms_p99", "ttft_ms", partial(_q, q=0.99), True, "ms"),
    MetricSpec("tpot_ms_p50", "tpot_ms", partial(_q, q=0.5), True, "ms"),
    MetricSpec("tpot_ms_p95", "tpot_ms", partial(_q, q=0.95), True, "ms"),
    MetricSpec("e2e_ms_p99", "e2e_ms", partial(_q, q=0.99), True, "ms"),
    MetricSpec("output_tok_per_s", "tok_per_s_share", np.sum, False, "tok/s"),
)


def _trial_values(phases: pd.DataFrame, duration_s: float, spec: MetricSpec) -> np.ndarray:
    if spec.column == "tok_per_s_share":
        # every request counts (failures contribute 0 tokens): sum over requests = output tokens/s of the trial
        tokens = np.where(phases["outcome"] == "ok", phases["output_len"].to_numpy(float), 0.0)
        return tokens / max(duration_s, 1e-9)
    ok = phases[phases["outcome"] == "ok"]
    return ok[spec.column].dropna().to_numpy(float)


def compare_arms(trials: pd.DataFrame, baseline: str, arm: str, *, n_boot: int, alpha: float, seed: int,
                 metrics: tuple[MetricSpec, ...] = METRICS) -> pd.DataFrame:
    """Effects table for `arm` vs `baseline`.

    `trials` has one row per trial: arm, repeat, duration_s, phases (a DataFrame). Returns one row per
    metric: baseline/arm values, diff and ratio with CIs, p-value, Holm-adjusted significance, and the
    direction (better / worse / none).
    """
    a = trials[trials["arm"] == baseline].sort_values("repeat")
    b = trials[trials["arm"] == arm].sort_values("repeat")
    rows = []
    for i, spec in enumerate(metrics):
        a_vals = [_trial_values(p, d, spec) for p, d in zip(a["phases"], a["duration_s"])]
        b_vals = [_trial_values(p, d, spec) for p, d in zip(b["phases"], b["duration_s"])]
        eff = paired_bootstrap_diff(a_vals, b_vals, spec.stat, n_boot=n_boot, alpha=alpha, seed=seed + i)
        rows.append({
            "arm": arm, "baseline": baseline, "metric": spec.name, "unit": spec.unit,
            "lower_is_better": spec.lower_is_better, "baseline_value": eff.a_value, "arm_value": eff.b_value,
            "diff": eff.diff, "diff_lo": eff.diff_lo, "diff_hi": eff.diff_hi, "ratio": eff.ratio,
            "ratio_lo": eff.ratio_lo, "ratio_hi": eff.ratio_hi, "p_value": eff.p_value,
            "n_baseline": eff.n_a, "n_arm": eff.n_b,
        })
    table = pd.DataFrame(rows)
    table["significant"] = holm(table["p_value"].fillna(1.0).tolist(), alpha)
    better = np.where(table["lower_is_better"], table["diff"] < 0, table["diff"] > 0)
    table["direction"] = np.where(~table["significant"], "none", np.where(better, "better", "worse"))
    return table


def arm_verdict(effects: pd.DataFrame, target_metrics: tuple[str, ...]) -> tuple[str, list[str]]:
    """improves: a target metric is significantly better and none is significantly worse;
    regresses: a target metric is significantly worse; else no detectable change. Side effects (a
    non-target metric significantly worse) are returned as reasons, not hidden."""
    reasons = []
    targets = effects[effects["metric"].isin(target_metrics)]
    unknown = set(target_metrics) - set(effects["metric"])
    if unknown:
        reasons.append(f"target metrics without a measurement: {sorted(unknown)}")
    for _, r in effects.iterrows():
        if r["direction"] != "none":
            reasons.append(
                f"{r['metric']}: {r['baseline_value']:.4g} -> {r['arm_value']:.4g} {r['unit']} "
                f"(x{r['ratio']:.3f}, CI [{r['ratio_lo']:.3f}, {r['ratio_hi']:.3f}], {r['direction']}"
                f"{'' if r['metric'] in target_metrics else ', side effect'})"
            )
    if (targets["direction"] == "worse").any():
        return "regresses", reasons
    if (targets["direction"] == "better").any():
        return "improves", reasons
    reasons.append("no target metric moved beyond noise (every CI of the difference includes 0 after Holm)")
    return "no detectable change", reasons
