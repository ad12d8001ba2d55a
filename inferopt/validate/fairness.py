"""Fairness and starvation (SPEC V5): per tenant and per priority, who got served, how long they waited,
and whether anyone starved — a pure function of a run's per-request table (`phase_table` rows).

Per group (one tenant, or one priority level), over the non-warm-up requests of the run:
- `offered`: requests sent; `ok`: served; `offered_share` / `served_share`: the group's share of all sent /
  of all served requests; `weight_share`: the configured tenant weight, normalized (tenants only, when
  given — it is the mix's sampling probability, so `offered_share` is its realisation);
- `share_ratio` = served_share / offered_share: 1 = served in proportion to what it asked, 0.5 = half of
  its fair share (the ratio is against the offered share, not the weight, so the mix's sampling noise does
  not read as unfairness); `tokens_per_s`: its served output tokens over the run's duration;
- wait: the engine queue time `queue_ms` when the engine reports it for the group's served requests, else
  the client-side TTFT (`wait_source` says which) — p50, p99 and max over served requests;
- `starved`: max wait above `max_wait_ms`, or (with at least `min_requests` offered) a share_ratio below
  `min_share_ratio` that chance does not explain: `share_p` = P(X <= ok) for X ~ Binomial(all served,
  offered_share) — how likely so few of the served requests would be this group's if serving ignored the
  group — must be below `alpha` (a run that served 13 requests can miss a 20 % tenant by luck). A group
  whose requests are all rejected or timed out starves by this rule once the run served enough others.

Jain's index over the groups' share ratios x_i: J = (Σx)² / (n·Σx²), 1 = perfectly proportional, 1/n =
one group got everything (NaN when nothing was served).

Deliberately not here: running anything, and deciding whether starvation fails a scenario (the scenario's
settings do: `inferopt.validate.scenarios`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy.stats import binom

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


def _q(v: np.ndarray, q: float) -> float:
    return float(np.quantile(v, q)) if len(v) else float("nan")


def fairness_table(
    phases: pd.DataFrame,
    by: str,
    *,
    duration_s: float,
    max_wait_ms: float,
    min_share_ratio: float = 0.5,
    min_requests: int = 5,
    alpha: float = 0.01,
    weights: Mapping[str, float] | None = None,
) -> pd.DataFrame:
    """One row per value of `by` ("tenant" or "priority"); see the module docstring for the columns."""
    df = phases[~phases["warmup"].astype(bool)] if "warmup" in phases else phases
    rows = []
    n_all, ok_all = len(df), int((df["outcome"] == "ok").sum())
    wsum = sum(weights.values()) if weights else 0.0
    for key, g in df.groupby(by, sort=True):
        ok = g[g["outcome"] == "ok"]
        q = (
            pd.to_numeric(ok["queue_ms"], errors="coerce").dropna().to_numpy(float)
            if "queue_ms" in ok
            else np.array([])
        )
        if len(q) == len(ok) and len(ok):
            wait, source = q, "queue_ms"
        else:
            wait, source = pd.to_numeric(ok["ttft_ms"], errors="coerce").dropna().to_numpy(float), "ttft_ms"
        offered_share = len(g) / n_all if n_all else float("nan")
        served_share = len(ok) / ok_all if ok_all else 0.0
        ratio = served_share / offered_share if offered_share else float("nan")
        row = {
            "group_by": by,
            "group": str(key),
            "offered": len(g),
            "ok": len(ok),
            "rejected": int((g["outcome"] == "rejected").sum()),
            "timeout": int((g["outcome"] == "timeout").sum()),
            "error": int((g["outcome"] == "error").sum()),
            "offered_share": offered_share,
            "served_share": served_share,
            "weight_share": (weights.get(str(key), 0.0) / wsum) if weights and wsum else float("nan"),
            "share_ratio": ratio,
            "share_p": float(binom.cdf(len(ok), ok_all, offered_share))
            if ok_all and not np.isnan(offered_share)
            else float("nan"),
            "tokens_per_s": float(ok["output_len"].sum()) / max(duration_s, 1e-9),
            "wait_source": source,
            "wait_ms_p50": _q(wait, 0.5),
            "wait_ms_p99": _q(wait, 0.99),
            "wait_ms_max": float(wait.max()) if len(wait) else float("nan"),
            "ttft_ms_p99": _q(pd.to_numeric(ok["ttft_ms"], errors="coerce").dropna().to_numpy(float), 0.99),
        }
        why = []
        if len(wait) and row["wait_ms_max"] > max_wait_ms:
            why.append(f"max wait {row['wait_ms_max']:.0f} ms > {max_wait_ms:g} ms")
        if len(g) >= min_requests and not np.isnan(ratio) and ratio < min_share_ratio and row["share_p"] < alpha:
            why.append(
                f"served share {served_share:.3f} is {ratio:.2f} x its offered share {offered_share:.3f} "
                f"(< {min_share_ratio:g}; chance p = {row['share_p']:.2g})"
            )
        row["starved"], row["why"] = bool(why), "; ".join(why)
        rows.append(row)
    return pd.DataFrame(rows, columns=list(COLUMNS))


@dataclass
class FairnessReport:
    table: pd.DataFrame  # tenant rows then priority rows (column group_by)
    jain_tenant: float
    jain_priority: float
    starved: list[str] = field(default_factory=list)  # "tenant=b: max wait ..." lines

    def metrics(self) -> dict[str, float]:
        t = self.table
        out = {
            "fairness_jain_tenant": self.jain_tenant,
            "fairness_jain_priority": self.jain_priority,
            "fairness_starved_groups": float(len(self.starved)),
        }
        for r in t.itertuples():
            key = f"fairness.{r.group_by}:{r.group}"  # MLflow metric names take no "="
            out[f"{key}.share_ratio"] = float(r.share_ratio)
            out[f"{key}.wait_ms_max"] = float(r.wait_ms_max)
        return out

    def summary(self) -> str:
        head = f"fairness: Jain {self.jain_tenant:.3f} over tenants, {self.jain_priority:.3f} over priorities"
        return head + ("; STARVED " + "; ".join(self.starved) if self.starved else "; no starvation")


def fairness_report(
    phases: pd.DataFrame,
    *,
    duration_s: float,
    max_wait_ms: float,
    min_share_ratio: float = 0.5,
    min_requests: int = 5,
    alpha: float = 0.01,
    weights: Mapping[str, float] | None = None,
) -> FairnessReport:
    """Per-tenant and per-priority tables, both Jain indexes and the starved groups of one run."""
    kw = {
        "duration_s": duration_s,
        "max_wait_ms": max_wait_ms,
        "min_share_ratio": min_share_ratio,
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
    )
