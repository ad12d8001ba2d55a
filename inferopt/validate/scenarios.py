"""Step 5, validate under real concurrency (V1–V3): run the chosen system through named scenarios and judge each
against the SLOs, with reasons.

Scenarios derive from the candidate's workload so the length mix, prefixes and tenants stay the production-like
ones: `steady` keeps the arrival process (rate scaled), `burst` replaces it with gamma arrivals of the given
burstiness (CV² of the gaps) at the same mean rate. A replayed trace is scaled through its `time_scale` (rate ×
k = gaps ÷ k); its `burst` keeps the trace's rows and re-times them with seeded gamma arrivals at the trace's
mean rate × `rate_scale`. `overload` and `node_failure` keep the arrival process at the scaled rate and run in
their own modules (`overload.py`, `node_failure.py`). Every judged run also gets the fairness and starvation
check (`judge.judge_fairness`, SPEC V5), and may use the opt-in client retry policy (`retry`).

Deliberately not here: the SLO/fairness checks (`judge.py`, `fairness.py`) and the overload and node-failure
mechanics.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from inferopt.config import (
    AnySystem,
    GammaArrivals,
    ScenarioConfig,
    SLOConfig,
    WorkloadConfig,
)
from inferopt.config.settings import FairnessSettings
from inferopt.measure.slices import headline
from inferopt.measure.slo import RequestSLO
from inferopt.validate.judge import (
    ScenarioLoad,
    ScenarioResult,
    add_attempts,
    check_slo,
    failed_result,
    judge_fairness,
    retry_wrapper,
)
from inferopt.validate.node_failure import run_node_failure
from inferopt.validate.overload import run_overload
from inferopt.workload.arrivals import arrival_offsets_s
from inferopt.workload.build import build_workload, workload_hash


def scenario_workload(base: WorkloadConfig, sc: ScenarioConfig) -> WorkloadConfig:
    """The scenario's workload config (for a trace `burst`, `scenario_requests` also re-times the rows)."""
    if base.trace is not None:
        trace = base.trace.model_copy(
            update={
                "time_scale": base.trace.time_scale / sc.rate_scale,
                **({"limit": sc.num_requests} if sc.num_requests else {}),
            }
        )
        return base.model_copy(
            update={"name": f"{base.name}-{sc.name}", "trace": trace, "seed": base.seed + 1000 + len(sc.name)}
        )
    rate = base.arrival.rate_per_s * sc.rate_scale
    if sc.kind == "burst":
        arrival = GammaArrivals(rate_per_s=rate, burstiness=sc.burstiness)
    else:
        arrival = base.arrival.model_copy(update={"rate_per_s": rate})
    return base.model_copy(
        update={
            "name": f"{base.name}-{sc.name}",
            "arrival": arrival,
            "num_requests": sc.num_requests or base.num_requests,
            "seed": base.seed + 1000 + len(sc.name),  # a fresh draw, not the ablation's exact table
        }
    )


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
    table["arrival_offset_s"] = arrival_offsets_s(
        GammaArrivals(rate_per_s=rate, burstiness=sc.burstiness), len(table), rng
    )
    table.attrs["content_hash"] = workload_hash(table)
    return table


def validate(
    system: AnySystem,
    workload: WorkloadConfig,
    scenarios: tuple[ScenarioConfig, ...],
    slo: SLOConfig,
    out_dir: str | Path,
    *,
    arm: str = "candidate",
    run_tag: str = "",
    warmup_requests: int = 0,
    fairness: FairnessSettings | None = None,
) -> list[ScenarioResult]:
    """Run each scenario in order; a crashing scenario is a failed result with its error, the next one runs."""
    fairness = fairness or FairnessSettings()
    results = []
    for sc in scenarios:
        load = ScenarioLoad(
            sc,
            scenario_workload(workload, sc),
            scenario_requests(workload, sc),
            Path(out_dir),
            arm=arm,
            run_tag=run_tag,
            warmup_requests=warmup_requests,
        )
        result = RUNNERS.get(sc.kind, _run_plain)(system, load, slo)
        results.append(judge_fairness(result, load.workload, slo, fairness))
    return results


def _run_plain(system: AnySystem, load: ScenarioLoad, slo: SLOConfig) -> ScenarioResult:
    """steady / burst: one run, judged on the SLOs."""
    sc = load.scenario
    wrap, made = retry_wrapper(sc, seed=load.workload.seed)
    run = load.run(system, wrap_engine=wrap)
    if run.failed:
        return failed_result(sc, run)
    metrics = headline(run.phases, run.duration_s, RequestSLO.from_slo(slo))  # + SLO attainment and goodput
    passed, reasons = check_slo(metrics, slo)
    result = ScenarioResult(sc, run, metrics=metrics, passed=passed, reasons=reasons)
    add_attempts(result, made)
    return result


RUNNERS = {"overload": run_overload, "node_failure": run_node_failure}  # the rest: `_run_plain`


def scenario_table(results: list[ScenarioResult]) -> pd.DataFrame:
    rows = []
    for r in results:
        m = r.metrics
        rows.append(
            {
                "scenario": r.scenario.name,
                "kind": r.scenario.kind,
                "requests": m.get("requests"),
                "output_tok_per_s": m.get("output_tok_per_s"),
                "goodput_req_per_s": m.get("goodput_req_per_s"),
                "slo_attainment": m.get("slo_attainment"),
                "ttft_ms_p50": m.get("ttft_ms_p50"),
                "ttft_ms_p95": m.get("ttft_ms_p95"),
                "ttft_ms_p99": m.get("ttft_ms_p99"),
                "tpot_ms_p50": m.get("tpot_ms_p50"),
                "tpot_ms_p95": m.get("tpot_ms_p95"),
                "tpot_ms_p99": m.get("tpot_ms_p99"),
                "e2e_ms_p50": m.get("e2e_ms_p50"),
                "e2e_ms_p95": m.get("e2e_ms_p95"),
                "e2e_ms_p99": m.get("e2e_ms_p99"),
                "timeout_rate": m.get("timeout_rate"),
                "error_rate": m.get("error_rate"),
                "rejected_rate": m.get("rejected_rate"),
                "jain_tenant": m.get("fairness_jain_tenant"),
                "jain_priority": m.get("fairness_jain_priority"),
                "starved_groups": m.get("fairness_starved_groups"),
                "recovery_s": m.get("recovery_s"),
                "failed_requests": m.get("failed_requests"),
                "passed": r.passed,
                "reasons": "; ".join(r.reasons),
            }
        )
    return pd.DataFrame(rows)
