"""Figures for a run (matplotlib, headless): phase stacks per slice, latency CDFs, roofline, effects forest.

Each function takes tidy tables and returns a Figure; the caller saves/logs it.

Deliberately not here: the HTML report (later work) and any computation of the numbers shown.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

PHASES = ("send_lag_ms", "queue_ms", "context_ms", "prefill_ms", "first_ms", "decode_ms")


def phase_stack(phases: pd.DataFrame, slice_dim: str = "input_bucket") -> plt.Figure:
    """Median time per phase (ms) for each slice value: where a request's time goes (M2, M4)."""
    ok = phases[phases["outcome"] == "ok"]
    med = ok.groupby(slice_dim, observed=True)[list(PHASES)].median()
    order = [v for v in ("short", "medium", "long", "miss", "hit") if v in med.index]
    if len(order) == len(med.index):
        med = med.loc[order]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    bottom = np.zeros(len(med))
    for col in PHASES:
        ax.bar(med.index.astype(str), med[col].fillna(0).to_numpy(), bottom=bottom, label=col.removesuffix("_ms"))
        bottom += med[col].fillna(0).to_numpy()
    ax.set_ylabel("median ms")
    ax.set_xlabel(slice_dim)
    ax.set_title(f"Where the time goes, by {slice_dim}")
    ax.legend(fontsize=7, ncol=3)
    return fig


def latency_cdf(phases: pd.DataFrame, metric: str = "ttft_ms", by: str = "arm") -> plt.Figure:
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for key, sub in phases[phases["outcome"] == "ok"].groupby(by, observed=True):
        vals = np.sort(sub[metric].dropna().to_numpy(float))
        if len(vals):
            ax.plot(vals, np.arange(1, len(vals) + 1) / len(vals), label=str(key))
    for q in (0.5, 0.99):
        ax.axhline(q, color="grey", lw=0.5, ls=":")
    ax.set_xlabel(metric)
    ax.set_ylabel("fraction of requests")
    ax.set_title(f"{metric} CDF by {by}")
    ax.legend(fontsize=8)
    return fig


def roofline(
    roof: pd.DataFrame, peak_flops_per_s: float, bandwidth_bytes_per_s: float, measured: pd.DataFrame | None = None
) -> plt.Figure:
    """The roofline with each phase's arithmetic intensity; measured points (achieved FLOP/s) if given."""
    ai = np.logspace(-2, 4, 200)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.loglog(ai, np.minimum(peak_flops_per_s, ai * bandwidth_bytes_per_s), color="black", lw=1.5, label="roofline")
    for _, r in roof.iterrows():
        ax.scatter([r["ai_flop_per_byte"]], [r["perf_max_flop_per_s"]], marker="o", s=30)
        ax.annotate(f"{r['phase']} ceiling", (r["ai_flop_per_byte"], r["perf_max_flop_per_s"]), fontsize=7)
    if measured is not None:
        for _, r in measured.iterrows():
            ax.scatter([r["ai_flop_per_byte"]], [r["achieved_flop_per_s"]], marker="x", s=40, color="red")
            ax.annotate(
                f"{r['phase']} measured", (r["ai_flop_per_byte"], r["achieved_flop_per_s"]), fontsize=7, color="red"
            )
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("FLOP/s")
    ax.set_title("Roofline: ceilings (o) and measured (x)")
    return fig


def forest(effects: pd.DataFrame) -> plt.Figure:
    """Ratio arm/baseline with its CI per metric; 1.0 = no change. Rows without a ratio (a share that is 0 in
    the baseline: only its difference is defined) are left out."""
    effects = effects[np.isfinite(effects["ratio"].astype(float))]
    fig, ax = plt.subplots(figsize=(6, 0.45 * max(3, len(effects)) + 1))
    y = np.arange(len(effects))
    colors = effects["direction"].map({"better": "tab:green", "worse": "tab:red"}).fillna("tab:grey")
    ax.errorbar(
        effects["ratio"],
        y,
        xerr=[
            (effects["ratio"] - effects["ratio_lo"]).clip(lower=0).fillna(0),
            (effects["ratio_hi"] - effects["ratio"]).clip(lower=0).fillna(0),
        ],
        fmt="none",
        ecolor="grey",
    )
    ax.scatter(effects["ratio"], y, c=list(colors), zorder=3)
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_yticks(y, [f"{a}: {m}" for a, m in zip(effects["arm"], effects["metric"], strict=False)], fontsize=8)
    ax.set_xlabel("arm / baseline (95% bootstrap CI)")
    ax.set_title("Ablation effects")
    return fig


def capacity_curve(
    probes: pd.DataFrame,
    slo_ms: dict[str, float] | None = None,
    bracket: tuple[float | None, float | None] = (None, None),
) -> plt.Figure:
    """The capacity search's rate/latency curve: left, achieved throughput and goodput against the offered
    rate (the diagonal = keeping up); right, the SLO'd latency percentiles with their bounds (dashed). Passing
    probes are filled, failing ones hollow; the bracket [highest pass, lowest failure] is shaded."""
    fig, (ax_tp, ax_lat) = plt.subplots(1, 2, figsize=(10, 3.8))
    df = probes.sort_values("offered_req_per_s")
    x = df["offered_req_per_s"].to_numpy(float)
    passed = df["passed"].to_numpy(bool)
    if len(x):
        ax_tp.plot([0, x.max()], [0, x.max()], color="grey", lw=0.6, ls=":", label="offered")
    series = [(ax_tp, "achieved_req_per_s", "throughput"), (ax_tp, "goodput_req_per_s", "goodput")] + [
        (ax_lat, col, col.removesuffix("_ms_p99").removesuffix("_ms_p95")) for col in (slo_ms or {}) if col in df
    ]
    for ax, col, label in series:
        y = df[col].to_numpy(float)
        (line,) = ax.plot(x, y, lw=1, label=label)
        ax.scatter(x[passed], y[passed], color=line.get_color(), s=22, zorder=3)
        ax.scatter(x[~passed], y[~passed], facecolors="none", edgecolors=line.get_color(), s=22, zorder=3)
        if ax is ax_lat:
            ax.axhline(slo_ms[col], color=line.get_color(), lw=0.8, ls="--")
    for ax in (ax_tp, ax_lat):
        lo, hi = bracket
        if lo is not None and hi is not None:
            ax.axvspan(lo, hi, color="tab:green", alpha=0.12, label="capacity bracket")
        ax.set_xlabel("offered rate (req/s)")
        ax.legend(fontsize=7)
    ax_tp.set_ylabel("req/s")
    ax_tp.set_title("Throughput and goodput vs offered rate")
    ax_lat.set_ylabel("ms")
    ax_lat.set_title("Latency vs offered rate (dashed: SLO)")
    ax_lat.set_yscale("symlog", linthresh=1.0)  # latencies span ms to seconds across the search
    return fig


def frontier(points: pd.DataFrame, slo_ms: dict[str, float] | None = None) -> plt.Figure:
    """Every point tried at its capacity (the highest passing rate): throughput per replica (goodput tok/s)
    against the interactive TTFT p99 (left) and against per-user tok/s (1000 / TPOT p50, right); the Pareto
    frontier (`pareto_ttft`, `pareto_per_user` columns) as a step line, the SLO bounds dashed (right: 1000 /
    the TPOT p95 bound), the baseline a black square, the recommendation a star, control arms hollow. A point
    where no rate passed has no operating point: counted in the title, not drawn."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    slo_ms = slo_ms or {}
    drawn = points.dropna(subset=["goodput_tok_per_s", "ttft_ms_p99"]) if len(points) else points
    panels = (
        (axes[0], "ttft_ms_p99", "pareto_ttft", "TTFT p99 (ms) at capacity", slo_ms.get("ttft_ms_p99")),
        (axes[1], "per_user_tok_per_s", "pareto_per_user", "per-user tok/s at capacity", None),
    )
    tpot = slo_ms.get("tpot_ms_p95")
    for ax, xcol, front, xlabel, bound in panels:
        for name, g in drawn.groupby("proposal", sort=False):
            hollow = g["control"].astype(bool).to_numpy()
            x, y = g[xcol].to_numpy(float), g["goodput_tok_per_s"].to_numpy(float)
            if name == "baseline":
                ax.scatter(x, y, marker="s", color="black", s=40, zorder=4, label="baseline")
                continue
            sc = ax.scatter(x[~hollow], y[~hollow], s=28, zorder=3, label=str(name))
            ax.scatter(x[hollow], y[hollow], s=28, zorder=3, facecolors="none", edgecolors=sc.get_facecolor())
            for xi, yi, value in zip(x, y, g["value"], strict=True):
                ax.annotate(str(value), (xi, yi), fontsize=6, xytext=(3, 3), textcoords="offset points")
        edge = drawn[drawn[front].astype(bool)].sort_values(xcol)
        if len(edge):
            ax.step(edge[xcol], edge["goodput_tok_per_s"], where="post", color="grey", lw=0.8, label="Pareto frontier")
        rec = drawn[drawn["recommended"].astype(bool)]
        if len(rec):
            ax.scatter(
                rec[xcol],
                rec["goodput_tok_per_s"],
                marker="*",
                s=220,
                color="gold",
                edgecolors="black",
                zorder=5,
                label="recommended",
            )
        line = bound if bound is not None else (1000.0 / tpot if tpot and xcol == "per_user_tok_per_s" else None)
        if line is not None:
            ax.axvline(line, color="tab:red", lw=0.9, ls="--", label="SLO")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("throughput per replica (goodput tok/s)")
        ax.legend(fontsize=7)
    axes[0].set_title("Throughput vs interactive TTFT p99", fontsize=10)
    axes[1].set_title("Throughput vs per-user speed (SLO: 1000 / TPOT p95 bound)", fontsize=10)
    fig.suptitle(f"Capacity frontier: {len(drawn)} of {len(points)} points tried have an operating point", fontsize=11)
    fig.tight_layout()
    return fig


def sim_error(table: pd.DataFrame, bound: float = 0.15) -> plt.Figure:
    """The simulator's predictions against measurements, one marker per probe and metric (filled: held back,
    hollow: fitted on); the diagonal is exact, the band +-`bound`. Left latencies (ms, log), right throughput
    (req/s)."""
    fig, (ax_lat, ax_tp) = plt.subplots(1, 2, figsize=(10, 4))
    for ax, metrics in (
        (ax_lat, [m for m in table["metric"].unique() if "_ms_" in m]),
        (ax_tp, ["achieved_req_per_s"]),
    ):
        vals = table[table["metric"].isin(metrics)][["measured", "predicted"]].to_numpy(float)
        finite = vals[np.isfinite(vals).all(axis=1) & (vals > 0).all(axis=1)]
        if not len(finite):
            continue
        xs = np.geomspace(finite.min() / 1.3, finite.max() * 1.3, 20)
        ax.plot(xs, xs, color="grey", lw=0.7, ls=":")
        ax.fill_between(xs, xs * (1 - bound), xs * (1 + bound), color="tab:green", alpha=0.12, label=f"+-{bound:.0%}")
        for metric in metrics:
            df = table[table["metric"] == metric]
            held = df["split"] == "held_back"
            (pts,) = ax.plot(df.loc[held, "measured"], df.loc[held, "predicted"], "o", ms=4, label=metric)
            ax.plot(df.loc[~held, "measured"], df.loc[~held, "predicted"], "o", ms=4, mfc="none", color=pts.get_color())
        if ax is ax_lat:  # latencies span ms to seconds; throughputs a few req/s (linear reads better)
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_xlabel("measured")
        ax.set_ylabel("predicted (simulated)")
        ax.legend(fontsize=7)
    ax_lat.set_title("Latency per probe (filled: held back)")
    ax_tp.set_title("Throughput (req/s) per probe")
    return fig
