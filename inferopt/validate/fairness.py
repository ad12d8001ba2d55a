"""Fairness and starvation (SPEC V5): per tenant and per priority, who got served, how long they waited, and
whether a group starved *relative to the others* — a pure function of a run's per-request table.

A group starves when it is served or waits significantly worse than the rest: its served share is below
`min_share_ratio` x its offered share beyond chance (binomial), or its median wait is at least `max_wait_ratio` x
the other groups' pooled median wait and a one-sided Mann-Whitney test says its waits are larger (p < `alpha`).
When every group waits beyond `max_wait_ms` alike, that is overload (an SLO failure, reported as such), not
starvation. Jain's index over the share ratios: 1 = proportional, 1/n = one group got everything.
The columns are described in `docs/method.md` (V5).

Deliberately not here: running anything, and deciding whether starvation fails a scenario (`judge.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.stats import binom, mannwhitneyu

from inferopt.stats.inference import quantile

__all__ = ["FairnessReport", "fairness_report", "fairness_table", "jain_index"]

COLUMNS = (
    "group_by",
    "group",
    "offered",
    "ok",
    "rejected",
    "timeout",
    "error",
    "offered_share",
    "served_share",
    "weight_share",
    "share_ratio",
    "share_p",
    "tokens_per_s",
    "wait_source",
    "wait_ms_p50",
    "wait_ms_p99",
    "wait_ms_max",
    "wait_ratio",
    "wait_p",
    "ttft_ms_p99",
    "starved",
    "why",
)


def jain_index(x: np.ndarray | list[float]) -> float:
    """Jain's fairness index of non-negative allocations (1 = equal; 1/n = all to one); NaN if all zero/empty."""
    a = np.asarray(x, dtype=float)
    a = a[~np.isnan(a)]
    if len(a) == 0 or float((a * a).sum()) == 0.0:
        return float("nan")
    return float(a.sum() ** 2 / (len(a) * (a * a).sum()))


def _group_wait(ok: pd.DataFrame) -> tuple[np.ndarray, str]:
    """The served requests' waits: engine queue time where every one has it, else the client-side TTFT."""
    q = pd.to_numeric(ok["queue_ms"], errors="coerce").dropna().to_numpy(float) if "queue_ms" in ok else np.array([])
    if len(q) == len(ok) and len(ok):
        return q, "queue_ms"
    return pd.to_numeric(ok["ttft_ms"], errors="coerce").dropna().to_numpy(float), "ttft_ms"


def wait_disadvantage(wait: np.ndarray, others: np.ndarray, min_n: int) -> tuple[float, float]:
    """(median wait / the others' median wait, one-sided Mann-Whitney p that the group's waits are larger);
    NaNs when either side has fewer than `min_n` served requests."""
    if len(wait) < min_n or len(others) < min_n:
        return float("nan"), float("nan")
    med, med_o = float(np.median(wait)), float(np.median(others))
    ratio = med / med_o if med_o > 0 else (float("inf") if med > 0 else 1.0)
    if np.ptp(np.concatenate([wait, others])) == 0:
        return ratio, 1.0  # every wait equal: nothing to test
    return ratio, float(mannwhitneyu(wait, others, alternative="greater").pvalue)


def fairness_table(
    phases: pd.DataFrame,
    by: str,
    *,
    duration_s: float,
    min_share_ratio: float = 0.5,
    max_wait_ratio: float = 3.0,
    min_requests: int = 5,
    alpha: float = 0.01,
    weights: Mapping[str, float] | None = None,
) -> pd.DataFrame:
    """One row per value of `by` ("tenant" or "priority"); see the module docstring for the rules."""
    df = phases[~phases["warmup"].astype(bool)] if "warmup" in phases else phases
    n_all, ok_all = len(df), int((df["outcome"] == "ok").sum())
    wsum = sum(weights.values()) if weights else 0.0
    groups = {str(k): g for k, g in df.groupby(by, sort=True)}
    waits = {k: _group_wait(g[g["outcome"] == "ok"]) for k, g in groups.items()}
    rows = []
    for key, g in groups.items():
        ok = g[g["outcome"] == "ok"]
        wait, source = waits[key]
        others = np.concatenate([w for k, (w, _) in waits.items() if k != key] or [np.array([])])
        offered_share = len(g) / n_all if n_all else float("nan")
        served_share = len(ok) / ok_all if ok_all else 0.0
        ratio = served_share / offered_share if offered_share else float("nan")
        w_ratio, w_p = wait_disadvantage(wait, others, min_requests)
        row = {
            "group_by": by,
            "group": key,
            "offered": len(g),
            "ok": len(ok),
            "rejected": int((g["outcome"] == "rejected").sum()),
            "timeout": int((g["outcome"] == "timeout").sum()),
            "error": int((g["outcome"] == "error").sum()),
            "offered_share": offered_share,
            "served_share": served_share,
            "weight_share": (weights.get(key, 0.0) / wsum) if weights and wsum else float("nan"),
            "share_ratio": ratio,
            "share_p": float(binom.cdf(len(ok), ok_all, offered_share))
            if ok_all and not np.isnan(offered_share)
            else float("nan"),
            "tokens_per_s": float(ok["output_len"].sum()) / max(duration_s, 1e-9),
            "wait_source": source,
            "wait_ms_p50": quantile(wait, 0.5),
            "wait_ms_p99": quantile(wait, 0.99),
            "wait_ms_max": float(wait.max()) if len(wait) else float("nan"),
            "wait_ratio": w_ratio,
            "wait_p": w_p,
            "ttft_ms_p99": quantile(pd.to_numeric(ok["ttft_ms"], errors="coerce").dropna().to_numpy(float), 0.99),
        }
        why = _starvation_reasons(row, min_share_ratio, max_wait_ratio, min_requests, alpha)
        row["starved"], row["why"] = bool(why), "; ".join(why)
        rows.append(row)
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _starvation_reasons(
    row: dict, min_share_ratio: float, max_wait_ratio: float, min_requests: int, alpha: float
) -> list[str]:
    """Why a group starves relative to the others (empty: it does not)."""
    why = []
    ratio = row["share_ratio"]
    if row["offered"] >= min_requests and not np.isnan(ratio) and ratio < min_share_ratio and row["share_p"] < alpha:
        why.append(
            f"served share {row['served_share']:.3f} is {ratio:.2f} x its offered share {row['offered_share']:.3f} "
            f"(< {min_share_ratio:g}; chance p = {row['share_p']:.2g})"
        )
    w_ratio, w_p = row["wait_ratio"], row["wait_p"]
    if not np.isnan(w_ratio) and w_ratio >= max_wait_ratio and w_p < alpha:
        why.append(
            f"median wait {row['wait_ms_p50']:.0f} ms is {w_ratio:.1f} x the other groups' "
            f"(>= {max_wait_ratio:g}; Mann-Whitney p = {w_p:.2g})"
        )
    return why


def overload_note(table: pd.DataFrame, max_wait_ms: float) -> str | None:
    """When every served group's longest wait exceeds `max_wait_ms`: everyone waited too long alike —
    overload, an SLO failure reported by the SLO check, not starvation. None otherwise."""
    served = table[table["ok"] > 0]
    if served.empty or not bool((served["wait_ms_max"] > max_wait_ms).all()):
        return None
    groups = ", ".join(f"{r.group_by}={r.group} {r.wait_ms_max:.0f} ms" for r in served.itertuples())
    return f"overloaded: every group's longest wait exceeds {max_wait_ms:g} ms ({groups}), none relative to the others"


@dataclass
class FairnessReport:
    table: pd.DataFrame  # tenant rows then priority rows (column group_by)
    jain_tenant: float
    jain_priority: float
    starved: list[str] = field(default_factory=list)  # "tenant=b: median wait ..." lines
    overloaded: str | None = None  # every group waited beyond max_wait_ms alike (not starvation)

    def metrics(self) -> dict[str, float]:
        t = self.table
        out = {
            "fairness_jain_tenant": self.jain_tenant,
            "fairness_jain_priority": self.jain_priority,
            "fairness_starved_groups": float(len(self.starved)),
            "fairness_overloaded": float(self.overloaded is not None),
        }
        for r in t.itertuples():
            key = f"fairness.{r.group_by}:{r.group}"  # MLflow metric names take no "="
            out[f"{key}.share_ratio"] = float(r.share_ratio)
            out[f"{key}.wait_ms_max"] = float(r.wait_ms_max)
        return out

    def summary(self) -> str:
        head = f"fairness: Jain {self.jain_tenant:.3f} over tenants, {self.jain_priority:.3f} over priorities"
        tail = "; STARVED " + "; ".join(self.starved) if self.starved else "; no group starved relative to the others"
        return head + tail + (f"; {self.overloaded}" if self.overloaded else "")


def fairness_report(
    phases: pd.DataFrame,
    *,
    duration_s: float,
    max_wait_ms: float,
    min_share_ratio: float = 0.5,
    max_wait_ratio: float = 3.0,
    min_requests: int = 5,
    alpha: float = 0.01,
    weights: Mapping[str, float] | None = None,
) -> FairnessReport:
    """Per-tenant and per-priority tables, both Jain indexes and the starved groups of one run."""
    kw = {
        "duration_s": duration_s,
        "min_share_ratio": min_share_ratio,
        "max_wait_ratio": max_wait_ratio,
        "min_requests": min_requests,
        "alpha": alpha,
    }
    tenants = fairness_table(phases, "tenant", weights=weights, **kw)
    prios = fairness_table(phases, "priority", **kw)
    table = pd.concat([tenants, prios], ignore_index=True)
    starved = [f"{r.group_by}={r.group}: {r.why}" for r in table.itertuples() if r.starved]
    return FairnessReport(
        table=table,
        jain_tenant=jain_index(tenants["share_ratio"].to_numpy(float)),
        jain_priority=jain_index(prios["share_ratio"].to_numpy(float)),
        starved=starved,
        overloaded=overload_note(table, max_wait_ms),
    )
