"""Figure for the op profile (`inferopt.locate.profile`): one stacked bar per phase, the share of the
phase's time in attention / matmul / other ops / host, with the time per forward on top.

Deliberately not here: the numbers (`inferopt.locate.profile` computes them) and the run's other figures (plots.py).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

CATEGORY_COLORS = {"attention": "tab:red", "matmul": "tab:blue", "other": "tab:grey", "host": "tab:orange"}


def op_breakdown(ops: pd.DataFrame, title: str = "") -> plt.Figure:
    """Stacked shares per phase (CPU self time; on CUDA the kernels' device time over the phase's wall
    time, the rest of the bar being the device's idle share, shown as host)."""
    phases = [p for p in ("prefill", "decode") if p in set(ops["phase"])]
    device = ops["device_share"].notna().any()
    fig, ax = plt.subplots(figsize=(6, 3.8))
    bottom = np.zeros(len(phases))
    for cat, color in CATEGORY_COLORS.items():
        vals = []
        for p in phases:
            rows = ops[(ops["phase"] == p) & (ops["category"] == cat)]
            if device:
                if cat == "host":
                    v = max(0.0, 1.0 - float(ops.loc[ops["phase"] == p, "device_share"].sum()))
                else:
                    v = float(rows["device_share"].sum())
            else:
                v = float(rows["share"].sum())
            vals.append(v)
        ax.bar(phases, vals, bottom=bottom, color=color, label="host / idle" if (cat == "host" and device) else cat)
        for i, v in enumerate(vals):
            if v >= 0.06:
                ax.text(i, bottom[i] + v / 2, f"{v:.0%}", ha="center", va="center", fontsize=8, color="white")
        bottom += np.asarray(vals)
    for i, p in enumerate(phases):
        per_fwd = float(ops.loc[ops["phase"] == p, "self_cpu_ms_per_forward"].sum())
        ax.text(i, min(bottom[i], 1.0) + 0.02, f"{per_fwd:.3g} ms / forward", ha="center", fontsize=8)
    ax.set_ylim(0, 1.12)
    ax.set_ylabel("share of phase time" + (" (device)" if device else " (CPU)"))
    ax.set_title(title or "Where each phase's time goes (torch.profiler)", fontsize=10)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    return fig
