"""A comparison as text: a fixed-width table for the terminal, Markdown (the MLflow run's description and
an artifact) and one self-contained HTML page (the report's style and table renderer, no script).

Deliberately not here: any statistic (core.py) and any I/O.
"""

from __future__ import annotations

import html
import math

import pandas as pd

from inferopt.compare.core import PAIRED_TEST, Comparison
from inferopt.compare.unpaired import MANN_WHITNEY, WELCH
from inferopt.report.html import CSS
from inferopt.report.tables import fmt, table_html

HEADLINE = ["source", "metric", "a", "b", "ratio", "ratio_lo", "ratio_hi", "p_value", "direction", "test"]
SHORT_TEST = {PAIRED_TEST: "paired t", MANN_WHITNEY: "unpaired MW", WELCH: "unpaired Welch"}
LEGEND = "; ".join(f"{short}: {full}" for full, short in SHORT_TEST.items())
SLICES = ["slice_dim", "slice_value", "metric", "n_a", "n_b", "a_p99", "b_p99", "ratio_p99", "p_unadjusted"]


def _ratio(row: pd.Series) -> str:
    if not math.isfinite(row["ratio"]):
        return ""
    ci = f" [{row['ratio_lo']:.3f}, {row['ratio_hi']:.3f}]" if math.isfinite(row["ratio_lo"]) else ""
    return f"x{row['ratio']:.3f}{ci}"


def headline_text(cmp: Comparison) -> pd.DataFrame:
    """The headline rows as display strings (what the terminal and Markdown show)."""
    if cmp.metrics.empty:
        return pd.DataFrame(columns=["source", "metric", "A", "B", "B/A [CI]", "p", "direction", "test"])
    m = cmp.metrics
    return pd.DataFrame(
        {
            "source": m["source"],
            "metric": m["metric"] + " (" + m["unit"] + ")",
            "A": m["a"].map(fmt),
            "B": m["b"].map(fmt),
            "B/A [CI]": m.apply(_ratio, axis=1),
            "p": m["p_value"].map(fmt),
            "direction": m["direction"],
            "test": m["test"].map(lambda t: SHORT_TEST.get(t, t)),
        }
    )


def _title(cmp: Comparison) -> str:
    return f"B {cmp.b.run_id} ({cmp.b.candidate}) vs A {cmp.a.run_id} ({cmp.a.candidate})"


def console(cmp: Comparison) -> str:
    """The side-by-side table for stdout."""
    lines = [_title(cmp), f"{cmp.pairing}: {cmp.pairing_reason}", ""]
    lines.append(headline_text(cmp).to_string(index=False))
    lines.append(f"tests: {LEGEND}")
    lines.append("")
    for r in cmp.verdicts.itertuples():
        if r.section in ("decision", "reasons") or not r.same:
            a_head, b_head = (str(t).splitlines()[0] for t in (r.a, r.b))
            lines.append(f"{r.section}: A {a_head} | B {b_head}")
    return "\n".join(lines)


def _md_table(df: pd.DataFrame) -> str:
    if df.empty:
        return "_no rows_\n"
    cells = df.astype(str).map(lambda s: s.replace("|", "\\|").replace("\n", "<br>"))
    head = "| " + " | ".join(df.columns) + " |\n|" + "---|" * len(df.columns) + "\n"
    return head + "".join("| " + " | ".join(row) + " |\n" for row in cells.itertuples(index=False, name=None))


def markdown(cmp: Comparison) -> str:
    """The whole comparison in Markdown: headline, verdicts, slices."""
    verdicts = cmp.verdicts.rename(columns={"a": f"A {cmp.a.run_id[:8]}", "b": f"B {cmp.b.run_id[:8]}"})
    slices = cmp.slices[SLICES].map(fmt) if len(cmp.slices) else cmp.slices
    return (
        f"# Comparison: {_title(cmp)}\n\n**{cmp.pairing}**: {cmp.pairing_reason}.\n\n"
        f"Verdicts: A **{cmp.a.decision}**, B **{cmp.b.decision}**.\n\n"
        f"## Headline metrics (B against A)\n\n{_md_table(headline_text(cmp))}\nTests: {LEGEND}.\n\n"
        f"## Verdicts and reasons\n\n{_md_table(verdicts.astype(str))}\n"
        f"## Per slice (measured baseline; p-values unadjusted)\n\n{_md_table(slices)}"
    )


def html_section(cmp: Comparison, level: int = 2) -> str:
    """The comparison's body (headline, verdicts, slices) with headings at `level`, for a page or a report."""
    esc, h = html.escape, f"h{level}"
    verdicts = cmp.verdicts.rename(columns={"a": f"A {cmp.a.run_id[:8]}", "b": f"B {cmp.b.run_id[:8]}"})
    return (
        f"<p class='meta'>{esc(_title(cmp))}</p>"
        f"<p class='big'><b>{esc(cmp.pairing)}</b>: {esc(cmp.pairing_reason)}</p>"
        f"<{h}>Headline metrics (B against A)</{h}>{table_html(cmp.metrics, columns=HEADLINE, max_rows=200)}"
        f"<p class='meta'>tests: {esc(LEGEND)}</p>"
        f"<{h}>Verdicts and reasons</{h}>{table_html(verdicts, max_rows=200)}"
        f"<{h}>Per slice (measured baseline; p-values unadjusted)</{h}>"
        f"{table_html(cmp.slices, columns=SLICES, max_rows=400)}"
    )


def html_page(cmp: Comparison) -> str:
    """One self-contained page."""
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(_title(cmp))}</title>"
        f"<style>{CSS} td{{white-space:pre-wrap}}</style></head><body><main>"
        f"<h1>Comparison</h1>{html_section(cmp)}</main></body></html>"
    )
