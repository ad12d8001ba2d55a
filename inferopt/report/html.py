"""One self-contained HTML report for a flow run: the verdict and its reasons first, then the six steps in
order (measure, locate, choose, ablate, validate, gate), each with its figures and tables.

`build_report(run)` is pure: it takes the run's data (`rundir.RunData`: tables, PNG bytes, JSON documents)
and returns an HTML string. Images are inline base64 PNGs; there is no script, no stylesheet link and no
external URL, so the file opens anywhere (and in the MLflow artifact viewer). A step's known artifacts are
laid out first; anything else it logged (a new table, a new figure) follows generically, so a step that adds
outputs shows up without a change here. A missing step or table says so.

Deliberately not here: reading files (rundir.py), MLflow, Prefect, and any number not already in the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import pandas as pd

from inferopt.report import figures
from inferopt.report.rundir import RunData, StepData
from inferopt.report.sections import SECTIONS, Part
from inferopt.report.tables import details, esc, kv_html, status_class, table_html


@dataclass(frozen=True)
class ExtraSection:
    """A section rendered elsewhere (e.g. `inferopt.compare`: this run beside another), placed after the steps."""

    anchor: str
    heading: str
    body_html: str


STEP_ORDER = ("measure", "locate", "choose", "ablate", "validate", "gate")
TITLES = {
    "measure": "1 · Measure — where a request's time goes (baseline)",
    "locate": "2 · Locate — the bottleneck",
    "choose": "3 · Choose — does the change serve the cause?",
    "ablate": "4 · Ablate — effects beyond noise",
    "validate": "5 · Validate — scenarios against the SLOs",
    "gate": "6 · Gate — quality and cost",
}

CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;margin:0;color:#1d2330;
background:#f6f7f9}
main{max-width:1340px;margin:0 auto;padding:18px 28px 60px}
h1{font-size:22px;margin:6px 0 2px}h2{font-size:18px;margin:30px 0 8px;padding-top:8px;border-top:2px solid #d9dde5}
h3{font-size:14px;margin:16px 0 6px;color:#3b4455}
.meta{color:#5b6475;font-size:12px}.meta code{font-size:12px}
nav{font-size:13px;margin:10px 0}nav a{margin-right:14px;color:#2456a6;text-decoration:none}
.banner{border-radius:8px;padding:12px 18px;margin:14px 0;color:#fff;font-size:20px;font-weight:600}
.banner.accept{background:#1f8a4c}.banner.reject{background:#c0392b}.banner.inconclusive{background:#c77c0e}
.banner.none{background:#6b7280}.banner small{display:block;font-size:13px;font-weight:400;opacity:.95;margin-top:4px}
.reasons{background:#fff;border:1px solid #d9dde5;border-radius:6px;padding:8px 12px;font-size:13px}
.reasons div{padding:1px 0;white-space:pre-wrap}.reasons div.good,.reasons div.bad,.reasons div.warn{font-weight:400}
.reasons div.top{font-weight:600}
.good{color:#17723e;font-weight:600}.bad{color:#b42318;font-weight:600}.warn{color:#a15c00;font-weight:600}
.warning{background:#fff4e0;border-left:4px solid #c77c0e;padding:6px 10px;margin:6px 0;font-size:13px}
.missing{color:#6b7280;font-style:italic;font-size:13px}
.tablewrap{overflow-x:auto;margin:6px 0 10px}
table{border-collapse:collapse;font-size:12px;background:#fff}
caption{text-align:left;font-weight:600;font-size:12px;padding:2px 0 4px;color:#3b4455}
th,td{border:1px solid #e1e4ea;padding:2px 6px;text-align:left;vertical-align:top}
thead th{background:#eef1f6;position:sticky;top:0}td.num{text-align:right;font-variant-numeric:tabular-nums}
td.long{min-width:320px;max-width:620px;white-space:normal}tbody tr:nth-child(even){background:#fafbfc}
table.kv th{background:#f3f5f8;font-weight:500;white-space:nowrap}
.figs{display:flex;flex-wrap:wrap;gap:12px}
figure{margin:0;background:#fff;border:1px solid #e1e4ea;border-radius:6px;padding:6px}
figure{flex:0 1 auto;max-width:600px}figure.wide{max-width:100%}figure img{max-width:100%;display:block}
figcaption{font-size:11px;color:#5b6475}
details{margin:6px 0}summary{cursor:pointer;font-size:13px;color:#2456a6}
.big{font-size:15px;margin:4px 0}.note{font-weight:400;color:#6b7280}
"""


def _reason_lines(lines: list[str]) -> str:
    out = []
    for line in lines:
        text = line.rstrip()
        indent = (len(text) - len(text.lstrip(" "))) // 2
        body = text.strip()
        tail = body.rsplit(": ", 1)[-1].rsplit(" ", 1)[-1] if ": " in body else ""
        cls = status_class(tail) if tail else ""
        if body.startswith(("ACCEPT", "REJECT", "INCONCLUSIVE")):
            cls = status_class(body.split()[0].rstrip(":"))
        classes = " ".join(c for c in (cls, "top" if indent == 0 else "") if c)
        attr = f' class="{classes}"' if classes else ""
        out.append(f'<div style="padding-left:{indent * 18}px"{attr}>{esc(body)}</div>')
    return f'<div class="reasons">{"".join(out)}</div>'


def _verdict_section(run: RunData) -> str:
    v = run.verdict
    if not v:
        return (
            '<div class="banner none">NO VERDICT<small>verdict.json is missing: the run stopped before the '
            "verdict (see the MLflow run's status and the steps below for what did run)</small></div>"
        )
    decision = str(v.get("decision", "unknown"))
    reasons = [str(r) for r in v.get("reasons", [])]
    headline = reasons[0] if reasons else ""
    parts = [
        f'<div class="banner {esc(decision)}">VERDICT: {esc(decision.upper())}<small>{esc(headline)}</small></div>'
    ]
    for w in v.get("warnings", []) or []:
        parts.append(f'<div class="warning">WARNING: {esc(w)}</div>')
    parts.append("<h3>Reasons</h3>" + _reason_lines(reasons[1:] if headline else reasons))
    parts.append(_glance(run))
    lint = run.lint
    if lint:
        findings = pd.DataFrame(lint.get("findings", []))
        if not findings.empty and "evidence" in findings:
            findings = findings.drop(columns=["evidence"])
        body = table_html(findings, caption="findings") if not findings.empty else "<p>no findings</p>"
        allow = lint.get("allow") or []
        if allow:
            body += (
                f'<p class="warning">lint.allow: {esc(", ".join(allow))} — reason: {esc(lint.get("allow_reason"))}</p>'
            )
        parts.append(
            details(
                f"Benchmark-cheat lint (SPEC V4): {lint.get('status', '?')}", body, open_=lint.get("status") != "clean"
            )
        )
    else:
        parts.append('<p class="missing">lint.json is missing: the cheat lint did not run.</p>')
    return "".join(parts)


def _cache_text(head: dict[str, Any]) -> str:
    """The prefix cache two ways, where the run has it: the engine's own counters and our records."""
    if "cached_token_share" not in head:
        return ""
    engine = head.get("engine_cache_hit_rate")
    text = "; prefix cache: "
    text += f"engine counters {engine:.3g} of prompt tokens hit, " if engine is not None else "no engine counters, "
    return text + (
        f"records {head['cached_token_share']:.3g} of prompt tokens cached, "
        f"{head.get('cache_hit_request_share', float('nan')):.3g} of requests hit"
    )


def _glance(run: RunData) -> str:
    """One row per step: its outcome in a few words, from the verdict's evidence and the step documents."""
    ev = (run.verdict or {}).get("evidence", {}) if run.verdict else {}
    rows: list[dict[str, Any]] = []
    head = ev.get("measure", {}).get("headline", {})
    if head:
        rows.append(
            {
                "step": "measure",
                "outcome": f"TTFT p99 {head.get('ttft_ms_p99', float('nan')):.4g} ms, "
                f"TPOT p95 {head.get('tpot_ms_p95', float('nan')):.4g} ms, "
                f"ITL p99 {head.get('itl_ms_p99', float('nan')):.4g} ms, "
                f"{head.get('output_tok_per_s', float('nan')):.4g} tok/s, "
                f"ok rate {head.get('ok_rate', float('nan')):.3g}, "
                f"SLO attainment {head.get('slo_attainment', float('nan')):.3g}, "
                f"goodput {head.get('goodput_req_per_s', float('nan')):.3g} req/s" + _cache_text(head),
            }
        )
    loc = ev.get("locate", {})
    if loc:
        rows.append({"step": "locate", "outcome": f"{loc.get('cause')} (confidence {loc.get('confidence')})"})
    ch = ev.get("choose", {})
    if ch:
        rows.append(
            {"step": "choose", "outcome": "matches the cause" if ch.get("matches") else "does NOT match the cause"}
        )
    ab = run.step("ablate")
    arm_verdicts = ab.docs.get("arm_verdicts", {}) if ab else {}
    if isinstance(arm_verdicts, dict) and arm_verdicts:
        rows.append(
            {
                "step": "ablate",
                "outcome": "; ".join(
                    f"{a}: {d.get('verdict')}" for a, d in arm_verdicts.items() if isinstance(d, dict)
                ),
            }
        )
    val = run.step("validate")
    sc = val.tables.get("scenarios") if val else None
    if sc is not None and not sc.empty and "passed" in sc:
        rows.append(
            {
                "step": "validate",
                "outcome": "; ".join(f"{r.scenario}: {'pass' if r.passed else 'fail'}" for r in sc.itertuples()),
            }
        )
    g = ev.get("gate", {})
    if g:
        rows.append({"step": "gate", "outcome": f"quality: {g.get('quality')}; cost: {g.get('cost')}"})
    return table_html(pd.DataFrame(rows), caption="At a glance") if rows else ""


def _figure(name: str, png: bytes, wide: bool = False) -> str:
    cls = ' class="wide"' if wide else ""
    return (
        f'<figure{cls}><img alt="{esc(name)}" src="{figures.png_data_uri(png)}">'
        f"<figcaption>{esc(name)}</figcaption></figure>"
    )


def _render_parts(parts: list[Part]) -> str:
    out, figs = [], []
    for p in parts:
        if p.kind == "figure":
            figs.append(_figure(p.title, p.png, wide=p.wide))
            continue
        if figs:
            out.append(f'<div class="figs">{"".join(figs)}</div>')
            figs = []
        out.append(p.html)
    if figs:
        out.append(f'<div class="figs">{"".join(figs)}</div>')
    return "".join(out)


def _rest(step: StepData, used: set[str]) -> str:
    """Whatever the step logged that its section did not lay out: figures, tables, documents, raw data."""
    parts = [Part.fig(name, png) for name, png in step.figures.items() if name not in used]
    html = _render_parts(parts)
    for name, df in step.tables.items():
        if name not in used:
            html += table_html(df, caption=name, source=f"{step.name}/{name}.parquet")
    for name, doc in step.docs.items():
        if name not in used:
            html += details(f"{name}.json", kv_html(doc if isinstance(doc, dict) else {"value": doc}))
    if step.bulk:
        files = ", ".join(f"{n} ({r} rows)" if r is not None else n for n, r in step.bulk.items())
        html += f'<p class="meta">Raw data in <code>{esc(step.name)}/</code> (not shown): {esc(files)}</p>'
    return html


def _step_section(key: str, step: StepData | None, run: RunData) -> str:
    title = TITLES.get(key, step.name if step else key)
    head = f'<h2 id="{esc(key)}">{esc(title)}</h2>'
    if step is None:
        return head + (
            f'<p class="missing">Not in this run: no <code>{esc(key)}</code> step directory (the run '
            "stopped before this step, or it was skipped).</p>"
        )
    builder: Callable[[StepData, RunData], tuple[list[Part], set[str]]] | None = SECTIONS.get(key)
    parts, used = builder(step, run) if builder else ([], set())
    return head + _render_parts(parts) + _rest(step, used)


def _candidate_meta(run: RunData) -> str:
    c = run.candidate or {}
    bits = [f"MLflow run <code>{esc(run.run_id)}</code>"]
    if c.get("changes"):
        bits.append("changes: " + esc(", ".join(f"{k}={v}" for k, v in c["changes"].items())))
    if c.get("target_metrics"):
        bits.append("targets: " + esc(", ".join(map(str, c["target_metrics"]))))
    base = c.get("baseline", {})
    if isinstance(base, dict) and base.get("engine"):
        bits.append(f"engine: {esc(base.get('engine'))}")
    if run.arms:
        bits.append("arms: " + esc(", ".join(run.arms)))
    return '<p class="meta">' + " · ".join(bits) + "</p>"


def build_report(run: RunData, title: str | None = None, extra: tuple[ExtraSection, ...] = ()) -> str:
    """The report as one HTML string (see the module docstring); `extra` sections follow the steps."""
    name = (run.candidate or {}).get("name") or run.run_id
    title = title or f"inferopt report — {name}"
    keys = list(STEP_ORDER) + [k for k in run.steps if k not in STEP_ORDER]
    nav = "".join(f'<a href="#{esc(k)}">{esc(TITLES.get(k, k).split(" — ")[0])}</a>' for k in keys)
    nav += "".join(f'<a href="#{esc(x.anchor)}">{esc(x.heading)}</a>' for x in extra)
    body = [
        f"<h1>{esc(title)}</h1>",
        _candidate_meta(run),
        f'<nav><a href="#verdict">Verdict</a>{nav}</nav>',
        '<h2 id="verdict">Verdict</h2>',
        _verdict_section(run),
    ]
    body += [_step_section(k, run.step(k), run) for k in keys]
    body += [f'<h2 id="{esc(x.anchor)}">{esc(x.heading)}</h2>{x.body_html}' for x in extra]
    if run.docs:
        body.append(
            '<h2 id="other">Other documents</h2>'
            + "".join(
                details(f"{n}.json", kv_html(d if isinstance(d, dict) else {"value": d})) for n, d in run.docs.items()
            )
        )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{esc(title)}</title>'
        f"<style>{CSS}</style></head><body><main>{''.join(body)}</main></body></html>"
    )
