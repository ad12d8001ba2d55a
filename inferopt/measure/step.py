"""Step 1, measure: the baseline system on the candidate's workload, every request's phases, sliced (M1–M5).

Deliberately not here: any judgement (locate does that) and tracking.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from inferopt.config import AnySystem, CandidateConfig, SLOConfig, WorkloadConfig
from inferopt.engines import EngineFactory, make_engine
from inferopt.measure.phases import decomposition_check, littles_law
from inferopt.measure.resources import process_usage, usage_delta
from inferopt.measure.runner import RunTags
from inferopt.measure.session import MeasuredRun, run_system
from inferopt.measure.session_table import has_session_rows, session_check, session_headline, session_table
from inferopt.measure.slices import (
    LATENCY_METRICS,
    SLICE_DIMS,
    SliceEdges,
    add_slices,
    cache_hits,
    edges_from_workload,
    headline,
    summarize,
)
from inferopt.measure.slo import RequestSLO
from inferopt.records import pooled_itl_ms
from inferopt.workload.build import build_workload


@dataclass
class MeasureResult:
    run: MeasuredRun
    workload: pd.DataFrame
    edges: SliceEdges
    phases: pd.DataFrame  # one row per request, with slice columns
    summary: pd.DataFrame  # long: slice_dim, slice_value, metric, stat, value, unit
    headline: dict[str, float]
    decomposition: dict[str, float | bool | str]  # littles_status, littles_L_clock are words
    resources: dict = field(default_factory=dict)  # this process's CPU time and RSS around the run (resources.py)
    sessions: pd.DataFrame = field(default_factory=pd.DataFrame)  # one row per session (session_table.py), if any


def measure(candidate: CandidateConfig, out_dir: str | Path, run_tag: str = "") -> MeasureResult:
    """The candidate's baseline on its workload (`measure_system` with the candidate's own settings)."""
    return measure_system(
        candidate.baseline,
        candidate.workload,
        candidate.slo,
        out_dir,
        warmup_requests=candidate.measure.warmup_requests,
        run_tag=run_tag,
    )


def measure_system(
    system: AnySystem,
    workload: WorkloadConfig,
    slo: SLOConfig,
    out_dir: str | Path,
    *,
    warmup_requests: int = 2,
    run_tag: str = "",
    engine_factory: EngineFactory = make_engine,
) -> MeasureResult:
    """`system` replaying `workload` (records in `out_dir/requests.jsonl`), phases sliced, goodput under `slo`;
    raises RuntimeError when the run fails (there is nothing to measure)."""
    table = build_workload(workload)
    edges = edges_from_workload(table)
    before = process_usage()
    run = run_system(
        system,
        table,
        RunTags(run_tag=run_tag, arm="baseline", scenario="measure"),
        timeout_s=workload.timeout_s,
        records_path=Path(out_dir) / "requests.jsonl",
        warmup_requests=warmup_requests,
        prompt_seed=workload.seed,
        engine_factory=engine_factory,
    )
    resources = usage_delta(before, process_usage())
    if run.failed:
        raise RuntimeError(f"measure: the baseline could not be measured: {run.error}")
    phases = add_slices(run.phases, edges, system.capabilities.prefix_cache)
    req_slo = RequestSLO.of(workload, slo)
    sessions, metrics, dims = pd.DataFrame(), LATENCY_METRICS, SLICE_DIMS
    if has_session_rows(phases):  # tool and history time are phases of their own; first vs later turns a slice
        sessions = session_table(run.records, phases, req_slo.meets_slo(phases))
        metrics = (*LATENCY_METRICS, "context_ms", "history_ms", "external_ms")
        phases["turn_kind"] = np.where(phases["turn"].astype(int) == 0, "first", "later")
        dims = (*SLICE_DIMS, "turn_kind")
    return MeasureResult(
        run=run,
        workload=table,
        edges=edges,
        phases=phases,
        summary=summarize(
            phases, group=("arm",), slo=req_slo, duration_s=run.duration_s, metrics=metrics, slice_dims=dims
        ),
        headline=headline(phases, run.duration_s, req_slo)
        | pooled_itl_ms(run.records)
        | cache_hits(phases, run.server_metrics)
        | session_headline(sessions),
        decomposition=decomposition_check(phases)
        | littles_law(run.records)
        | (session_check(sessions) if len(sessions) else {}),
        resources=resources,
        sessions=sessions,
    )
