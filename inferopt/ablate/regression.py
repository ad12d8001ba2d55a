"""Nightly regression check: tonight's re-measurement of the accepted production configuration against the trials
that got it accepted, with the ablation's own statistics (SPEC A1).

The accepted run's ablation holds the production system's trials (arm `candidate`: per-request phases and each
trial's duration). Tonight the same system replays the same workload (same seed, warm-ups, timeouts) for some
repeats (`dispatch.run_arm_trials`); `compare_to_accepted` judges them per metric of `compare.METRICS` with the
repeat-level paired t-test, Holm across all metrics (no gatekeeping: every metric is watched). A regression is
loud only when it is beyond noise AND beyond `tolerance` (a 0.5 % slowdown can be significant and irrelevant);
`power_check` says when the repeats cannot see a regression of `tolerance`, and how many would.

Deliberately not here: finding the accepted run, running the trials, MLflow tags, failing the flow
(`flows/nightly.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from inferopt.ablate.compare import compare_arms
from inferopt.measure.session import MeasuredRun
from inferopt.measure.slo import RequestSLO
from inferopt.stats.inference import min_detectable_shift, repeats_needed

ACCEPTED = "accepted"
TONIGHT = "tonight"


@dataclass
class RegressionCheck:
    regressed: bool
    reasons: list[str]
    effects: pd.DataFrame  # compare_arms's table: accepted (baseline) vs tonight
    n_pairs: int
    failed_share_accepted: float
    failed_share_tonight: float
    notes: list[str] = field(default_factory=list)
    underpowered: list[str] = field(default_factory=list)  # metrics whose regression of `tolerance` it cannot see


def trials_from_runs(runs: list[MeasuredRun], arm: str = TONIGHT) -> pd.DataFrame:
    """The ablation's trial rows (arm, repeat, duration_s, failed, phases) for runs of one system."""
    return pd.DataFrame(
        [
            {"arm": arm, "repeat": r.tags.trial, "duration_s": r.duration_s, "failed": r.failed, "phases": r.phases}
            for r in runs
        ],
        columns=["arm", "repeat", "duration_s", "failed", "phases"],
    )


def trials_from_ablation(
    phases: pd.DataFrame, trials: pd.DataFrame, arm: str = "candidate", as_arm: str = ACCEPTED
) -> pd.DataFrame:
    """One arm's trials from an ablation's logged tables (`phases.parquet`: a row per request with `arm`
    and `trial`; `trials.parquet`: a row per trial with `duration_s`, `failed`), renamed to `as_arm`."""
    rows = []
    for t in trials[trials["arm"] == arm].sort_values("repeat").itertuples():
        ph = phases[(phases["arm"] == arm) & (phases["trial"] == t.repeat)]
        rows.append(
            {
                "arm": as_arm,
                "repeat": int(t.repeat),
                "duration_s": float(t.duration_s),
                "failed": bool(t.failed),
                "phases": ph.reset_index(drop=True),
            }
        )
    return pd.DataFrame(rows, columns=["arm", "repeat", "duration_s", "failed", "phases"])


def _failed_share(trials: pd.DataFrame) -> float:
    ok = trials[~trials["failed"]]
    if not len(ok):
        return math.nan
    outcomes = pd.concat([p["outcome"] for p in ok["phases"]], ignore_index=True)
    return float((outcomes != "ok").mean()) if len(outcomes) else math.nan


def power_check(effects: pd.DataFrame, alpha: float, tolerance: float) -> list[str]:
    """Per log-scale metric: can this many pairs see a regression of `tolerance` (power 0.8, at alpha over the
    number of metrics — Holm's first step)? One line per metric that cannot, with the repeats it would need."""
    lines = []
    logs = effects[effects["scale"] == "log"] if "scale" in effects else effects.iloc[0:0]
    level = alpha / max(len(effects), 1)
    bound = math.log1p(tolerance)
    for r in logs.itertuples():
        shift = min_detectable_shift(r.se_d, int(r.n_pairs), level)
        if math.isfinite(shift) and shift <= bound:
            continue
        seen = f"x{math.exp(shift):.3f}" if math.isfinite(shift) else "nothing (no spread measured)"
        need = repeats_needed(r.se_d, int(r.n_pairs), bound, level)
        lines.append(
            f"underpowered: cannot detect a regression of {tolerance:.0%} on {r.metric} with {int(r.n_pairs)} "
            f"pairs (smallest detectable: {seen}); fix: repeats >= {need}"
            if need
            else f"underpowered: cannot detect a regression of {tolerance:.0%} on {r.metric} with {int(r.n_pairs)} "
            f"pairs (smallest detectable: {seen}); more repeats, or a quieter machine"
        )
    return lines


def compare_to_accepted(
    accepted: pd.DataFrame,
    tonight: pd.DataFrame,
    *,
    alpha: float = 0.05,
    tolerance: float = 0.05,
    context: RequestSLO = RequestSLO(),  # noqa: B008 - frozen
) -> RegressionCheck:
    """Judge tonight's trials against the accepted ones. Raises ValueError when fewer than two repeats on
    either side ran: there is no spread to judge noise by.

    Regressed: a metric significantly worse at `alpha` whose ratio is past 1 ± tolerance; any of tonight's
    trials crashed; or tonight's share of failed requests (timeout / rejected / error) exceeds the accepted
    run's by more than `tolerance`. Pairing: repeat r of tonight is matched with repeat r of the accepted run.
    Across days no machine drift is shared, so the pairing buys nothing — but it costs no validity either: the
    per-pair log ratios are then independent with variance var_accepted + var_tonight, which is what the
    t-test's spread measures."""
    if not 0.0 <= tolerance < 1.0:
        raise ValueError(f"tolerance = {tolerance}: expected a fraction in [0, 1), e.g. 0.05")
    reasons: list[str] = []
    crashed = tonight[tonight["failed"]]
    for t in crashed.itertuples():
        reasons.append(f"tonight's trial {t.repeat} of the production configuration crashed")
    acc_ok = accepted[~accepted["failed"]].copy()
    ton_ok = tonight[~tonight["failed"]].copy()
    # pair by position among the usable repeats (a crashed repeat on either side leaves no pair)
    n_pairs = min(len(acc_ok), len(ton_ok))
    if n_pairs < 2 and not reasons:
        raise ValueError(
            f"only {len(acc_ok)} accepted and {len(ton_ok)} tonight usable trial(s): the paired test "
            "needs >= 2 of each; fix: repeats >= 2 (and an accepted run with >= 2 candidate trials)"
        )
    effects = pd.DataFrame()
    if n_pairs >= 2:
        acc_ok = acc_ok.sort_values("repeat").head(n_pairs).assign(repeat=range(n_pairs))
        ton_ok = ton_ok.sort_values("repeat").head(n_pairs).assign(repeat=range(n_pairs))
        both = pd.concat([acc_ok, ton_ok], ignore_index=True)
        effects = compare_arms(both, ACCEPTED, TONIGHT, alpha=alpha, test="repeat_t", context=context)
        bound = math.log1p(tolerance)
        effects["beyond_tolerance"] = effects["ratio"].map(
            lambda r: math.isfinite(r) and r > 0 and abs(math.log(r)) > bound
        )
        effects["regression"] = (effects["direction"] == "worse") & effects["beyond_tolerance"]
        for r in effects[effects["regression"]].itertuples():
            reasons.append(
                f"{r.metric}: {r.baseline_value:.4g} -> {r.arm_value:.4g} {r.unit} (x{r.ratio:.3f}, CI "
                f"[{r.ratio_lo:.3f}, {r.ratio_hi:.3f}], p = {r.p_value:.3g}; worse beyond noise at alpha "
                f"{alpha:g} (Holm) and beyond the {tolerance:.0%} tolerance)"
            )
    share_acc, share_ton = _failed_share(accepted), _failed_share(tonight)
    if math.isfinite(share_ton) and math.isfinite(share_acc) and share_ton > share_acc + tolerance:
        reasons.append(
            f"failed requests: {share_acc:.1%} accepted -> {share_ton:.1%} tonight "
            f"(more than {tolerance:.0%} points worse)"
        )
    notes = [] if n_pairs >= len(tonight) else [f"{len(tonight) - n_pairs} of tonight's trials had no usable pair"]
    return RegressionCheck(
        regressed=bool(reasons),
        reasons=reasons,
        effects=effects,
        n_pairs=n_pairs,
        failed_share_accepted=share_acc,
        failed_share_tonight=share_ton,
        notes=notes,
        underpowered=power_check(effects, alpha, tolerance) if len(effects) else [],
    )
