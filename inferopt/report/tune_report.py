"""The HTML report of a search run (`flows.tune`): the final word first (the search's decision and, when the
recommendation went through the chain, its verdicts), then the capacity frontier of every configuration tried
with the baseline marked, the capacity table (the baseline and every point: capacity under the SLO, its bracket,
the operating point at capacity), the duels and evidence, with pruning every point of the grid predicted beside
measured (trials saved, the simulator's top pick vs the measured one), the baseline's measure and locate
sections as the optimize report lays them out, what was proposed and why, and each point's rate/latency curve.

`build_tune_report(run)` is pure, like `html.build_report`: the run directory's data in (`rundir.RunData`), one
self-contained HTML string out. Deliberately not here: reading files, MLflow, and any number not in the run.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from inferopt.report.html import CSS, _figure, _step_section
from inferopt.report.rundir import RunData
from inferopt.report.tables import details, esc, kv_html, table_html

CAPACITY_COLUMNS = [
    "point",
    "label",
    "proposal",
    "cause",
    "chosen_by",
    "capacity_req_per_s",
    "capacity_lo",
    "capacity_hi",
    "capacity_status",
    "probes",
    "goodput_req_per_s",
    "goodput_tok_per_s",
    "ttft_ms_p99",
    "tpot_ms_p50",
    "per_user_tok_per_s",
    "slo_attainment",
    "beats_baseline",
    "recommended",
    "tied",
    "control",
]
BANNER = {"proven": "accept", "not_proven": "reject", "nothing_to_judge": "none"}


def _banner(summary: dict[str, Any], chain: dict[str, Any] | None) -> str:
    decision = str(summary.get("decision", "unknown"))
    head = f"SEARCH: {decision.upper().replace('_', ' ')}"
    cls = "accept" if decision == "winner" else "inconclusive" if decision == "tie" else "none"
    if chain:
        c = str(chain.get("decision", ""))
        head += f" · CHAIN: {c.upper().replace('_', ' ')}"
        cls = BANNER.get(c, cls)
    text = str((chain or {}).get("message") or summary.get("message", ""))
    return f'<div class="banner {esc(cls)}">{esc(head)}<small>{esc(text)}</small></div>'


def _capacity_table(points: pd.DataFrame | None) -> str:
    if points is None or points.empty:
        return '<p class="missing">points.parquet is missing: no configuration was tried.</p>'
    cols = [c for c in CAPACITY_COLUMNS if c in points]
    return table_html(points, columns=cols, caption="capacity under the SLO, highest first", source="points.parquet")


def _chain_table(chain: dict[str, Any] | None) -> str:
    if not chain or not chain.get("judged"):
        return '<p class="missing">No point went through the chain (nothing recommended, or --judge 0).</p>'
    rows = [
        {
            "point": j.get("label"),
            "verdict": j.get("decision"),
            "optimize run": j.get("run_id"),
            "first reasons": " | ".join((j.get("reasons") or [])[:3]),
            "candidate": j.get("candidate"),
        }
        for j in chain["judged"]
    ]
    return table_html(pd.DataFrame(rows), caption="the recommendation through ablation, validation, gate, verdict")


PRUNE_COLUMNS = [
    "point",
    "label",
    "kind",
    "predicted_capacity_req_per_s",
    "measured_capacity_req_per_s",
    "predicted_per_user_tok_per_s",
    "why",
    "carried",
    "refusal",
]


def _pruning(summary: dict[str, Any], table: pd.DataFrame | None) -> str:
    p = summary.get("pruning")
    if not p:
        return ""
    head = (
        f"{p.get('trials_real')} real trials of a {p.get('trials_full_grid')}-point grid (saved "
        f"{p.get('trials_saved')}); the simulator's top pick {p.get('sim_top')} vs the measured top pick "
        f"{p.get('measured_top')}: {'the same' if p.get('sim_top_is_measured_top') else 'not the same or unknown'}"
        + ("" if p.get("measured_top_predicted") is not False else " (the measured top is a point it cannot predict)")
    )
    cols = [c for c in PRUNE_COLUMNS if table is not None and c in table]
    caption = "every point of the grid: kind=predicted is the simulator's prediction only, never measured"
    return (
        '<h2 id="pruning">Pruned by the simulator</h2>'
        f"<p>{esc(head)}</p><p>{esc(str(p.get('message', '')))}</p>"
        + table_html(table, columns=cols or None, caption=caption, source="points_predicted.parquet")
    )


def _lines(title: str, lines: list[str]) -> str:
    if not lines:
        return ""
    return f"<h3>{esc(title)}</h3><ul>" + "".join(f"<li>{esc(x)}</li>" for x in lines) + "</ul>"


def _curves(run: RunData) -> str:
    figs = [
        _figure(f"{key}: {name}", png)
        for key, step in run.steps.items()
        if key.startswith("point-")
        for name, png in step.figures.items()
    ]
    return details(f"Rate/latency curve of each point ({len(figs)})", f'<div class="figs">{"".join(figs)}</div>')


def build_tune_report(run: RunData, title: str | None = None) -> str:
    """The search run's report as one HTML string (see the module docstring)."""
    summary = run.docs.get("tune") or {}
    chain = run.docs.get("chain")
    top = run.top
    points = top.tables.get("points") if top else None
    frontier = top.figures.get("frontier.png") if top else None
    name = (run.docs.get("inputs.resolved") or {}).get("system", {}).get("name", run.run_id)
    title = title or f"inferopt search — {name}"
    body = [
        f"<h1>{esc(title)}</h1>",
        f'<p class="meta">MLflow run <code>{esc(run.run_id)}</code> · cause located: '
        f"{esc(summary.get('cause'))} · proposals: {esc(summary.get('proposals'))}</p>",
        '<h2 id="decision">Decision</h2>',
        _banner(summary, chain),
        _chain_table(chain),
        '<h2 id="frontier">Frontier — every configuration tried</h2>',
        _figure("frontier.png", frontier, wide=True) if frontier else '<p class="missing">no frontier figure</p>',
        _capacity_table(points),
        _lines("Duels and evidence", [str(x) for x in summary.get("evidence", [])]),
        _lines("Left untried by the budget", [str(x) for x in summary.get("untried", [])]),
        _pruning(summary, top.tables.get("points_predicted") if top else None),
        _step_section("measure", run.step("measure"), run),
        _step_section("locate", run.step("locate"), run),
        '<h2 id="propose">3 · Propose — levers for the located cause</h2>',
    ]
    prop = run.step("propose")
    body.append(table_html(prop.tables.get("proposals") if prop else None, caption="points proposed"))
    body.append(details("proposals.json", kv_html((prop.docs.get("proposals") if prop else None) or {})))
    body.append(_curves(run))
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{esc(title)}</title>'
        f"<style>{CSS}</style></head><body><main>{''.join(body)}</main></body></html>"
    )
