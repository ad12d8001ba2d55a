"""Sliced quality comparison, baseline vs candidate on the same documents (SPEC G1, G2): paired bootstrap
confidence intervals per (metric, slice), a non-inferiority decision per slice, and calibration (ECE, Brier).

Input: two `samples` tables from `lmeval.py` (one row per document x metric, with the document's slice).
Documents are paired by (task_name, id); a slice's statistic is the mean per-document difference candidate -
baseline, resampled over documents (the same resampled documents for both arms). Decision per slice, with
margin m (a drop the product tolerates) and a two-sided (1 - alpha) interval [lo, hi]:
  pass          lo > -m           the candidate is no worse than m, with confidence
  fail          hi < -m           the candidate is worse than m, with confidence
  inconclusive  otherwise         too few documents to tell: more data, not a pass
Optionally MLPerf's rule (`mlperf_ratio`, e.g. 0.99). Per slice also `mde`, the smallest drop its size and
baseline rate could detect; a slice at the floor (baseline <= m: no drop of m can happen) or whose mde exceeds
its baseline is `uninformative`, never a pass. Overall: fail, else inconclusive, else pass over the rest.
Deliberately not here: running the models (lmeval.py) and the final verdict (inferopt.verdict).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd

# the metric that decides each task (others are reported and gated too when listed in `gated_metrics`)
PRIMARY_METRIC = {"arith": "exact", "kv": "exact", "tool": "args_exact", "mc": "acc"}
GATED_METRICS = ("exact", "args_exact", "numbers_exact", "json_valid", "acc")


@dataclass(frozen=True)
class SliceSpec:
    name: str  # e.g. "task=kv,context=long"
    filters: tuple[tuple[str, str], ...]


def slice_specs(samples: pd.DataFrame) -> list[SliceSpec]:
    """Every task; task x language; task x context where a task has both; and the high-risk slice."""
    out: list[SliceSpec] = []
    for task in sorted(samples["task"].unique()):
        t = samples[samples["task"] == task]
        out.append(SliceSpec(f"task={task}", (("task", task),)))
        for dim in ("lang", "context"):
            values = sorted(t[dim].unique())
            if len(values) > 1:
                out += [SliceSpec(f"task={task},{dim}={v}", (("task", task), (dim, v))) for v in values]
    if "risk" in samples and (samples["risk"] == "high").any():
        out.append(SliceSpec("risk=high", (("risk", "high"),)))
    return out


def paired_table(base: pd.DataFrame, cand: pd.DataFrame) -> pd.DataFrame:
    """One row per (document, metric) with `base` and `cand` values; documents missing on either side are
    dropped and counted (a paired comparison needs both)."""
    keys = ["task_name", "id", "metric"]
    slice_cols = ["task", "lang", "context", "risk"]
    b = base[keys + slice_cols + ["value"]].rename(columns={"value": "base"})
    c = cand[keys + ["value"]].rename(columns={"value": "cand"})
    return b.merge(c, on=keys, how="inner")


def bootstrap_mean_diff(
    diff: np.ndarray, *, samples: int = 2000, alpha: float = 0.05, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of the mean of paired differences (resampling documents)."""
    diff = np.asarray(diff, dtype=float)
    if len(diff) == 0:
        return float("nan"), float("nan")
    if np.all(diff == diff[0]):
        return float(diff[0]), float(diff[0])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(diff), size=(samples, len(diff)))
    means = diff[idx].mean(axis=1)
    return float(np.quantile(means, alpha / 2)), float(np.quantile(means, 1 - alpha / 2))


def decide_slice(
    lo: float, hi: float, margin: float, base_mean: float, cand_mean: float, mlperf_ratio: float | None = None
) -> str:
    if np.isnan(lo) or np.isnan(hi):
        return "inconclusive"
    if hi < -margin:
        return "fail"
    if mlperf_ratio is not None and base_mean > 0 and cand_mean < mlperf_ratio * base_mean:
        return "fail"
    return "pass" if lo > -margin else "inconclusive"


def min_detectable_drop(base_mean: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true drop of a success rate a two-sided test at `alpha` detects with probability `power`
    on `n` paired documents at baseline rate `base_mean` — conservatively, as if unpaired at the null:
    (z_{1-alpha/2} + z_{power}) x sqrt(2 p (1 - p) / n), p kept inside [1/n, 1 - 1/n]."""
    from scipy.stats import norm  # lazy: scipy's import is slow and only the gate needs it here

    if n <= 0 or not np.isfinite(base_mean):
        return float("nan")
    p = min(max(base_mean, 1.0 / n), 1.0 - 1.0 / n) if n > 1 else 0.5
    return float((norm.ppf(1.0 - alpha / 2.0) + norm.ppf(power)) * np.sqrt(2.0 * p * (1.0 - p) / n))


def informative(base_mean: float, margin: float, mde: float) -> bool:
    """Could this slice show the harm it guards against? Not at the floor (baseline <= margin) nor when the
    smallest detectable drop is larger than everything the baseline could lose."""
    return bool(base_mean > margin and np.isfinite(mde) and mde <= base_mean)


def compare(
    base: pd.DataFrame,
    cand: pd.DataFrame,
    *,
    margin: float = 0.05,
    slice_margins: dict[str, float] | None = None,
    mlperf_ratio: float | None = None,
    alpha: float = 0.05,
    samples: int = 2000,
    seed: int = 0,
    gated_metrics: tuple[str, ...] = GATED_METRICS,
) -> pd.DataFrame:
    """The per-slice table: slice, metric, n, base_mean, cand_mean, diff, ci_lo, ci_hi, margin, status."""
    paired = paired_table(base, cand)
    rows = []
    for spec in slice_specs(paired):
        sub = paired
        for col, val in spec.filters:
            sub = sub[sub[col] == val]
        for metric in sorted(sub["metric"].unique()):
            if metric not in gated_metrics:
                continue
            m = sub[sub["metric"] == metric]
            diff = (m["cand"] - m["base"]).to_numpy(float)
            lo, hi = bootstrap_mean_diff(diff, samples=samples, alpha=alpha, seed=seed)
            mg = (slice_margins or {}).get(spec.name, margin)
            bm, cm = float(m["base"].mean()), float(m["cand"].mean())
            mde = min_detectable_drop(bm, int(len(m)), alpha)
            status = decide_slice(lo, hi, mg, bm, cm, mlperf_ratio)
            if status != "fail" and not informative(bm, mg, mde):
                status = "uninformative"  # a pass here would be a pass by construction
            rows.append(
                {
                    "slice": spec.name,
                    "metric": metric,
                    "n": int(len(m)),
                    "base_mean": bm,
                    "cand_mean": cm,
                    "diff": cm - bm,
                    "ci_lo": lo,
                    "ci_hi": hi,
                    "margin": mg,
                    "mde": mde,
                    "status": status,
                }
            )
    return pd.DataFrame(rows)


def ece(p_max: np.ndarray, correct: np.ndarray, bins: int = 10) -> float:
    """Expected calibration error: |accuracy - confidence| per confidence bin, weighted by the bin's share."""
    p_max, correct = np.asarray(p_max, float), np.asarray(correct, float)
    if len(p_max) == 0:
        return float("nan")
    which = np.minimum((p_max * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        sel = which == b
        if sel.any():
            total += sel.mean() * abs(correct[sel].mean() - p_max[sel].mean())
    return float(total)


def brier(p_gold: np.ndarray, n_choices: int = 2) -> float:
    """Mean Brier score for binary choices: sum over the two classes of (p - y)^2 = 2 (1 - p_gold)^2."""
    if n_choices != 2:
        raise ValueError("brier() here covers two-choice items; fix: pass per-choice probabilities for more")
    p_gold = np.asarray(p_gold, float)
    return float(np.mean(2 * (1 - p_gold) ** 2)) if len(p_gold) else float("nan")


def _paired_stat_ci(
    b: pd.DataFrame, c: pd.DataFrame, stat: Callable[[pd.DataFrame], float], *, samples: int, alpha: float, seed: int
) -> tuple[float, float, float, float]:
    rng = np.random.default_rng(seed)
    n = len(b)
    diffs = []
    for _ in range(samples):
        idx = rng.integers(0, n, size=n)
        diffs.append(stat(c.iloc[idx]) - stat(b.iloc[idx]))
    return stat(b), stat(c), float(np.quantile(diffs, alpha / 2)), float(np.quantile(diffs, 1 - alpha / 2))


def calibration(
    base: pd.DataFrame,
    cand: pd.DataFrame,
    *,
    margin: float = 0.05,
    alpha: float = 0.05,
    samples: int = 500,
    seed: int = 0,
) -> pd.DataFrame:
    """ECE and Brier of the multiple-choice slice per language, paired by document; lower is better, so a
    slice fails when the candidate's increase is above the margin with confidence."""
    keys = ["task_name", "id"]
    cols = keys + ["lang", "p_gold", "p_max", "pred", "gold"]
    b = base[(base["metric"] == "acc")][cols].drop_duplicates(keys)
    c = cand[(cand["metric"] == "acc")][cols].drop_duplicates(keys)
    both = b.merge(c, on=keys, suffixes=("_b", "_c"))
    rows = []
    for lang in sorted(both["lang_b"].unique()) if len(both) else []:
        sub = both[both["lang_b"] == lang]
        bb = pd.DataFrame({"p_max": sub["p_max_b"], "p_gold": sub["p_gold_b"], "ok": sub["pred_b"] == sub["gold_b"]})
        cc = pd.DataFrame({"p_max": sub["p_max_c"], "p_gold": sub["p_gold_c"], "ok": sub["pred_c"] == sub["gold_c"]})
        for name, fn in (
            ("ece", lambda d: ece(d["p_max"].to_numpy(), d["ok"].to_numpy())),
            ("brier", lambda d: brier(d["p_gold"].to_numpy())),
        ):
            bm, cm, lo, hi = _paired_stat_ci(
                bb.reset_index(drop=True), cc.reset_index(drop=True), fn, samples=samples, alpha=alpha, seed=seed
            )
            status = "fail" if lo > margin else ("pass" if hi < margin else "inconclusive")
            rows.append(
                {
                    "slice": f"task=mc,lang={lang}",
                    "metric": name,
                    "n": int(len(sub)),
                    "base_mean": bm,
                    "cand_mean": cm,
                    "diff": cm - bm,
                    "ci_lo": lo,
                    "ci_hi": hi,
                    "margin": margin,
                    "status": status,
                }
            )
    return pd.DataFrame(rows)


def overall_status(table: pd.DataFrame) -> str:
    """fail if any slice fails, else inconclusive if any is, else pass — over the informative slices (none
    informative: inconclusive). The uninformative and not applicable ones are listed by the gate's reasons, not
    counted."""
    table = table[~table["status"].isin(["uninformative", "not_applicable"])] if "status" in table else table
    if table.empty:
        return "inconclusive"
    if (table["status"] == "fail").any():
        return "fail"
    if (table["status"] == "inconclusive").any():
        return "inconclusive"
    return "pass"


def accuracy_by_slice(samples: pd.DataFrame) -> pd.DataFrame:
    """One model's accuracy per (task, lang, context) on each task's primary metric (the baseline table)."""
    prim = samples[samples.apply(lambda r: PRIMARY_METRIC.get(r["task"]) == r["metric"], axis=1)]
    return (
        prim.groupby(["task", "lang", "context"], as_index=False)["value"]
        .agg(["mean", "count"])
        .rename(columns={"mean": "accuracy", "count": "n"})
    )


DISTANCE_BUCKET_TOKENS = 64


def retrieval_by_distance(samples: pd.DataFrame, bucket_tokens: int = DISTANCE_BUCKET_TOKENS) -> pd.DataFrame:
    """One model's key-value retrieval accuracy by key-to-query distance: lang (and "all") x bucket of
    `bucket_tokens` tokens -> n, accuracy. Empty when no document carries a distance (v1 task data)."""
    cols = ["lang", "bucket_lo", "bucket_hi", "n", "accuracy"]
    if "distance" not in samples:
        return pd.DataFrame(columns=cols)
    kv = samples[(samples["task"] == "kv") & (samples["metric"] == PRIMARY_METRIC["kv"])].dropna(subset=["distance"])
    if kv.empty:
        return pd.DataFrame(columns=cols)
    lo = (kv["distance"].astype(int) // bucket_tokens) * bucket_tokens
    kv = kv.assign(bucket_lo=lo, bucket_hi=lo + bucket_tokens - 1)
    both = pd.concat([kv, kv.assign(lang="all")], ignore_index=True)
    out = both.groupby(["lang", "bucket_lo", "bucket_hi"], as_index=False)["value"].agg(["count", "mean"])
    return out.rename(columns={"count": "n", "mean": "accuracy"})[cols]


def distance_table(base: pd.DataFrame, cand: pd.DataFrame, bucket_tokens: int = DISTANCE_BUCKET_TOKENS) -> pd.DataFrame:
    """Both arms' retrieval accuracy per distance bucket, side by side (lang, bucket_lo, bucket_hi, n,
    base_acc, cand_acc): where along the context a candidate starts to forget. Descriptive; the gated
    decision stays with the `task=kv,context=long` slice."""
    b = retrieval_by_distance(base, bucket_tokens).rename(columns={"accuracy": "base_acc"})
    c = retrieval_by_distance(cand, bucket_tokens).rename(columns={"accuracy": "cand_acc", "n": "n_cand"})
    if b.empty or c.empty:
        return pd.DataFrame(columns=["lang", "bucket_lo", "bucket_hi", "n", "base_acc", "cand_acc"])
    both = b.merge(c, on=["lang", "bucket_lo", "bucket_hi"], how="inner")
    return both.drop(columns=["n_cand"])
