"""Effects of an arm against the baseline, beyond noise, in two families with their own error control:
benefit (the target metrics, two-sided, Holm) and harm (every metric, one-sided against a tolerance; declared
primaries first, graphical weighted Holm), so a regression beyond tolerance is found whether or not the targets
moved; a per-arm verdict (improves / regresses / no detectable change; `run.py` adds skipped / failed) with the
minimum detectable effect per metric.

Failures count: latency percentiles are over every request, a failed one (timeout, rejected, error) censored
at the request deadline; failure rate, SLO attainment and goodput (requests/s meeting every SLO) are metrics.
The default test is over repeats (`inferopt.stats.inference.paired_repeat_test`, log ratios; share and
goodput metrics on the difference scale). See docs/method.md (A1, M5).

Deliberately not here: running trials, and judging SLOs (validation) or quality (gate).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Callable, Literal, get_args

import numpy as np
import pandas as pd

from inferopt.ablate.interaction import interaction_bootstrap, interaction_repeat_test
from inferopt.config.settings import PRIMARY_HARM, PairedTest
from inferopt.measure.slo import RequestSLO
from inferopt.stats.inference import (
    Effect,
    RowStat,
    harm_p_value,
    holm,
    min_detectable_shift,
    paired_bootstrap_diff,
    paired_repeat_diff_test,
    paired_repeat_test,
    quantile,
    quantile_rows,
    sum_rows,
    two_family_holm,
)

_EXACT = 1e-12  # relative: a difference this small between byte counts or shares is float round-off


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
    scale: Literal["log", "diff"] = "log"  # the repeat test on log ratios, or on differences (often-zero metrics)
    tolerance: Literal["relative", "absolute"] = "relative"  # the harm bound: a fraction of the baseline, or a share


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("ttft_ms_p50", "ttft_ms", partial(quantile, q=0.5), True, "ms", quantile_rows(0.5)),
    MetricSpec("ttft_ms_p99", "ttft_ms", partial(quantile, q=0.99), True, "ms", quantile_rows(0.99)),
    MetricSpec("tpot_ms_p50", "tpot_ms", partial(quantile, q=0.5), True, "ms", quantile_rows(0.5)),
    MetricSpec("tpot_ms_p95", "tpot_ms", partial(quantile, q=0.95), True, "ms", quantile_rows(0.95)),
    MetricSpec("e2e_ms_p99", "e2e_ms", partial(quantile, q=0.99), True, "ms", quantile_rows(0.99)),
    MetricSpec("output_tok_per_s", "tok_per_s_share", np.sum, False, "tok/s", sum_rows),
    MetricSpec("failure_rate", "failed", np.mean, True, "share", scale="diff", tolerance="absolute"),
    MetricSpec("slo_attainment", "slo_met", np.mean, False, "share", scale="diff", tolerance="absolute"),
    MetricSpec("goodput_req_per_s", "goodput_share", np.sum, False, "req/s", sum_rows, scale="diff"),
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
    MetricSpec("gpu_energy_j", "", _one, True, "J", quantile_rows(0.5), trial_key="gpu_energy_j", additive=True),
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
    phases: pd.DataFrame,
    duration_s: float,
    spec: MetricSpec,
    resources: dict | None = None,
    ctx: RequestSLO = RequestSLO(),  # noqa: B008 - frozen, so one shared default is safe
) -> np.ndarray:
    """Per-request values of `spec` in one trial; every request counts (a failed one at the deadline)."""
    if spec.trial_key is not None:
        value = (resources or {}).get(spec.trial_key) if isinstance(resources, dict) else None
        return np.array([float(value)]) if value is not None and np.isfinite(value) else np.array([])
    ok = (phases["outcome"] == "ok").to_numpy()
    if spec.column == "tok_per_s_share":  # failures contribute 0 tokens: the sum is the trial's output tokens/s
        return np.where(ok, phases["output_len"].to_numpy(float), 0.0) / max(duration_s, 1e-9)
    if spec.column == "failed":
        return (~ok).astype(float)
    if spec.column == "slo_met":
        return ctx.meets_slo(phases).astype(float)
    if spec.column == "goodput_share":  # requests meeting every SLO per second, failures in the denominator
        return ctx.meets_slo(phases).astype(float) / max(duration_s, 1e-9)
    served = phases.loc[ok, spec.column].dropna().to_numpy(float)
    return np.concatenate([served, np.full(int((~ok).sum()), ctx.deadline_ms)])  # censored at the deadline


METRICS_BY_NAME = {m.name: m for m in ALL_METRICS}


def arm_trial_values(
    trials: pd.DataFrame,
    arm: str,
    spec: MetricSpec,
    ctx: RequestSLO = RequestSLO(),  # noqa: B008 - frozen
) -> list[np.ndarray]:
    """Per-request values of `spec` for each trial of `arm`, in repeat order (a per-trial scalar: one value,
    from the trials' `resources` column; none when the frame has no such column)."""
    sub = trials[trials["arm"] == arm].sort_values("repeat")
    res = sub["resources"] if "resources" in sub else [None] * len(sub)
    cols = zip(sub["phases"], sub["duration_s"], res, strict=True)
    return [_trial_values(p, d, spec, r, ctx) for p, d, r in cols]


def _has_data(trials: pd.DataFrame, arms: tuple[str, str], spec: MetricSpec) -> bool:
    return spec.trial_key is None or any(v.size for a in arms for v in arm_trial_values(trials, a, spec))


def _harm_bound(spec: MetricSpec, eff: Effect, tolerance: float, tolerance_abs: float) -> tuple[float, float]:
    """(the tolerance as stated, the harm test's bound on its own scale: worse is up for lower-is-better)."""
    sign = 1.0 if spec.lower_is_better else -1.0
    if spec.tolerance == "absolute":
        return tolerance_abs, sign * tolerance_abs
    if spec.scale == "diff":
        return tolerance, sign * tolerance * abs(eff.a_value) if math.isfinite(eff.a_value) else math.nan
    return tolerance, math.log1p(sign * tolerance)


def _power_columns(spec: MetricSpec, eff: Effect, alpha: float, tolerance: float, tolerance_abs: float) -> dict:
    """The harm test's bound and p-value, and the minimum detectable effect at this run's repeats and noise."""
    tol, bound = _harm_bound(spec, eff, tolerance, tolerance_abs)
    shift = min_detectable_shift(eff.se_d, eff.n_pairs, alpha)
    mde = math.expm1(shift) if spec.scale == "log" and math.isfinite(shift) else shift
    return {
        "scale": spec.scale,
        "tolerance": tol,
        "tolerance_kind": spec.tolerance,
        "harm_p": harm_p_value(eff, bound, worse_is_up=spec.lower_is_better),
        "mde": mde,  # log scale: the relative change (0.08 = 8 %); diff scale: the metric's own unit
    }


PAIRED_TESTS: tuple[str, ...] = get_args(PairedTest)  # the `test` of compare_arms and interaction_table


def _known_test(test: str) -> None:
    if test not in PAIRED_TESTS:
        raise ValueError(f"unknown test {test!r}; fix: repeat_t or two_level_bootstrap")


def compare_arms(
    trials: pd.DataFrame,
    baseline: str,
    arm: str,
    *,
    alpha: float,
    seed: int = 0,
    n_boot: int = 2000,
    test: PairedTest = "repeat_t",
    targets: tuple[str, ...] = (),
    metrics: tuple[MetricSpec, ...] = ALL_METRICS,
    context: RequestSLO = RequestSLO(),  # noqa: B008 - frozen
    harm_tolerance: float = 0.05,
    harm_tolerance_abs: float = 0.01,
    tolerances: Mapping[str, float] | None = None,
    primary_harm: tuple[str, ...] = PRIMARY_HARM,
    primary_alpha_share: float = 0.8,
) -> pd.DataFrame:
    """Effects table for `arm` vs `baseline`: one row per metric with baseline/arm values, diff and ratio with
    CIs, the two-sided p-value, the benefit and harm tests, the minimum detectable effect, the direction.

    `trials` has one row per trial: arm, repeat, duration_s, phases (a DataFrame). `test`: "repeat_t" (the
    default: a t-test over repeats) or "two_level_bootstrap" (`n_boot` resamples; no harm test, no MDE).
    Benefit family (with `targets`): the target metrics, two-sided, Holm at `alpha`; without targets every
    metric is in it (the nightly). Harm family: every metric, one-sided — is the arm worse than the baseline by
    more than the tolerance (`harm_tolerance` relative; `harm_tolerance_abs` for share metrics; `tolerances`
    per metric). Its primary hypotheses (`primary_harm` and every metric with a declared tolerance) start with
    `primary_alpha_share` of alpha, the others with the rest (`two_family_holm`). Each family's family-wise
    error stays <= alpha."""
    _known_test(test)
    rows = []
    tolerances = tolerances or {}
    for i, spec in enumerate(m for m in metrics if _has_data(trials, (baseline, arm), m)):
        a_vals = arm_trial_values(trials, baseline, spec, context)
        b_vals = arm_trial_values(trials, arm, spec, context)
        if test == "repeat_t":
            fn = paired_repeat_diff_test if spec.scale == "diff" else paired_repeat_test
            eff = fn(a_vals, b_vals, spec.stat, alpha=alpha, metric=spec.name)
        else:
            eff = paired_bootstrap_diff(
                a_vals, b_vals, spec.stat, n_boot=n_boot, alpha=alpha, seed=seed + i, row_stat=spec.row_stat
            )
        tol = tolerances.get(spec.name, harm_tolerance_abs if spec.tolerance == "absolute" else harm_tolerance)
        rows.append(_effect_row(arm, baseline, spec, eff, test, alpha) | _power_columns(spec, eff, alpha, tol, tol))
    primary = tuple(primary_harm) + tuple(tolerances)
    return _judge_families(pd.DataFrame(rows), targets, alpha, primary, primary_alpha_share)


def _effect_row(arm: str, baseline: str, spec: MetricSpec, eff: Effect, test: str, alpha: float) -> dict:
    return {
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
        "n_pairs": eff.n_pairs,
        "se_d": eff.se_d,
        "test": test,
        "alpha": alpha,
    }


def _judge_families(
    table: pd.DataFrame, targets: tuple[str, ...], alpha: float, primary: tuple[str, ...], primary_share: float
) -> pd.DataFrame:
    """Benefit family (targets, or every metric without targets: two-sided Holm) and harm family (every
    metric: one-sided against its tolerance; `primary` first, `two_family_holm`); `direction` better / worse /
    none, `significant` either; `harm_family` primary / secondary and `harm_level` its starting alpha."""
    if table.empty:
        return table
    p = table["p_value"].fillna(1.0).to_numpy()
    in_benefit = table["metric"].isin(targets).to_numpy() if targets else np.ones(len(table), dtype=bool)
    table["family"] = np.where(in_benefit, "target" if targets else "all", "side effect")
    benefit = np.zeros(len(table), dtype=bool)
    benefit[in_benefit] = holm(p[in_benefit].tolist(), alpha)
    table["tested"] = True  # every metric is tested: for benefit (targets) and for harm (all)
    is_primary = table["metric"].isin(primary).to_numpy()
    testable = _harm_testable(table)
    harm = np.zeros(len(table), dtype=bool)
    idx = np.flatnonzero(testable)
    harm[idx] = two_family_holm(table["harm_p"].to_numpy()[idx].tolist(), is_primary[idx], alpha, primary_share)
    table["harm"] = harm
    table["harm_family"] = np.where(~testable, "untestable", np.where(is_primary, "primary", "secondary"))
    n_p, n_s = int((is_primary & testable).sum()), int((~is_primary & testable).sum())
    share = primary_share if n_p and n_s else 1.0
    table["harm_level"] = np.where(
        ~testable,
        np.nan,
        np.where(is_primary, alpha * share / max(n_p, 1), alpha * (1.0 - share if n_p else 1.0) / max(n_s, 1)),
    )
    better = np.where(table["lower_is_better"], table["diff"] < 0, table["diff"] > 0)
    worse_benefit = benefit & ~better
    table["significant"] = benefit | table["harm"].to_numpy()
    table["direction"] = np.where(
        benefit & better, "better", np.where(worse_benefit | table["harm"].to_numpy(), "worse", "none")
    )
    return table


def _harm_testable(table: pd.DataFrame) -> np.ndarray:
    """False for a metric identical in every repeat of both arms (no failure anywhere, the same weight bytes):
    its harm test has p = 1 whatever the level, so it leaves the family and its share of alpha goes to the
    others — Tarone's (1990) rule for hypotheses that cannot reach significance, here because the data hold
    no variation at all (a count that is 0 in every trial, a deterministic byte count). A metric with no
    spread but a difference (bytes that did change) stays: its p is exactly 0 or 1 and it is decided."""
    se = pd.to_numeric(table.get("se_d"), errors="coerce").to_numpy(dtype=float)
    diff = pd.to_numeric(table.get("diff"), errors="coerce").to_numpy(dtype=float)
    constant = (se == 0.0) & (np.abs(diff) <= _EXACT * np.maximum(np.abs(table["baseline_value"].to_numpy(float)), 1))
    return ~constant & table["harm_p"].notna().to_numpy()


def _effect_text(r: pd.Series) -> str:
    return (
        f"{r['metric']}: {r['baseline_value']:.4g} -> {r['arm_value']:.4g} {r['unit']} "
        f"(x{r['ratio']:.3f}, CI [{r['ratio_lo']:.3f}, {r['ratio_hi']:.3f}]"
    )


def _tolerance_text(r: pd.Series) -> str:
    if r.get("tolerance_kind") == "absolute":
        return f"{r['tolerance']:g} absolute"
    return f"{100 * r['tolerance']:g} %"


def arm_verdict(effects: pd.DataFrame, target_metrics: tuple[str, ...]) -> tuple[str, list[str]]:
    """improves: a target metric is significantly better and no metric is worse (benefit: a target worse;
    harm: any metric worse beyond its tolerance); regresses: a target is significantly worse, or any metric
    is worse beyond its tolerance (the harm family), whether or not the targets moved; else no detectable
    change. Every moved metric is a reason, and so is each metric whose CI says worse within tolerance."""
    reasons = []
    unknown = set(target_metrics) - set(effects["metric"])
    if unknown:
        reasons.append(f"target metrics without a measurement: {sorted(unknown)}")
    for _, r in effects.iterrows():
        target = r["metric"] in target_metrics
        if r["direction"] == "better" or (r["direction"] == "worse" and not r.get("harm", False)):
            reasons.append(f"{_effect_text(r)}, {r['direction']}{'' if target else ', side effect'})")
        elif r.get("harm", False):
            reasons.append(
                f"{_effect_text(r)}): worse beyond the {_tolerance_text(r)} tolerance (harm test p = "
                f"{r['harm_p']:.2g}, {_harm_family_text(r, effects)}){'' if target else ', side effect'}"
            )
        elif _ci_says_worse(r):
            reasons.append(
                f"{_effect_text(r)}): worse, but not shown beyond the {_tolerance_text(r)} tolerance at this run's "
                f"power (one-sided p = {r.get('harm_p', float('nan')):.2g}, {_harm_family_text(r, effects)}, "
                f"{int(r.get('n_pairs', 0) or 0)} repeats; smallest detectable change "
                f"x{1 + r.get('mde', float('nan')):.2f})"
                if r.get("scale", "log") == "log"
                else f"{_effect_text(r)}): worse, but not shown beyond the {_tolerance_text(r)} tolerance"
            )
    if effects["p_value"].isna().all():
        reasons.append("no test was possible (the repeat-level test needs >= 2 repeats with data in both arms)")
    targets = effects[effects["metric"].isin(target_metrics)]
    harmed = effects[effects["harm"].astype(bool)] if "harm" in effects else effects.iloc[0:0]
    tested = int(effects["harm_p"].notna().sum()) if "harm_p" in effects else 0
    if "harm_family" in effects:  # the untestable ones (identical in every repeat) were left out of the family
        tested = int((effects["harm_p"].notna() & (effects["harm_family"] != "untestable")).sum())
    if tested and not len(harmed):
        reasons.append(
            f"harm: no metric worse beyond its tolerance (one-sided tests over {tested} metrics; "
            f"{_harm_design_text(effects)})"
        )
    if (targets["direction"] == "worse").any() or len(harmed):
        return "regresses", reasons
    if (targets["direction"] == "better").any():
        return "improves", reasons
    reasons.append("no target metric moved beyond noise (every CI of the difference includes 0 after Holm)")
    return "no detectable change", reasons


def _harm_family_text(r: pd.Series, effects: pd.DataFrame) -> str:
    """Which harm family a metric was tested in and at what starting level."""
    fam = r.get("harm_family", "primary")
    n = int((effects["harm_family"] == fam).sum()) if "harm_family" in effects else len(effects)
    level = r.get("harm_level", float("nan"))
    return f"{fam} harm family of {n}, first step at alpha {level:.2g}, Holm"


def _harm_design_text(effects: pd.DataFrame) -> str:
    if "harm_family" not in effects:
        return "Holm"
    primary = effects.loc[effects["harm_family"] == "primary", "metric"].tolist()
    text = f"primaries {primary} first, the rest after (weighted Holm, family-wise error <= alpha over all)"
    constant = effects.loc[effects["harm_family"] == "untestable", "metric"].tolist()
    if constant:
        text += f"; {constant} identical in every repeat of both arms, so untestable and left out (Tarone)"
    return text


def _ci_says_worse(r: pd.Series) -> bool:
    lo, hi = r["ratio_lo"], r["ratio_hi"]
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return False
    return bool(lo > 1 if r["lower_is_better"] else hi < 1)


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
    test: PairedTest = "repeat_t",
) -> pd.DataFrame:
    """For each target metric: the combined arm's ratio against the product of the single-change arms'
    ratios (all of them: the combined arm carries every change), with a bootstrap CI of observed/predicted.

    `improving_singles` counts the single arms whose effect on the metric is significantly better;
    `triggered` = at least two of them (SPEC A1: two changes that each help — is the combined gain their
    product, or do they overlap / compound?). `significant` is Holm-adjusted across the rows;
    `flagged` = triggered and significant: an interaction larger than the noise."""
    _known_test(test)
    rows = []
    eff = effects.set_index(["arm", "metric"]) if len(effects) else None
    for i, name in enumerate(target_metrics):
        spec = METRICS_BY_NAME.get(name)
        if spec is None or spec.scale == "diff":  # composition of shares and rates: not a product of ratios
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
