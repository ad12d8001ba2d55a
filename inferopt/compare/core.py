"""Two flow runs side by side (`compare_runs`): the same headline metrics, with paired statistics where the
runs replayed the same workload (equal content hashes: `inferopt.ablate.compare.compare_arms` on the two runs'
candidate trials, and on their baseline trials, repeat r of one against repeat r of the other) and plainly
unpaired tests where they did not (`unpaired.py`: Mann-Whitney U on per-request values, Welch over trials).
The measure step has one trial per run, so its rows are always unpaired. Per slice (input/output length,
concurrency, cache hit) the measured baseline's p50/p99 and a Mann-Whitney p-value (unadjusted); the two
verdicts with their reasons, section by section.

Deliberately not here: finding or downloading runs and logging the comparison (`__main__.py`), rendering
(`render.py`), and any decision: a comparison reports differences, it does not accept or reject.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import pandas as pd
from scipy import stats

from inferopt.ablate.compare import ALL_METRICS, METRICS, MetricSpec, arm_trial_values, compare_arms
from inferopt.compare.runs import RunSide
from inferopt.compare.unpaired import per_request_effect, per_trial_effect
from inferopt.measure.slices import SLICE_DIMS
from inferopt.stats.inference import holm

Pairing = Literal["paired", "unpaired"]
ROLES = ("candidate", "baseline")
SLICE_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms")
PAIRED_TEST = "paired t over repeats (same workload hash; compare_arms)"


@dataclass(frozen=True)
class Comparison:
    """Run B against run A. `metrics`: a row per (source, metric) with both values, b - a, b / a, their CIs,
    the p-value, the test named, Holm per source, direction. `slices`: the measured baseline per slice.
    `verdicts`: a row per verdict section (decision, ablate, validate[...], gate ..., lint) with both texts."""

    a: RunSide
    b: RunSide
    pairing: Pairing
    pairing_reason: str
    metrics: pd.DataFrame
    slices: pd.DataFrame
    verdicts: pd.DataFrame


def _pairing(a: RunSide, b: RunSide) -> tuple[Pairing, str]:
    if a.workload_hash and a.workload_hash == b.workload_hash:
        return "paired", f"same workload (content hash {a.workload_hash}): ablation trials paired by repeat"
    return "unpaired", (
        f"different workloads (content hash {a.workload_hash or 'unknown'} vs {b.workload_hash or 'unknown'}): "
        "every test is unpaired"
    )


def _judge(table: pd.DataFrame, alpha: float) -> pd.DataFrame:
    """Holm over the rows of one source; the direction of a significant difference."""
    table = table.copy()
    table["significant"] = holm(table["p_value"].fillna(1.0).tolist(), alpha) if len(table) else []
    better = np.where(table["lower_is_better"], table["diff"] < 0, table["diff"] > 0)
    table["direction"] = np.where(~table["significant"], "none", np.where(better, "better", "worse"))
    return table


def _has_values(trials: pd.DataFrame, spec: MetricSpec) -> bool:
    return any(v.size for arm in ("A", "B") for v in arm_trial_values(trials, arm, spec))


def _unpaired(trials: pd.DataFrame, specs: tuple[MetricSpec, ...], alpha: float, n_boot: int, seed: int) -> list:
    rows = []
    for i, spec in enumerate(s for s in specs if _has_values(trials, s)):
        a_vals, b_vals = arm_trial_values(trials, "A", spec), arm_trial_values(trials, "B", spec)
        if spec.trial_key is None and spec.column != "tok_per_s_share":
            rows.append(per_request_effect(a_vals, b_vals, spec, alpha, n_boot, seed + i))
        else:
            per_trial = [np.array([spec.stat(v) for v in vals if v.size]) for vals in (a_vals, b_vals)]
            rows.append(per_trial_effect(per_trial[0], per_trial[1], spec, alpha))
    return rows


def _both(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    return pd.concat([a.assign(arm="A"), b.assign(arm="B")], ignore_index=True)


def ablate_rows(a: RunSide, b: RunSide, pairing: Pairing, alpha: float, n_boot: int, seed: int) -> pd.DataFrame:
    """The ablation's candidate (and baseline) trials of B against A's."""
    parts = []
    for role in ROLES:
        ta, tb = a.arm_trials(role), b.arm_trials(role)
        if not (len(ta) and len(tb)):
            continue
        trials = _both(ta, tb)
        if pairing == "paired":
            table = compare_arms(trials, "A", "B", alpha=alpha).assign(test=PAIRED_TEST)
        else:
            table = _judge(pd.DataFrame(_unpaired(trials, ALL_METRICS, alpha, n_boot, seed)), alpha)
        parts.append(table.assign(source=f"ablate:{role}"))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def measure_rows(a: RunSide, b: RunSide, alpha: float, n_boot: int, seed: int) -> pd.DataFrame:
    """Step 1's measured baseline, one trial per run: always unpaired."""
    if not (len(a.measure_phases) and len(b.measure_phases)):
        return pd.DataFrame()
    trials = pd.DataFrame(
        [
            {"arm": arm, "repeat": 0, "duration_s": side.measure_duration_s or np.nan, "phases": side.measure_phases}
            for arm, side in (("A", a), ("B", b))
        ]
    )
    return _judge(pd.DataFrame(_unpaired(trials, METRICS, alpha, n_boot, seed)), alpha).assign(source="measure")


def _q(values: np.ndarray, q: float) -> float:
    return float(np.quantile(values, q)) if values.size else np.nan


def _slice_row(dim: str, value: object, metric: str, x: np.ndarray, y: np.ndarray) -> dict:
    p = float(stats.mannwhitneyu(x, y).pvalue) if x.size >= 2 and y.size >= 2 else np.nan
    a50, b50, a99, b99 = _q(x, 0.5), _q(y, 0.5), _q(x, 0.99), _q(y, 0.99)
    return {
        "slice_dim": dim,
        "slice_value": str(value),
        "metric": metric,
        "n_a": int(x.size),
        "n_b": int(y.size),
        "a_p50": a50,
        "b_p50": b50,
        "ratio_p50": b50 / a50 if a50 else np.nan,
        "a_p99": a99,
        "b_p99": b99,
        "ratio_p99": b99 / a99 if a99 else np.nan,
        "p_unadjusted": p,
    }


def _groups(phases: pd.DataFrame, dim: str) -> dict:
    ok = phases[phases["outcome"] == "ok"]
    return {"all": ok} if dim == "all" else dict(tuple(ok.groupby(dim, observed=True)))


def slice_rows(a: RunSide, b: RunSide) -> pd.DataFrame:
    """Per slice of the measured baseline: n, p50 and p99 of each latency in both runs, their ratios, and a
    two-sided Mann-Whitney p-value (unadjusted: many slices, read it as a pointer, not a finding)."""
    pa, pb = a.measure_phases, b.measure_phases
    if not (len(pa) and len(pb)):
        return pd.DataFrame()
    rows = []
    for dim in [d for d in ("all", *SLICE_DIMS) if d == "all" or (d in pa and d in pb)]:
        ga, gb = _groups(pa, dim), _groups(pb, dim)
        for value in [v for v in ga if v in gb]:
            for metric in SLICE_METRICS:
                x, y = (g[value][metric].dropna().to_numpy(float) for g in (ga, gb))
                rows.append(_slice_row(dim, value, metric, x, y))
    return pd.DataFrame(rows)


def verdict_sections(reasons: tuple[str, ...]) -> dict[str, str]:
    """A verdict's reasons grouped by section: each unindented line ('ablate: ...', 'validate[burst]: FAIL')
    opens one, its indented lines belong to it; the first line is the decision."""
    sections: dict[str, list[str]] = {}
    key = "decision"
    for i, line in enumerate(reasons):
        if i and not line.startswith(" "):
            head = line.split(":", 1)[0].strip()
            key = head if head not in sections else f"{head} ({i})"
        sections.setdefault(key, []).append(line.strip() if not line.startswith(" ") else line)
    return {k: "\n".join(v) for k, v in sections.items()}


def verdict_rows(a: RunSide, b: RunSide) -> pd.DataFrame:
    """The two verdicts side by side, section by section (a section one run lacks reads 'absent')."""
    sa, sb = verdict_sections(a.reasons), verdict_sections(b.reasons)
    keys = list(dict.fromkeys([*sa, *sb]))
    rows = [{"section": "decision", "a": a.decision, "b": b.decision, "same": a.decision == b.decision}]
    for k in keys:
        ta, tb = sa.get(k, "absent"), sb.get(k, "absent")
        rows.append({"section": k if k != "decision" else "reasons", "a": ta, "b": tb, "same": ta == tb})
    return pd.DataFrame(rows)


def compare_runs(a: RunSide, b: RunSide, *, alpha: float = 0.05, n_boot: int = 1000, seed: int = 0) -> Comparison:
    """Run B against run A (see the module docstring). Pure: reads nothing beyond the two sides."""
    pairing, why = _pairing(a, b)
    parts = [measure_rows(a, b, alpha, n_boot, seed), ablate_rows(a, b, pairing, alpha, n_boot, seed + 100)]
    metrics = (
        pd.concat([t for t in parts if len(t)], ignore_index=True) if any(len(t) for t in parts) else pd.DataFrame()
    )
    if len(metrics):
        first = ["source", "metric", "unit", "baseline_value", "arm_value", "diff", "diff_lo", "diff_hi", "ratio"]
        rest = ["ratio_lo", "ratio_hi", "p_value", "significant", "direction", "test", "n_baseline", "n_arm"]
        metrics = metrics[first + rest + ["lower_is_better"]].rename(columns={"baseline_value": "a", "arm_value": "b"})
    return Comparison(a, b, pairing, why, metrics, slice_rows(a, b), verdict_rows(a, b))
