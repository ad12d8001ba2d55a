"""The seed's worked case, reproduced in shape (SPEC E): the same load through several serving strategies, one
table (throughput, TTFT p50/p99, TPOT p95, SLO verdict) and one choice, decided in the seed's order.

`case_requests` puts every tenant's synthetic workload on one arrival timeline; the strategies run one after
another through `run_system` on that table (a pooled strategy is one `PooledSystem`, so its pools receive their
tenants' requests from that timeline and its records come back as one run); `row_from_run` makes a table row
and `decide` chooses. The fastest strategy wins only if its tail holds; if none meets the SLO nothing is chosen
and the table says why. The numbers hold for this load only: re-measure when the load changes.

Deliberately not here: the config (`inferopt.config.case`), the engines, the load runner, MLflow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from inferopt.config import SLOConfig
from inferopt.config.case import CaseConfig
from inferopt.measure.runner import RunTags
from inferopt.measure.session import MeasuredRun, run_system
from inferopt.measure.slices import headline, throughput
from inferopt.workload.build import build_workload
from inferopt.workload.mixed import MixedLoad, merge_timeline

__all__ = [
    "CaseDecision",
    "CaseRow",
    "case_json",
    "case_requests",
    "decide",
    "format_table",
    "row_from_run",
    "run_case",
    "slo_checks",
]

NAN = float("nan")


@dataclass(frozen=True)
class CaseRow:
    strategy: str
    throughput_tok_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p95_ms: float
    e2e_p99_ms: float = NAN
    timeout_rate: float = 0.0  # interactive requests
    failure_rate: float = 0.0  # interactive requests: error + rejected
    requests: int = 0  # all tenants
    interactive_requests: int = 0
    failed: bool = False  # the run itself crashed
    error: str = ""


@dataclass(frozen=True)
class CaseDecision:
    chosen: str | None
    meets_slo: dict[str, bool]
    verdicts: dict[str, str]
    steps: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- the load


def case_requests(case: CaseConfig) -> pd.DataFrame:
    """All tenants' requests on one arrival timeline (sorted by arrival; prefix groups kept per tenant)."""
    return merge_timeline([build_workload(t.workload) for t in case.tenants.values()])


def case_load(case: CaseConfig) -> MixedLoad:
    """The case's tenants as one load a capacity search scales (the mix kept; the SLO judges the interactive)."""
    return MixedLoad(tuple(t.workload for t in case.tenants.values()), case.interactive_tenants, case.name)


# --------------------------------------------------------------------------- one row per strategy


def row_from_run(strategy: str, run: MeasuredRun, interactive_tenants: tuple[str, ...]) -> CaseRow:
    """The table row of one strategy's run. Throughput: output tokens/s of every successful request of every
    tenant over the run's window (the deployment's capacity); latencies and failure rates: the interactive
    tenants' requests only — what the SLO promises (the seed: "meets every interactive SLO"). A crashed run
    gets a row with no numbers that fails the SLO, with the error."""
    if run.failed:
        return CaseRow(strategy, NAN, NAN, NAN, NAN, failed=True, error=(run.error or "failed").splitlines()[0])
    phases = run.phases
    tput = throughput(phases, run.duration_s)["output_tok_per_s"]
    inter = phases[phases["tenant"].isin(interactive_tenants)]
    h = headline(inter, run.duration_s)
    return CaseRow(
        strategy=strategy,
        throughput_tok_s=tput,
        ttft_p50_ms=h["ttft_ms_p50"],
        ttft_p99_ms=h["ttft_ms_p99"],
        tpot_p95_ms=h["tpot_ms_p95"],
        e2e_p99_ms=h["e2e_ms_p99"],
        timeout_rate=h["timeout_rate"],
        failure_rate=h["error_rate"] + h["rejected_rate"],
        requests=len(phases),
        interactive_requests=len(inter),
    )


# --------------------------------------------------------------------------- the decision (pure)


def slo_checks(row: CaseRow, slo: SLOConfig) -> list[tuple[str, bool]]:
    """Each SLO check of one row in the seed's order (p50, then p99, then the rest): (text, held).
    A missing value (NaN: the run crashed or no interactive request succeeded) fails its check."""

    def held(value: float, bound: float) -> bool:
        return not math.isnan(value) and value <= bound

    latency: list[tuple[str, float, float | None]] = [
        ("TTFT p50", row.ttft_p50_ms, slo.ttft_p50_ms),
        ("TTFT p99", row.ttft_p99_ms, slo.ttft_p99_ms),
        ("TPOT p95", row.tpot_p95_ms, slo.tpot_p95_ms),
        ("E2E p99", row.e2e_p99_ms, slo.e2e_p99_ms),
    ]
    out = []
    if row.failed:
        out.append((f"run failed: {row.error}", False))
    for label, value, bound in latency:
        if bound is None:
            continue
        ok = held(value, bound)
        shown = (
            f"{value:.1f}" if not math.isnan(value) and round(value) == bound else f"{value:.0f}"
        )  # no "300 ms > 300 ms"
        out.append((f"{label} {shown} ms {'<=' if ok else '>'} {bound:g} ms", ok))
    for label, value, bound in (
        ("timeout rate", row.timeout_rate, slo.max_timeout_rate),
        ("error+rejected rate", row.failure_rate, slo.max_error_rate),
    ):
        ok = held(value, bound)
        out.append((f"{label} {value:.3f} {'<=' if ok else '>'} {bound:g}", ok))
    return out


def decide(rows: list[CaseRow], slo: SLOConfig) -> CaseDecision:
    """Throughput first, then p50 and p99 (and the rest) against the SLO: rank the strategies by throughput,
    highest first, walk down the ranking checking each in the seed's order — TTFT p50, then TTFT p99, then
    TPOT p95 (and E2E p99 and the failure rates when the SLO sets them) — and choose the first that meets
    every check. A faster-on-average strategy whose p99 fails is passed over."""

    def tput(r: CaseRow) -> float:
        return -math.inf if math.isnan(r.throughput_tok_s) else r.throughput_tok_s

    ranked = sorted(rows, key=lambda r: (-tput(r), r.ttft_p99_ms if not math.isnan(r.ttft_p99_ms) else math.inf))
    best = max((tput(r) for r in rows), default=-math.inf)
    steps = [
        "1. throughput, highest first: " + " > ".join(f"{r.strategy} {r.throughput_tok_s:.1f} tok/s" for r in ranked)
    ]
    meets: dict[str, bool] = {}
    first_fail: dict[str, str] = {}
    for r in rows:
        checks = slo_checks(r, slo)
        meets[r.strategy] = all(ok for _, ok in checks)
        first_fail[r.strategy] = next((text for text, ok in checks if not ok), "")
    chosen = next((r.strategy for r in ranked if meets[r.strategy]), None)
    for i, r in enumerate(ranked, start=2):
        checks = slo_checks(r, slo)
        shown = "; ".join(f"{t} {'ok' if ok else 'FAIL'}" for t, ok in checks)
        outcome = (
            "chosen"
            if r.strategy == chosen
            else ("meets the SLO, lower throughput" if meets[r.strategy] else "fails the SLO")
        )
        steps.append(f"{i}. {r.strategy}: {shown} -> {outcome}")
        if r.strategy == chosen:
            break
    verdicts: dict[str, str] = {}
    for r in rows:
        share = f"{100 * r.throughput_tok_s / best:.0f} % of the best throughput" if best > 0 and not r.failed else ""
        if r.strategy == chosen:
            v = "meets every interactive SLO: chosen"
        elif meets[r.strategy]:
            v = f"meets the SLO; {share}"
        elif r.failed:
            v = f"run failed: {r.error}"
        else:
            v = f"{first_fail[r.strategy]}: fails the SLO" + (f" ({share})" if share else "")
        verdicts[r.strategy] = v
    if chosen is None:
        steps.append(f"{len(steps) + 1}. no strategy meets the SLO: nothing chosen")
    return CaseDecision(chosen=chosen, meets_slo=meets, verdicts=verdicts, steps=steps)


# --------------------------------------------------------------------------- output


def _fmt(value: float, unit: str) -> str:
    return "—" if math.isnan(value) else f"{value:.0f} {unit}" if unit == "ms" else f"{value:.1f} {unit}"


def format_table(rows: list[CaseRow], decision: CaseDecision, slo: SLOConfig) -> str:
    """A markdown table in the seed's columns, then the decision's steps."""
    bound = f"SLO: TTFT p50 <= {slo.ttft_p50_ms:g} ms, " if slo.ttft_p50_ms else "SLO: "
    bound += f"TTFT p99 <= {slo.ttft_p99_ms:g} ms, TPOT p95 <= {slo.tpot_p95_ms:g} ms"
    lines = ["| strategy | throughput | TTFT p50 | TTFT p99 | TPOT p95 | verdict |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r.strategy} | {_fmt(r.throughput_tok_s, 'tok/s')} | {_fmt(r.ttft_p50_ms, 'ms')} | "
            f"{_fmt(r.ttft_p99_ms, 'ms')} | {_fmt(r.tpot_p95_ms, 'ms')} | {decision.verdicts[r.strategy]} |"
        )
    return "\n".join(
        [
            *lines,
            "",
            bound + " (latencies: interactive requests; throughput: all requests)",
            "Decision:",
            *decision.steps,
        ]
    )


def case_json(rows: list[CaseRow], decision: CaseDecision) -> dict[str, Any]:
    """The benchmark's last line: the six columns of each row (+ its verdict) and the chosen strategy."""

    def num(x: float) -> float | None:
        return None if math.isnan(x) else round(x, 3)

    return {
        "rows": [
            {
                "strategy": r.strategy,
                "throughput_tok_s": num(r.throughput_tok_s),
                "ttft_p50_ms": num(r.ttft_p50_ms),
                "ttft_p99_ms": num(r.ttft_p99_ms),
                "tpot_p95_ms": num(r.tpot_p95_ms),
                "meets_slo": decision.meets_slo[r.strategy],
                "verdict": decision.verdicts[r.strategy],
            }
            for r in rows
        ],
        "chosen": decision.chosen,
    }


# --------------------------------------------------------------------------- running it


def strategy_slug(name: str) -> str:
    """A strategy's name as a folder and system name (`pooled + chunked prefill` -> `pooled-chunked-prefill`)."""
    return "-".join("".join(c if c.isalnum() else " " for c in name).split())


def run_case(
    case: CaseConfig, out_dir: str | Path, *, only: tuple[str, ...] = ()
) -> tuple[list[CaseRow], list[MeasuredRun]]:
    """Every strategy (or those in `only`) on the case's load, one after another; records under
    `out_dir/<strategy>/requests.jsonl`. A crashing strategy becomes a failed row; the others still run."""
    table = case_requests(case)
    timeout_s = max(t.workload.timeout_s for t in case.tenants.values())
    rows, runs = [], []
    for name, st in case.strategies.items():
        if only and name not in only:
            continue
        slug = strategy_slug(name)
        run = run_system(
            st.system(slug),
            table,
            RunTags(run_tag=case.name, arm=name, scenario="case"),
            timeout_s=timeout_s,
            records_path=Path(out_dir) / slug / "requests.jsonl",
            warmup_requests=case.warmup_requests,
        )
        rows.append(row_from_run(name, run, case.interactive_tenants))
        runs.append(run)
    return rows, runs
