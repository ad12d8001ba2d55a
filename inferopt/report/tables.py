"""Compact HTML for tables and small documents in the run report: any DataFrame, any columns, any rows.

Numbers get 4 significant digits, booleans yes/no, pass/fail-like words a colour class; long tables are cut
at `max_rows` with a line saying how many rows the full table has and where it is. Generic on purpose: a
step that adds a column or a table gets it rendered without a change here.

Deliberately not here: choosing which tables a section shows (html.py) and any computation of the numbers.
"""

from __future__ import annotations

import html
import math
from typing import Any

import numpy as np
import pandas as pd

GOOD = {"pass", "passed", "ok", "better", "improves", "accept", "clean", "non-inferior", "measured"}
BAD = {
    "fail",
    "failed",
    "worse",
    "regresses",
    "reject",
    "error",
    "refuse",
    "flag",
    "flagged",
    "inferior",
    "regression",
    "starved",
    "timeout",
    "rejected",
}
WARN = {"inconclusive", "skipped", "no detectable change", "unknown", "warn", "note"}
# booleans are coloured only where the column says which way is good
TRUE_IS_GOOD = {"passed", "pass", "meets_slo", "adds_up", "within_slo", "recovered"}
TRUE_IS_BAD = {"failed", "starved", "flagged", "regression", "lost", "blew_up"}


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def fmt(value: Any) -> str:
    """One cell's text: floats to 4 significant digits, booleans yes/no, None/NaN empty."""
    if value is None:
        return ""
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        if math.isinf(value):
            return "∞" if value > 0 else "-∞"
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
            return f"{value:.3e}"
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(fmt(v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}={fmt(v)}" for k, v in value.items())
    try:
        if pd.isna(value):
            return ""
    except (TypeError, ValueError):
        pass
    if hasattr(value, "item"):  # numpy scalars
        return fmt(value.item())
    return str(value)


def status_class(text: str) -> str:
    """A CSS class for a verdict-like word ('' when the text is not one)."""
    t = text.strip().lower()
    if t in GOOD:
        return "good"
    if t in BAD:
        return "bad"
    if t in WARN:
        return "warn"
    return ""


def _cell(value: Any, colour: bool, column: str = "") -> str:
    text = fmt(value)
    cls = status_class(text) if colour else ""
    if colour and isinstance(value, (bool, np.bool_)):
        good = column in TRUE_IS_GOOD
        bad = column in TRUE_IS_BAD
        cls = ("good" if bool(value) else "bad") if good else (("bad" if bool(value) else "good") if bad else "")
    num = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    classes = " ".join(c for c in (cls, "num" if num else "", "long" if len(text) > 60 else "") if c)
    return f'<td class="{classes}">{esc(text)}</td>' if classes else f"<td>{esc(text)}</td>"


def table_html(
    df: pd.DataFrame | None,
    *,
    max_rows: int = 40,
    columns: list[str] | None = None,
    caption: str = "",
    source: str = "",
    colour_bool: bool = True,
) -> str:
    """A DataFrame as a compact <table>. `columns` picks and orders columns (missing ones are ignored,
    so a renamed column drops out instead of failing); `source` names the full table's file."""
    if df is None or df.empty:
        return f'<p class="missing">{esc(caption or "table")}: no rows.</p>'
    if columns:
        cols = [c for c in columns if c in df.columns]
        df = df[cols] if cols else df
    shown = df.head(max_rows)
    head = "".join(f"<th>{esc(c)}</th>" for c in shown.columns)
    body = []
    for row in shown.itertuples(index=False, name=None):
        cells = "".join(_cell(v, colour_bool, str(c)) for v, c in zip(row, shown.columns, strict=False))
        body.append("<tr>" + cells + "</tr>")
    note = []
    if len(df) > max_rows:
        note.append(f"showing {max_rows} of {len(df)} rows")
    if source:
        note.append(f"full table: <code>{esc(source)}</code>")
    cap = esc(caption) + (f' <span class="note">({"; ".join(note)})</span>' if note else "")
    cap_html = f"<caption>{cap}</caption>" if cap else ""
    return (
        f'<div class="tablewrap"><table>{cap_html}<thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def kv_html(doc: dict[str, Any] | None, *, caption: str = "", skip: tuple[str, ...] = (), max_rows: int = 200) -> str:
    """A flat key/value table of a JSON document (nested values flattened to dotted keys, lists of
    dicts left as JSON-ish text)."""
    if not doc:
        return f'<p class="missing">{esc(caption or "document")}: empty.</p>'
    rows = []
    items = [(k, v) for k, v in _flatten(doc) if k.split(".")[0] not in skip]
    for key, value in items[:max_rows]:
        text = fmt(value)
        cls = status_class(text)
        rows.append(f'<tr><th>{esc(key)}</th><td class="{cls}">{esc(text)}</td></tr>')
    if len(items) > max_rows:
        rows.append(f'<tr><th>…</th><td class="note">{len(items) - max_rows} more entries not shown</td></tr>')
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return f'<div class="tablewrap"><table class="kv">{cap}<tbody>{"".join(rows)}</tbody></table></div>'


def _flatten(doc: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for k, v in doc.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.extend(_flatten(v, key + "."))
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            out.append((key, "; ".join(", ".join(f"{a}={fmt(b)}" for a, b in item.items()) for item in v)))
        else:
            out.append((key, v))
    return out


def details(summary: str, body: str, open_: bool = False) -> str:
    """A collapsed block (no JavaScript): secondary tables stay one click away."""
    return f"<details{' open' if open_ else ''}><summary>{esc(summary)}</summary>{body}</details>"
