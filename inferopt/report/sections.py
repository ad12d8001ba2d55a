"""The known layout of each step's section in the HTML report: which of the step's tables, figures and
documents come first, in what shape. Each builder returns its parts and the names it used; html.py renders
the parts and then, generically, everything else the step logged.

Deliberately not here: page assembly and styling (html.py), cell formatting (tables.py), reading files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import pandas as pd

from inferopt.report import figures
from inferopt.report.rundir import RunData, StepData
from inferopt.report.tables import details, esc, kv_html, status_class, table_html


@dataclass
class Part:
    kind: str  # "html" | "figure"
    html: str = ""
    title: str = ""
    png: bytes = b""
    wide: bool = False

    @classmethod
    def fig(cls, title: str, png: bytes, wide: bool = False) -> "Part":
        return cls(kind="figure", title=title, png=png, wide=wide)

    @classmethod
    def text(cls, html: str) -> "Part":
        return cls(kind="html", html=html)


Builder = Callable[[StepData, RunData], tuple[list[Part], set[str]]]
SLICE_METRICS = ("ttft_ms", "tpot_ms", "itl_ms_p99", "e2e_ms", "queue_ms", "prefill_ms", "decode_ms")


def _status_line(label: str, status: Any, reasons: list[str] | None = None) -> str:
    text = str(status)
    out = f'<p class="big">{esc(label)}: <span class="{status_class(text)}">{esc(text)}</span></p>'
    if reasons:
        out += "<ul>" + "".join(f"<li>{esc(r.strip())}</li>" for r in reasons) + "</ul>"
    return out


def _littles_status(dec: dict) -> str:
    """pass / fail / not stationary (older runs carry only `littles_holds`)."""
    status = dec.get("littles_status")
    if status == "not stationary":
        return status
    return "pass" if dec.get("littles_holds") else "fail"


def _figs(step: StepData, names: list[str], used: set[str]) -> list[Part]:
    parts = []
    for n in names:
        if n in step.figures:
            parts.append(Part.fig(n, step.figures[n]))
            used.add(n)
    return parts


def _table(
    step: StepData, name: str, used: set[str], caption: str = "", collapsed: bool = False, **kw: Any
) -> list[Part]:
    if name not in step.tables:
        return []
    used.add(name)
    html = table_html(step.tables[name], caption=caption or name, source=f"{step.name}/{name}.parquet", **kw)
    return [Part.text(details(caption or name, html) if collapsed else html)]


def slice_distribution(summary: pd.DataFrame) -> pd.DataFrame:
    """The measure summary (long: slice × metric × stat) as one row per slice: n, ok rate, p50/p95/p99 of
    each latency metric present."""
    if summary is None or summary.empty or not {"slice_dim", "slice_value", "metric", "stat", "value"} <= set(summary):
        return pd.DataFrame()
    keep = summary["metric"].isin(["ok_rate", "slo_attainment", "goodput_req_per_s"])
    s = summary[summary["stat"].isin(["p50", "p95", "p99", "count"]) | keep]
    s = s.assign(col=s["metric"].str.removesuffix("_ms") + " " + s["stat"])
    wide = s.pivot_table(index=["slice_dim", "slice_value"], columns="col", values="value", aggfunc="first", sort=False)
    order = ["requests count", "ok_rate mean", "slo_attainment mean", "goodput_req_per_s rate"] + [
        f"{m.removesuffix('_ms')} {q}" for m in SLICE_METRICS for q in ("p50", "p95", "p99")
    ]
    cols = [c for c in order if c in wide.columns] + [c for c in wide.columns if c not in order]
    names = {
        "requests count": "n",
        "ok_rate mean": "ok rate",
        "slo_attainment mean": "SLO attainment",
        "goodput_req_per_s rate": "goodput req/s",
    }
    out = wide[cols].reset_index().rename(columns=names)
    dims = list(dict.fromkeys(out["slice_dim"]))
    key = out.apply(lambda r: (dims.index(r["slice_dim"]), figures.slice_sort_key(r["slice_value"])), axis=1)
    return out.loc[sorted(out.index, key=lambda i: key[i])].reset_index(drop=True)


def measure(step: StepData, run: RunData) -> tuple[list[Part], set[str]]:
    used: set[str] = set()
    parts: list[Part] = []
    doc = step.docs.get("measure", {})
    dec = doc.get("decomposition", {}) if isinstance(doc, dict) else {}
    if dec:
        adds = dec.get("adds_up")
        parts.append(
            Part.text(
                _status_line(
                    "Phases add up to the client's TTFT/E2E (SPEC M3)",
                    "pass" if adds else "fail",
                    [
                        f"TTFT within tolerance: {dec.get('ttft_share_within_tol')}, "
                        f"E2E within tolerance: {dec.get('e2e_share_within_tol')}, residual p99 "
                        f"{dec.get('ttft_residual_ms_p99', float('nan')):.3g} ms (tolerance "
                        f"{dec.get('abs_tol_ms')} ms or {dec.get('rel_tol')})"
                    ],
                )
            )
        )
    if dec and "littles_ratio" in dec:
        parts.append(
            Part.text(
                _status_line(
                    "Little's law over the steady window: mean in the engine (its own clock) = arrival rate x mean "
                    "time in system (the client's clock); a queue that grows through the run is not stationary",
                    _littles_status(dec),
                    [
                        f"L {dec.get('littles_L', float('nan')):.3g} ({dec.get('littles_L_clock', 'client')} clock) "
                        f"vs lambda x W {dec.get('littles_lambda_W', float('nan')):.3g} (ratio "
                        f"{dec.get('littles_ratio', 0):.3f}); departures per arrival in the window "
                        f"{dec.get('littles_departures_per_arrival', float('nan')):.2f}"
                    ],
                )
            )
        )
    if "summary" in step.tables:
        used.add("summary")
        dist = slice_distribution(step.tables["summary"])
        parts.append(
            Part.text(
                "<h3>Distributions per slice (ms)</h3>"
                + table_html(
                    dist, max_rows=60, caption="p50 / p95 / p99 per slice", source=f"{step.name}/summary.parquet"
                )
            )
        )
    parts += sessions(step, run, used)
    parts.append(Part.text("<h3>Where the time goes, and latency CDFs per slice</h3>"))
    parts += _figs(step, sorted(n for n in step.figures if n.startswith("phase_stack_")), used)
    grid = figures.cdf_grid(run.phases) if run.phases is not None else None
    if grid is not None:
        parts.append(
            Part.fig("latency CDFs per slice (from 1-measure/phases.parquet)", figures.fig_png(grid), wide=True)
        )
        used.add("ttft_cdf_by_input.png")  # the grid's first row shows the same curves
    else:
        parts.append(Part.text('<p class="missing">No per-request phases: the CDFs per slice are missing.</p>'))
    if isinstance(doc, dict) and doc:
        used.add("measure")
        parts.append(
            Part.text(
                details(
                    "engine, server counters, warm-up, slice edges (measure.json)",
                    kv_html(doc, skip=("decomposition",)),
                )
            )
        )
    return parts, used


def session_latency(sessions: pd.DataFrame) -> pd.DataFrame:
    """One row per arm: sessions, success rate and the p50/p95/p99 of task, tool and history time (ms)."""
    rows = []
    for arm, sub in sessions.groupby("arm") if "arm" in sessions else [("", sessions)]:
        row: dict[str, Any] = {"arm": arm, "sessions": len(sub), "success rate": float((sub["outcome"] == "ok").mean())}
        for col in ("task_ms", "tool_ms", "history_ms", "think_ms"):
            for q in (0.5, 0.95, 0.99):
                row[f"{col.removesuffix('_ms')} p{round(q * 100)}"] = float(pd.to_numeric(sub[col]).quantile(q))
        rows.append(row)
    return pd.DataFrame(rows)


def sessions(step: StepData, run: RunData, used: set[str]) -> list[Part]:
    """A multi-turn load's session-level latency, the per-session decomposition and cost per successful session
    (from the gate's cost table, when the gate ran)."""
    table = step.tables.get("sessions")
    if table is None or table.empty:
        return []
    used.add("sessions")
    dec = step.docs.get("measure", {}).get("decomposition", {}) if isinstance(step.docs.get("measure"), dict) else {}
    parts = [Part.text("<h3>Sessions (a session is the user's task)</h3>")]
    if "session_adds_up" in dec:
        parts.append(
            Part.text(
                _status_line(
                    "Per session: task time = turns' (TTFT + (N-1) x TPOT + T_external) + think time",
                    "pass" if dec.get("session_adds_up") else "fail",
                    [
                        f"{dec.get('sessions_checked')} complete sessions, share within tolerance "
                        f"{dec.get('session_share_within_tol')}, residual p50 "
                        f"{dec.get('session_residual_ms_p50', float('nan')):.3g} ms"
                    ],
                )
            )
        )
    src = f"{step.name}/sessions.parquet"
    parts.append(Part.text(table_html(session_latency(table), caption="session latency (ms)", source=src)))
    gate = run.step("gate")
    cost = gate.tables.get("cost") if gate is not None else None
    if cost is not None and "cost_per_successful_session_usd" in cost:
        cols = [c for c in ("arm", "tasks", "successful", "cost_per_successful_session_usd") if c in cost]
        parts.append(
            Part.text(
                table_html(cost[cols], caption="cost per successful session (USD)", source=f"{gate.name}/cost.parquet")
            )
        )
    else:
        parts.append(Part.text('<p class="missing">Cost per successful session: the gate did not run.</p>'))
    parts.append(Part.text(details("every session", table_html(table, max_rows=200, caption="sessions", source=src))))
    return parts


def locate(step: StepData, run: RunData) -> tuple[list[Part], set[str]]:
    used: set[str] = set()
    parts: list[Part] = []
    b = step.docs.get("bottleneck")
    if isinstance(b, dict) and b:
        used.add("bottleneck")
        parts.append(
            Part.text(
                f'<p class="big">Cause: <b>{esc(b.get("cause"))}</b> (confidence '
                f"{esc(b.get('confidence'))}) — {esc(b.get('rule'))}</p>"
            )
        )
        parts.append(Part.text(table_html(pd.DataFrame(b.get("evidence") or []), caption="rule evidence")))
    else:
        parts.append(Part.text('<p class="missing">bottleneck.json is missing: no located cause.</p>'))
    parts += _figs(step, ["roofline.png", "op_breakdown.png"], used)
    parts += _table(step, "per_slice", used, caption="cause per slice")
    parts += _table(step, "roofline", used, caption="roofline per phase (ceilings)")
    parts += _table(step, "roofline_measured", used, caption="roofline per phase (measured)")
    parts += _table(step, "kv_capacity", used, caption="KV-cache capacity")
    parts += _table(step, "op_breakdown", used, caption="op breakdown per phase")
    parts += _table(step, "top_ops", used, caption="top ops", collapsed=True)
    return parts, used


def choose(step: StepData, run: RunData) -> tuple[list[Part], set[str]]:
    used: set[str] = set()
    c = step.docs.get("choice")
    if not isinstance(c, dict):
        return [Part.text('<p class="missing">choice.json is missing.</p>')], used
    used.add("choice")
    parts = [
        Part.text(
            _status_line(
                f"The candidate's remedy vs the cause '{c.get('cause')}'", "pass" if c.get("matches") else "fail"
            )
        )
    ]
    if c.get("warning"):
        parts.append(Part.text(f'<div class="warning">{esc(c["warning"])}</div>'))
    parts.append(Part.text(kv_html(c)))
    return parts, used


def ablate(step: StepData, run: RunData) -> tuple[list[Part], set[str]]:
    used: set[str] = set()
    parts: list[Part] = []
    av = step.docs.get("arm_verdicts")
    if isinstance(av, dict) and av:
        used.add("arm_verdicts")
        rows = [
            {
                "arm": a,
                "role": d.get("role"),
                "verdict": d.get("verdict"),
                "repeats": d.get("repeats"),
                "reasons": " | ".join(str(r).strip() for r in d.get("reasons", [])),
                "error": d.get("error"),
            }
            for a, d in av.items()
            if isinstance(d, dict)
        ]
        parts.append(Part.text(table_html(pd.DataFrame(rows), caption="verdict per arm")))
    parts += _table(
        step,
        "effects",
        used,
        caption="effects: arm vs baseline (benefit: the targets; harm: every metric against its tolerance; "
        "mde: the smallest change this run could detect)",
        columns=[
            "arm",
            "metric",
            "family",
            "unit",
            "baseline_value",
            "arm_value",
            "ratio",
            "ratio_lo",
            "ratio_hi",
            "p_value",
            "tolerance",
            "harm_p",
            "harm",
            "mde",
            "significant",
            "direction",
        ],
        max_rows=80,
    )
    if "effects" in step.tables:
        parts.append(Part.text(details("effects: every column", table_html(step.tables["effects"], max_rows=200))))
    per_metric = sorted(n for n in step.figures if n.startswith("forest_"))  # one forest per metric, if logged
    parts += _figs(step, per_metric + ["effects_forest.png", "ttft_cdf_by_arm.png", "tpot_cdf_by_arm.png"], used)
    parts += _table(step, "interactions", used, caption="interaction of the single changes")
    stop = step.docs.get("stopping")
    if isinstance(stop, dict):
        used.add("stopping")
        parts.append(Part.text(details(f"stopping: {stop.get('reason', '')}", kv_html(stop))))
    for name in ("looks", "trials", "trial_headlines"):
        parts += _table(step, name, used, collapsed=True, max_rows=200)
    return parts, used


def validate(step: StepData, run: RunData) -> tuple[list[Part], set[str]]:
    used: set[str] = set()
    sc = step.tables.get("scenarios")
    if sc is None:
        return [Part.text('<p class="missing">No scenarios table: no scenario ran.</p>')], used
    used.add("scenarios")
    first = [c for c in ("scenario", "kind", "passed") if c in sc]
    ordered = sc[first + [c for c in sc.columns if c not in first and c != "reasons"]]
    parts = [
        Part.text(table_html(ordered, caption="scenarios against the SLOs", source=f"{step.name}/scenarios.parquet"))
    ]
    if "reasons" in sc:  # the reasons under the table: the table stays narrow enough to read
        items = []
        for r in sc.to_dict("records"):
            ok = r.get("passed")
            word = "pass" if ok is True or str(ok).lower() == "true" else "fail" if ok is not None else "?"
            items.append(
                f'<li><b>{esc(r.get("scenario", ""))}</b>: <span class="{status_class(word)}">{word}</span>'
                f" — {esc(r.get('reasons', ''))}</li>"
            )
        parts.append(Part.text("<ul>" + "".join(items) + "</ul>"))
    parts += _figs(step, sorted(n for n in step.figures if "cdf" in n), used)
    return parts, used


def gate(step: StepData, run: RunData) -> tuple[list[Part], set[str]]:
    used: set[str] = set()
    parts: list[Part] = []
    g = step.docs.get("gate")
    if isinstance(g, dict):
        used.add("gate")
        q, c = g.get("quality", {}), g.get("cost", {})
        parts.append(Part.text(_status_line("Quality", q.get("status"), q.get("reasons"))))
        parts.append(Part.text(_status_line("Cost", c.get("status"), c.get("reasons"))))
        parts.append(Part.text(details("gate.json", kv_html(g))))
    slices = step.tables.get("quality_slices")
    if slices is not None:
        fig = figures.quality_forest(slices)
        if fig is not None:
            parts.append(Part.fig("quality per slice (from quality_slices)", figures.fig_png(fig)))
    else:
        parts.append(
            Part.text(
                '<p class="missing">No quality slices: the sliced suite did not run on this '
                "candidate (see the quality reasons above).</p>"
            )
        )
    parts += _table(step, "quality_slices", used, caption="quality per slice: paired CI vs the margin", max_rows=80)
    parts += _table(step, "quality_accuracy", used, caption="accuracy per arm and slice", collapsed=True, max_rows=200)
    parts += _table(step, "quality_calibration", used, caption="calibration (ECE / Brier)")
    dist = step.tables.get("quality_distance")
    fig = figures.retrieval_distance(dist) if dist is not None else None
    if fig is not None:
        parts.append(Part.fig("retrieval by key-to-query distance (from quality_distance)", figures.fig_png(fig)))
    parts += _table(step, "quality_distance", used, caption="kv retrieval accuracy by key-to-query distance")
    parts += _table(step, "cost", used, caption="cost per successful task")
    if "lm_eval_results" in step.docs:
        used.add("lm_eval_results")
        parts.append(
            Part.text(f'<p class="meta">lm-eval\'s raw results: <code>{esc(step.name)}/lm_eval_results.json</code></p>')
        )
    return parts, used


SECTIONS: dict[str, Builder] = {
    "measure": measure,
    "locate": locate,
    "choose": choose,
    "ablate": ablate,
    "validate": validate,
    "gate": gate,
}
