"""Effects of an arm against the baseline, beyond noise: per metric a test of the paired difference, the
target metrics first then the rest (serial gatekeeping with Holm in each family), a per-arm verdict
(improves / regresses / no detectable change; `run.py` adds skipped / failed), and the interaction of
single changes in their combination (log-additive model).

Each metric is a statistic over per-request values within a trial (p50, p99 ... of TTFT, TPOT, E2E), a
trial rate (output tokens/s: per-request tokens / trial duration, summed), or a per-trial scalar the run
measured (`RESOURCE_METRICS`: peak memory, weight bytes, peak KV bytes, KV bytes per token; process RSS and
CPU time where reported) — compared the same way: paired CI of the difference and the ratio, Holm. The default test works at the
level of repeats (`inferopt.stats.inference.paired_repeat_test`): the statistic per trial, the log ratio
per repeat, a t-test over repeats. The two-level bootstrap (trials, then requests within trials:
`paired_bootstrap_diff`) stays selectable; it treats requests as independent, which batching makes false,
and measured too many A/A false alarms with few repeats.

Deliberately not here: running trials, and judging SLOs (validation) or quality (gate).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

import numpy as np
import pandas as pd

from inferopt.ablate.interaction import interaction_bootstrap, interaction_repeat_test
from inferopt.stats.inference import (
    RowStat,
    holm,
    paired_bootstrap_diff,
    paired_repeat_test,
    quantile_rows,
    sum_rows,
)


@dataclass(frozen=True)
class MetricSpec:
    name: str
    column: str
    stat: Callable[[np.ndarray], float]
    lower_is_better: bool
    unit: str
    row_stat: RowStat | None = None  # the same statistic row-wise (vectorised bootstrap)
    trial_key: str | None = None  # a per-trial scalar (the trial's `resources[trial_key]`), not a request column
    additive: bool = False  # a sum of parts (bytes): changes compose by adding differences (interaction)


def _q(values: np.ndarray, q: float) -> float:
    return float(np.quantile(values, q)) if len(values) else float("nan")


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("ttft_ms_p50", "ttft_ms", partial(_q, q=0.5), True, "ms", quantile_rows(0.5)),
    MetricSpec("ttft_ms_p99", "ttft_ms", partial(_q, q=0.99), True, "ms", quantile_rows(0.99)),
    MetricSpec("tpot_ms_p50", "tpot_ms", partial(_q, q=0.5), True, "ms", quantile_rows(0.5)),
    MetricSpec("tpot_ms_p95", "tpot_ms", partial(_q, q=0.95), True, "ms", quantile_rows(0.95)),
    MetricSpec("e2e_ms_p99", "e2e_ms", partial(_q, q=0.99), True, "ms", quantile_rows(0.99)),
    MetricSpec("output_tok_per_s", "tok_per_s_share", np.sum, False, "tok/s", sum_rows),
)


def _one(values: np.ndarray) -> float:
    """The statistic of a per-trial scalar: the trial's one value (NaN when it has none)."""
    return float(np.mean(values)) if len(values) else float("nan")


# Per-trial scalars: the trial's memory and KV bytes as the engine measured them (HFEngine.memory: bytes from
# the tensors; on a GPU peak memory is CUDA's max allocated) and, where the run reports them, process RSS and
# CPU time. Deterministic for a fixed workload at batch size 1 (same bytes every repeat), so their CI can be a
# point: `paired_repeat_test` with zero spread. A metric no trial of either arm reports gets no row.
RESOURCE_METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(
        "peak_memory_bytes", "", _one, True, "bytes", quantile_rows(0.5), trial_key="peak_memory_bytes", additive=True
    ),
    MetricSpec("weight_bytes", "", _one, True, "bytes", quantile_rows(0.5), trial_key="weight_bytes", additive=True),
    MetricSpec("kv_peak_bytes", "", _one, True, "bytes", quantile_rows(0.5), trial_key="kv_peak_bytes", additive=True),
    MetricSpec("kv_bytes_per_token", "", _one, True, "bytes/token", quantile_rows(0.5), trial_key="kv_bytes_per_token"),
    MetricSpec(
        "peak_rss_bytes", "", _one, True, "bytes", quantile_rows(0.5), trial_key="peak_rss_bytes", additive=True
    ),
    MetricSpec("cpu_time_s", "", _one, True, "s", quantile_rows(0.5), trial_key="cpu_time_s"),
)
RESOURCE_KEYS = tuple(m.trial_key for m in RESOURCE_METRICS)
ALL_METRICS = METRICS + RESOURCE_METRICS


def trial_resources(*sources: dict | None) -> dict[str, float]:
    """The per-trial scalars of RESOURCE_METRICS found in `sources` (e.g. a run's engine info, its resource
    usage), the first finite number per key winning; keys that none reports are left out."""
    out: dict[str, float] = {}
    for key in RESOURCE_KEYS:
        for src in sources:
            value = (src or {}).get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value):
                out[key] = float(value)
                break
    return out


def _trial_values(
    phases: pd.DataFrame, duration_s: float, spec: MetricSpec, resources: dict | None = None
) -> np.ndarray:
    if spec.trial_key is not None:
        value = (resources or {}).get(spec.trial_key) if isinstance(resources, dict) else None
        return np.array([float(value)]) if value is not None and np.isfinite(value) else np.array([])
    if spec.column == "tok_per_s_share":
        # every request counts (failures contribute 0 tokens): sum over requests = output tokens/s of the trial
        tokens = np.where(phases["outcome"] == "ok", phases["output_len"].to_numpy(float), 0.0)
        return tokens / max(duration_s, 1e-9)
    ok = phases[phases["outcome"] == "ok"]
    return ok[spec.column].dropna().to_numpy(float)


METRICS_BY_NAME = {m.name: m for m in ALL_METRICS}


def arm_trial_values(trials: pd.DataFrame, arm: str, spec: MetricSpec) -> list[np.ndarray]:
    """Per-request values of `spec` for each trial of `arm`, in repeat order (a per-trial scalar: one value,
    from the trials' `resources` column; none when the frame has no such column)."""
    sub = trials[trials["arm"] == arm].sort_values("repeat")
    res = sub["resources"] if "resources" in sub else [None] * len(sub)
    return [_trial_values(p, d, spec, r) for p, d, r in zip(sub["phases"], sub["duration_s"], res, strict=False)]


def _has_data(trials: pd.DataFrame, arms: tuple[str, str], spec: MetricSpec) -> bool:
    return spec.trial_key is None or any(v.size for a in arms for v in arm_trial_values(trials, a, spec))


def compare_arms(
    trials: pd.DataFrame,
    baseline: str,
    arm: str,
    *,
    alpha: float,
    seed: int = 0,
    n_boot: int = 2000,
    test: str = "repeat_t",
    targets: tuple[str, ...] = (),
    metrics: tuple[MetricSpec, ...] = ALL_METRICS,
) -> pd.DataFrame:
    """Effects table for `arm` vs `baseline`.

    `trials` has one row per trial: arm, repeat, duration_s, phases (a DataFrame). Returns one row per
    metric: baseline/arm values, diff and ratio with CIs, p-value, significance, the direction (better /
    worse / none), its family and whether it was tested.

    `test`: "repeat_t" (`paired_repeat_test`: a t-test over repeats — the default, see its docstring for
    why) or "two_level_bootstrap" (`paired_bootstrap_diff`, `n_boot` resamples, `seed`).

    Multiple metrics, with `targets` (serial gatekeeping): the target metrics are tested first, Holm at
    `alpha`; only if every target is significant are the other metrics ("side effect" family) tested, Holm
    at `alpha`. The family-wise error over all metrics stays <= alpha (a side effect can only be wrongly
    flagged after every target was rightly or wrongly rejected), and the verdict's metrics do not pay for
    the ones it does not read. Without `targets`: Holm across all metrics."""
    rows = []
    for i, spec in enumerate(m for m in metrics if _has_data(trials, (baseline, arm), m)):
        a_vals = arm_trial_values(trials, baseline, spec)
        b_vals = arm_trial_values(trials, arm, spec)
        if test == "repeat_t":
            eff = paired_repeat_test(a_vals, b_vals, spec.stat, alpha=alpha, metric=spec.name)
        elif test == "two_level_bootstrap":
            eff = paired_bootstrap_diff(
                a_vals, b_vals, spec.stat, n_boot=n_boot, alpha=alpha, seed=seed + i, row_stat=spec.row_stat
            )
        else:
            raise ValueError(f"unknown test {test!r}; fix: repeat_t or two_level_bootstrap")
        rows.append(
            {
                "arm": arm,
                "baseline": baseline,
                "metric": spec.name,
                "unit": spec.unit,
                "lower_is_better": spec.lower_is_better,
                "baseline_value": eff.a_value,
                "arm_value": eff.b_value,
                "diff": eff.diff,
                "diff_lo": eff.diff_lo,
                "diff_hi": eff.diff_hi,
                "ratio": eff.ratio,
                "ratio_lo": eff.ratio_lo,
                "ratio_hi": eff.ratio_hi,
                "p_value": eff.p_value,
                "n_baseline": eff.n_a,
                "n_arm": eff.n_b,
                "test": test,
                "alpha": alpha,
            }
        )
    table = pd.DataFrame(rows)
    p = table["p_value"].fillna(1.0).to_numpy()
    significant = np.zeros(len(table), dtype=bool)
    if targets:
        is_target = table["metric"].isin(targets).to_numpy()
        table["family"] = np.where(is_target, "target", "side effect")
        significant[is_target] = holm(p[is_target].tolist(), alpha)
        gate_open = bool(is_target.any() and significant[is_target].all())
        if gate_open:
            significant[~is_target] = holm(p[~is_target].tolist(), alpha)
        table["tested"] = is_target | gate_open
    else:
        table["family"] = "all"
        significant[:] = holm(p.tolist(), alpha)
        table["tested"] = True
    table["significant"] = significant
    better = np.where(table["lower_is_better"], table["diff"] < 0, table["diff"] > 0)
    table["direction"] = np.where(~table["significant"], "none", np.where(better, "better", "worse"))
    return table


def arm_verdict(effects: pd.DataFrame, target_metrics: tuple[str, ...]) -> tuple[str, list[str]]:
    """improves: a target metric is significantly better and none is significantly worse;
    regresses: a target metric is significantly worse; else no detectable change. Side effects (a
    non-target metric significantly worse) are returned as reasons, not hidden; when the side-effect family
    was not tested (not every target moved), non-target metrics whose own CI excludes no change are listed
    as unconfirmed (not multiplicity-controlled)."""
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
    if "tested" in effects:
        raw = effects[~effects["tested"].astype(bool) & ((effects["ratio_lo"] > 1) | (effects["ratio_hi"] < 1))]
        for _, r in raw.iterrows():
            reasons.append(
                f"{r['metric']}: x{r['ratio']:.3f}, CI [{r['ratio_lo']:.3f}, {r['ratio_hi']:.3f}] "
                "(unconfirmed side effect: not tested, the target metrics did not all move)"
            )
    if effects["p_value"].isna().all():
        reasons.append("no test was possible (the repeat-level test needs >= 2 repeats with data in both arms)")
    if (targets["direction"] == "worse").any():
        return "regresses", reasons
    if (targets["direction"] == "better").any():
        return "improves", reasons
    reasons.append("no target metric moved beyond noise (every CI of the difference includes 0 after Holm)")
    return "no detectable change", reasons


def interaction_table(
    trials: pd.DataFrame,
    baseline: str,
    singles: list[str],
    combined: str,
    effects: pd.DataFrame,
    target_metrics: tuple[str, ...],
    *,
    alpha: float,
    seed: int = 0,
    n_boot: int = 2000,
    test: str = "repeat_t",
) -> pd.DataFrame:
    """For each target metric: the combined arm's ratio against the product of the single-change arms'
    ratios (all of them: the combined arm carries every change), with a bootstrap CI of observed/predicted.

    `improving_singles` counts the single arms whose effect on the metric is significantly better;
    `triggered` = at least two of them (SPEC A1: two changes that each help — is the combined gain their
    product, or do they overlap / compound?). `significant` is Holm-adjusted across the rows;
    `flagged` = triggered and significant: an interaction larger than the noise."""
    rows = []
    eff = effects.set_index(["arm", "metric"]) if len(effects) else None
    for i, name in enumerate(target_metrics):
        spec = METRICS_BY_NAME.get(name)
        if spec is None:
            continue
        base = arm_trial_values(trials, baseline, spec)
        single = [arm_trial_values(trials, a, spec) for a in singles]
        comb = arm_trial_values(trials, combined, spec)
        if test == "repeat_t":
            it = interaction_repeat_test(
                base, single, comb, spec.stat, alpha=alpha, metric=name, additive=spec.additive
            )
        else:
            it = interaction_bootstrap(
                base,
                single,
                comb,
                spec.stat,
                n_boot=n_boot,
                alpha=alpha,
                seed=seed + 100 + i,
                metric=name,
                row_stat=spec.row_stat,
                additive=spec.additive,
            )
        improving = [
            a
            for a in singles
            if eff is not None and (a, name) in eff.index and eff.loc[(a, name), "direction"] == "better"
        ]
        rows.append(
            {
                "metric": name,
                "unit": spec.unit,
                "lower_is_better": spec.lower_is_better,
                "singles": ",".join(singles),
                "single_ratios": ",".join(f"{r:.4g}" for r in it.single_ratios),
                "predicted_ratio": it.predicted_ratio,
                "observed_ratio": it.observed_ratio,
                "model": "additive" if spec.additive else "multiplicative",
                "interaction": it.interaction,
                "interaction_lo": it.lo,
                "interaction_hi": it.hi,
                "p_value": it.p_value,
                "alpha": alpha,
                "improving_singles": ",".join(improving),
                "triggered": len(improving) >= 2,
            }
        )
    table = pd.DataFrame(rows)
    if len(table):
        table["significant"] = holm(table["p_value"].fillna(1.0).tolist(), alpha)
        table["flagged"] = table["triggered"] & table["significant"]
    return table


def interaction_reason(row: pd.Series) -> str:
    model = (
        "sum of the single changes' differences" if row.get("model") == "additive" else "product of the single changes"
    )
    return (
        f"interaction on {row['metric']}: together x{row['observed_ratio']:.3f}, the {model} "
        f"predicts x{row['predicted_ratio']:.3f} (singles {row['single_ratios']}); observed/predicted "
        f"x{row['interaction']:.3f}, CI [{row['interaction_lo']:.3f}, {row['interaction_hi']:.3f}] excludes 1: "
        "the changes do not compose independently, so the single-change gains do not add up to the combined one"
    )
