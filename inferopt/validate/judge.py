"""What every validation scenario shares: its requests and how they are sent (`ScenarioLoad`), its result
(`ScenarioResult`), the SLO check with reasons, the fairness/starvation check run on every scenario, and the opt-in
client retry wrapper.

Deliberately not here: running a scenario (`scenarios.py`, `overload.py`, `node_failure.py`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from inferopt.config import AnySystem, ScenarioConfig, SLOConfig, WorkloadConfig
from inferopt.config.settings import FairnessSettings
from inferopt.engines.retrying import RetryingEngine
from inferopt.measure.runner import RunTags
from inferopt.measure.session import MeasuredRun, run_system
from inferopt.transport.retry import RetryPolicy, attempts_frame
from inferopt.validate.fairness import FairnessReport, fairness_report


@dataclass
class ScenarioResult:
    scenario: ScenarioConfig
    run: MeasuredRun
    metrics: dict[str, float] = field(default_factory=dict)
    passed: bool = False
    reasons: list[str] = field(default_factory=list)
    fairness: FairnessReport | None = None
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)  # name -> table (logged as <scenario>.<name>.parquet)
    extra_runs: list[MeasuredRun] = field(default_factory=list)  # comparison runs (their records are logged too)


@dataclass(frozen=True)
class ScenarioLoad:
    """One scenario's requests and how its runs are sent, tagged and recorded — what every scenario kind runs
    its system on (`run`); records go to `out_dir/requests.jsonl`."""

    scenario: ScenarioConfig
    workload: WorkloadConfig  # the scenario's own (its timeout and prompt seed)
    table: pd.DataFrame
    out_dir: Path
    arm: str = "candidate"
    run_tag: str = ""
    warmup_requests: int = 0

    @property
    def records_path(self) -> Path:
        return Path(self.out_dir) / "requests.jsonl"

    def run(
        self, system: AnySystem, *, wrap_engine: Callable[[Any], Any] | None = None, name: str | None = None
    ) -> MeasuredRun:
        """`system` on the scenario's requests, tagged as scenario `name` (default: the scenario's own name)."""
        return run_system(
            system,
            self.table,
            RunTags(run_tag=self.run_tag, arm=self.arm, scenario=name or self.scenario.name),
            timeout_s=self.workload.timeout_s,
            records_path=self.records_path,
            warmup_requests=self.warmup_requests,
            prompt_seed=self.workload.seed,
            wrap_engine=wrap_engine,
        )


def failed_result(sc: ScenarioConfig, run: MeasuredRun) -> ScenarioResult:
    """The result of a scenario whose run failed: not passed, the error's first line as the reason."""
    return ScenarioResult(sc, run, passed=False, reasons=[f"run failed: {(run.error or '').splitlines()[0]}"])


def check_slo(metrics: dict[str, float], slo: SLOConfig, *, rejections_allowed: bool = False) -> tuple[bool, list[str]]:
    """Pass only if every SLO holds; each line says the value, the bound and whether it held. With
    `rejections_allowed` (overload: shedding load is admission control working) rejections are not
    counted as failures — they are judged by the overload scenario itself."""
    checks = [("ttft_ms_p50", slo.ttft_p50_ms, "TTFT p50")] if slo.ttft_p50_ms is not None else []
    checks += [
        ("ttft_ms_p99", slo.ttft_p99_ms, "TTFT p99"),
        ("tpot_ms_p95", slo.tpot_p95_ms, "TPOT p95"),
    ]
    if slo.e2e_p99_ms is not None:
        checks.append(("e2e_ms_p99", slo.e2e_p99_ms, "E2E p99"))
    reasons, ok = [], True
    for key, bound, label in checks:
        value = metrics.get(key, float("nan"))
        held = not math.isnan(value) and value <= bound  # NaN (no successful request) fails
        ok &= held
        reasons.append(f"{label} {value:.1f} ms {'<=' if held else '>'} {bound:g} ms: {'ok' if held else 'FAIL'}")
    timeout_rate = metrics.get("timeout_rate", 0.0)
    failure_rate = metrics.get("error_rate", 0.0) + (0.0 if rejections_allowed else metrics.get("rejected_rate", 0.0))
    failure_label = "error rate" if rejections_allowed else "error+rejected rate"
    for label, value, bound in (
        ("timeout rate", timeout_rate, slo.max_timeout_rate),
        (failure_label, failure_rate, slo.max_error_rate),
    ):
        held = value <= bound
        ok &= held
        reasons.append(f"{label} {value:.3f} {'<=' if held else '>'} {bound:g}: {'ok' if held else 'FAIL'}")
    return bool(ok), reasons


def judge_fairness(
    result: ScenarioResult, workload: WorkloadConfig, slo: SLOConfig, settings: FairnessSettings
) -> ScenarioResult:
    """Adds the fairness report of the scenario's judged run: metrics, a reason line, and a failure when a
    group starved and `fail_on_starvation` is set."""
    if result.run.failed or result.run.phases.empty:
        return result
    max_wait = settings.max_wait_ms if settings.max_wait_ms is not None else 3.0 * slo.ttft_p99_ms
    weights = {t.name: t.weight for t in workload.tenants} if workload.trace is None else None
    rep = fairness_report(
        result.run.phases,
        duration_s=result.run.duration_s,
        max_wait_ms=max_wait,
        min_share_ratio=settings.min_share_ratio,
        max_wait_ratio=settings.max_wait_ratio,
        min_requests=settings.min_requests,
        weights=weights,
    )
    result.fairness = rep
    result.metrics.update(rep.metrics())
    result.tables["fairness"] = rep.table
    starved = bool(rep.starved)
    verdict = ("FAIL" if settings.fail_on_starvation else "flagged") if starved else "ok"
    result.reasons.append(f"{rep.summary()}: {verdict}")
    if starved and settings.fail_on_starvation:
        result.passed = False
    return result


def retry_wrapper(sc: ScenarioConfig, seed: int = 0) -> tuple[Callable[[Any], Any] | None, list[Any]]:
    """(engine wrapper applying the scenario's client retry policy, list that receives the wrapped engine);
    (None, []) when the scenario has no retry policy."""
    if sc.retry is None:
        return None, []
    policy = RetryPolicy(**sc.retry.model_dump(), seed=seed)
    made: list[Any] = []

    def wrap(engine: Any) -> Any:
        made.append(RetryingEngine(engine, policy))
        return made[-1]

    return wrap, made


def add_attempts(result: ScenarioResult, made: list[Any]) -> None:
    """The retry sub-records as a table and two metrics (attempts per request, share of requests retried)."""
    if not made:
        return
    att = attempts_frame([a for eng in made for a in eng.attempts])
    att = att[~att["request_id"].str.startswith("warmup-")]
    result.tables["attempts"] = att
    if len(att):
        per = att.groupby("request_id")["attempt"].max()
        result.metrics["retry_attempts_per_request"] = float(per.mean())
        result.metrics["retried_request_rate"] = float((per > 1).mean())
        result.reasons.append(
            f"client retries: {int((per > 1).sum())} of {len(per)} requests retried, "
            f"{len(att)} attempts in all (each kept in the attempts table)"
        )
