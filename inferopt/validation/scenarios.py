"""Step 5, validate under real concurrency (V1–V3): run the chosen system through named scenarios and
judge each against the SLOs, with reasons.

Scenarios derive from the candidate's workload so the length mix, prefixes and tenants stay the
production-like ones: `steady` keeps the arrival process (rate scaled), `burst` replaces it with gamma
arrivals of the given burstiness (CV² of the gaps) at the same mean rate. A replayed trace is scaled
through its `time_scale` (rate × k = gaps ÷ k); its `burst` scenario keeps the trace's rows (lengths,
tenants, prefixes) and re-times them with seeded gamma arrivals at the trace's mean rate × `rate_scale`.

Deliberately not here: overload and node failure (they need a served engine with admission control and
replicas) and fairness analysis.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from inferopt.config import FakeSystem, GammaArrivals, HFSystem, ScenarioConfig, SLOConfig, WorkloadConfig
from inferopt.measure.runner import RunTags
from inferopt.measure.session import MeasuredRun, run_system
from inferopt.measure.slices import headline
from inferopt.workload.arrivals import arrival_offsets_s
from inferopt.workload.build import build_workload, workload_hash


@dataclass
class ScenarioResult:
    scenario: ScenarioConfig
    run: MeasuredRun
    metrics: dict[str, float] = field(default_factory=dict)
    passed: bool = False
    reasons: list[str] = field(default_factory=list)


def scenario_workload(base: WorkloadConfig, sc: ScenarioConfig) -> WorkloadConfig:
    """The scenario's workload config (for a trace `burst`, `scenario_requests` also re-times the rows)."""
    if base.trace is not None:
        trace = base.trace.model_copy(update={
            "time_scale": base.trace.time_scale / sc.rate_scale,
            **({"limit": sc.num_requests} if sc.num_requests else {}),
        })
        return base.model_copy(update={"name": f"{base.name}-{sc.name}", "trace": trace,
                                       "seed": base.seed + 1000 + len(sc.name)})
    rate = base.arrival.rate_per_s * sc.rate_scale
    if sc.kind == "burst":
        arrival = GammaArrivals(rate_per_s=rate, burstiness=sc.burstiness)
    else:
        arrival = base.arrival.model_copy(update={"rate_per_s": rate})
    return base.model_copy(update={
        "name": f"{base.name}-{sc.name}", "arrival": arrival,
        "num_requests": sc.num_requests or base.num_requests,
        "seed": base.seed + 1000 + len(sc.name),  # a fresh draw, not the ablation's exact table
    })


def scenario_requests(base: WorkloadConfig, sc: ScenarioConfig) -> pd.DataFrame:
    """The request table a scenario replays (see the module docstring)."""
    wl = scenario_workload(base, sc)
    table = build_workload(wl)
    if wl.trace is None or sc.kind != "burst" or len(table) < 2:
        return table
    span_s = float(table["arrival_offset_s"].iloc[-1])
    if span_s <= 0:
        return table
    rate = (len(table) - 1) / span_s
    rng = np.random.default_rng(np.random.SeedSequence(wl.seed).spawn(1)[0])
    table["arrival_offset_s"] = arrival_offsets_s(GammaArrivals(rate_per_s=rate, burstiness=sc.burstiness), len(table), rng)
    table.attrs["content_hash"] = workload_hash(table)
    return table


def check_slo(metrics: dict[str, float], slo: SLOConfig) -> tuple[bool, list[str]]:
    """Pass only if every SLO holds; each line says the value, the bound and whether it held."""
    checks = [
        ("ttft_ms_p99", slo.ttft_p99_ms, "TTFT p99"),
        ("tpot_ms_p95", slo.tpot_p95_ms, "TPOT p95"),
    ]
    if slo.e2e_p99_ms is not None:
        checks.append(("e2e_ms_p99", slo.e2e_p99_ms, "E2E p99"))
    reasons, ok = [], True
    for key, bound, label in checks:
        value = metrics.get(key, float("nan"))
        held = value == value and value <= bound  # NaN (no successful request) fails
        ok &= held
        reasons.append(f"{label} {value:.1f} ms {'<=' if held else '>'} {bound:g} ms: {'ok' if held else 'FAIL'}")
    timeout_rate = metrics.get("timeout_rate", 0.0)
    failure_rate = metrics.get("error_rate", 0.0) + metrics.get("rejected_rate", 0.0)
    for label, value, bound in (("timeout rate", timeout_rate, slo.max_timeout_rate),
                                ("error+rejected rate", failure_rate, slo.max_error_rate)):
        held = value <= bound
        ok &= held
        reasons.append(f"{label} {value:.3f} {'<=' if held else '>'} {bound:g}: {'ok' if held else 'FAIL'}")
    return bool(ok), reasons


def validate(system: HFSystem | FakeSystem, workload: WorkloadConfig, scenarios: tuple[ScenarioConfig, ...],
             slo: SLOConfig, out_dir: str | Path, *, arm: str = "candidate", run_tag: str = "",
             warmup_requests: int = 0) -> list[ScenarioResult]:
    results = []
    for sc in scenarios:
        wl = scenario_workload(workload, sc)
        table = scenario_requests(workload, sc)
        run = run_system(system, table, RunTags(run_tag=run_tag, arm=arm, scenario=sc.name),
                         timeout_s=wl.timeout_s, records_path=Path(out_dir) / "requests.jsonl",
                         warmup_requests=warmup_requests, prompt_seed=wl.seed)
        if run.failed:
            results.append(ScenarioResult(sc, run, passed=False, reasons=[f"run failed: {(run.error or '').splitlines()[0]}"]))
            continue
        metrics = headline(run.phases, run.duration_s)
        passed, reasons = check_slo(metrics, slo)
        results.append(ScenarioResult(sc, run, metrics=metrics, passed=passed, reasons=reasons))
    return results


def scenario_table(results: list[ScenarioResult]) -> pd.DataFrame:
    rows = []
    for r in results:
        m = r.metrics
        rows.append({
            "scenario": r.scenario.name, "kind": r.scenario.kind, "requests": m.get("requests"),
            "output_tok_per_s": m.get("output_tok_per_s"), "ttft_ms_p50": m.get("ttft_ms_p50"),
            "ttft_ms_p95": m.get("ttft_ms_p95"), "ttft_ms_p99": m.get("ttft_ms_p99"),
            "tpot_ms_p50": m.get("tpot_ms_p50"), "tpot_ms_p95": m.get("tpot_ms_p95"), "tpot_ms_p99": m.get("tpot_ms_p99"),
            "e2e_ms_p50": m.get("e2e_ms_p50"), "e2e_ms_p95": m.get("e2e_ms_p95"), "e2e_ms_p99": m.get("e2e_ms_p99"),
            "timeout_rate": m.get("timeout_rate"), "error_rate": m.get("error_rate"),
            "rejected_rate": m.get("rejected_rate"), "passed": r.passed, "reasons": "; ".join(r.reasons),
        })
    return pd.DataFrame(rows)
