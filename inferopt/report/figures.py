"""Figures made for the HTML report, and images as data URIs so the report needs no other file.

`cdf_grid`: latency CDFs per slice (TTFT / TPOT / E2E × input length, output length, concurrency, cache
hit) from the measure step's per-request phases (SPEC M5: distributions per slice, not means).
`quality_forest`: the gate's per-slice quality difference with its CI against the non-inferiority margin.

Deliberately not here: the step figures the flow already logs (plots.py, profile_plots.py; the report embeds
their PNGs as they are) and any statistic beyond sorting for an empirical CDF.
"""

from __future__ import annotations

import base64
import io
import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

CDF_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms")
SLICE_DIMS = ("input_bucket", "output_bucket", "concurrency_bucket", "cache_hit")
_ORDER = ("short", "medium", "long", "miss", "hit")


def png_data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def fig_png(fig: plt.Figure, dpi: int = 90) -> bytes:
    """A figure as PNG bytes (the figure is closed)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def slice_sort_key(value: object) -> tuple:
    """Order slice values as a reader expects: short < medium < long, miss < hit, and numeric buckets
    ('<=1', '(1,2]', '(2,4]', ...) by their upper edge rather than as text."""
    text = str(value)
    if text in _ORDER:
        return (0, _ORDER.index(text), "")
    nums = re.findall(r"-?\d+(?:\.\d+)?", text)
    if nums:
        return (1, float(nums[-1]), text)
    return (2, 0.0, text)


def _ordered(values: list) -> list:
    return sorted(values, key=slice_sort_key)


def cdf_grid(
    phases: pd.DataFrame, metrics: tuple[str, ...] = CDF_METRICS, dims: tuple[str, ...] = SLICE_DIMS
) -> plt.Figure | None:
    """One panel per (metric, slice dimension): an empirical CDF per slice value over the ok requests,
    with the p50 and p99 levels dotted. None when there is nothing to plot."""
    if phases is None or phases.empty or "outcome" not in phases:
        return None
    ok = phases[phases["outcome"] == "ok"]
    metrics = tuple(m for m in metrics if m in ok and ok[m].notna().any())
    dims = tuple(d for d in dims if d in ok and ok[d].notna().any())
    if not metrics or not dims:
        return None
    fig, axes = plt.subplots(len(metrics), len(dims), figsize=(3.4 * len(dims), 2.6 * len(metrics)), squeeze=False)
    for i, metric in enumerate(metrics):
        for j, dim in enumerate(dims):
            ax = axes[i][j]
            keys = ok[dim].astype(str)
            for value in _ordered(list(keys.unique())):
                vals = np.sort(ok.loc[keys == value, metric].dropna().to_numpy(float))
                if len(vals):
                    ax.step(
                        vals, np.arange(1, len(vals) + 1) / len(vals), where="post", label=f"{value} (n={len(vals)})"
                    )
            for q in (0.5, 0.99):
                ax.axhline(q, color="grey", lw=0.5, ls=":")
            ax.set_ylim(0, 1.02)
            ax.tick_params(labelsize=7)
            if i == 0:
                ax.set_title(f"by {dim}", fontsize=9)
            if j == 0:
                ax.set_ylabel(f"{metric}\nfraction ≤ x", fontsize=8)
            ax.set_xlabel(metric, fontsize=7)
            ax.legend(fontsize=6, loc="lower right")
    fig.suptitle("Latency CDFs per slice (ok requests; dotted: p50, p99)", fontsize=10)
    fig.tight_layout()
    return fig


def retrieval_distance(dist: pd.DataFrame) -> plt.Figure | None:
    """Key-value retrieval accuracy by key-to-query distance, baseline vs candidate, per language: where
    along the context a candidate starts to forget (the gate's `quality_distance` table)."""
    need = {"lang", "bucket_lo", "bucket_hi", "base_acc", "cand_acc"}
    if dist is None or dist.empty or not need <= set(dist.columns):
        return None
    fig, ax = plt.subplots(figsize=(7, 3.2))
    for lang, sub in dist.sort_values("bucket_lo").groupby("lang", sort=True):
        mid = (sub["bucket_lo"] + sub["bucket_hi"] + 1) / 2
        width = 2.0 if lang == "all" else 1.0
        ax.plot(mid, sub["base_acc"], marker="o", ms=3, lw=width, ls="-", label=f"baseline {lang}")
        ax.plot(mid, sub["cand_acc"], marker="x", ms=4, lw=width, ls="--", label=f"candidate {lang}")
    ax.set_ylim(-0.03, 1.03)
    ax.set_xlabel("key-to-query distance (tokens, bucket midpoint)", fontsize=8)
    ax.set_ylabel("retrieval exact match", fontsize=8)
    ax.set_title("Key-value retrieval by distance", fontsize=10)
    ax.legend(fontsize=6, ncol=3, loc="lower left")
    fig.tight_layout()
    return fig


def quality_forest(slices: pd.DataFrame) -> plt.Figure | None:
    """Candidate − baseline per quality slice with its paired CI; the dashed line is −margin (non-inferiority)."""
    need = {"slice", "metric", "diff", "ci_lo", "ci_hi"}
    if slices is None or slices.empty or not need <= set(slices.columns):
        return None
    df = slices.reset_index(drop=True)
    y = np.arange(len(df))
    fig, ax = plt.subplots(figsize=(7, 0.32 * max(4, len(df)) + 1))
    status = df["status"].astype(str) if "status" in df else pd.Series(["?"] * len(df))
    colours = [
        "tab:red"
        if s.startswith(("fail", "inferior"))
        else "tab:green"
        if s.startswith(("pass", "non"))
        else "tab:grey"
        for s in status
    ]
    lo = (df["diff"] - df["ci_lo"]).clip(lower=0)
    hi = (df["ci_hi"] - df["diff"]).clip(lower=0)
    ax.errorbar(df["diff"], y, xerr=[lo, hi], fmt="none", ecolor="grey")
    ax.scatter(df["diff"], y, c=colours, zorder=3, s=18)
    ax.axvline(0.0, color="black", lw=0.8)
    if "margin" in df and df["margin"].notna().any():
        ax.axvline(-float(df["margin"].max()), color="tab:red", lw=0.8, ls="--", label="−margin")
        ax.legend(fontsize=7, loc="lower right")
    ax.set_yticks(y, [f"{s} · {m}" for s, m in zip(df["slice"], df["metric"], strict=False)], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("candidate − baseline (paired 95% CI)", fontsize=8)
    ax.set_title("Quality per slice", fontsize=10)
    fig.tight_layout()
    return fig
