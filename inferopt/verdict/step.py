"""The verdict step's entry, `judge`: the six steps' evidence, the benchmark-cheat lint over every run (SPEC V4,
`lint.collect.lint_run`) and `decide`, plus what the parent run carries: the lint report (`lint.json`), the
headline metrics (baseline as measured, the candidate's ratios, the scenarios' tails) and the summary tags.

Deliberately not here: the decision rules (`decide.py`), the checks (`lint/`) and tracking; which arms were
logged is read from the tracking server by the task and passed in.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from inferopt.ablate import AblationResult
from inferopt.choose import Choice
from inferopt.config import CandidateConfig
from inferopt.gate import GateResult
from inferopt.locate import LocateResult
from inferopt.measure import MeasureResult
from inferopt.validate import ScenarioResult, ScenarioVerdict
from inferopt.verdict.decide import Verdict, decide
from inferopt.verdict.lint import Finding, lint_summary
from inferopt.verdict.lint.collect import lint_run

PARENT_SCENARIO_STATS = ("_p99", "_p50", "tok_per_s")  # the scenario metrics the parent run repeats


@dataclass(frozen=True)
class VerdictResult:
    """The verdict, the lint's findings and report (`lint.json`), and the parent run's metrics and tags."""

    verdict: Verdict
    findings: tuple[Finding, ...]
    lint: dict[str, Any]
    parent_metrics: dict[str, float]
    parent_tags: dict[str, str]


def judge(
    candidate: CandidateConfig,
    measured: MeasureResult,
    located: LocateResult,
    choice: Choice,
    ablation: AblationResult,
    scenarios: Sequence[ScenarioResult],
    gate: GateResult,
    logged_arms: Iterable[str] | None = None,
) -> VerdictResult:
    """Lint the run and decide (see the module docstring). `logged_arms`: the ablation arms the tracking server
    holds (None when it could not be read: the lint then compares the plan with `ablation` only)."""
    logged = sorted(logged_arms) if logged_arms is not None else None
    findings = lint_run(
        candidate, measured=measured, ablation=ablation, scenarios=scenarios, cost=gate.cost, logged_arms=logged
    )
    arm = ablation.candidate_verdict
    verdict = decide(
        diagnosis=located.diagnosis,
        choice=choice,
        ablation=arm,
        scenarios=[ScenarioVerdict.of(s) for s in scenarios],
        gate=gate,
        lint=findings,
        evidence=evidence(measured, located, choice, ablation, scenarios, gate),
    )
    tags = {
        "inferopt.workload_hash": str(measured.workload.attrs.get("content_hash")),
        "inferopt.verdict": verdict.decision,
        "inferopt.cause": located.diagnosis.cause,
        "inferopt.arm_verdict": arm.verdict,
    }
    return VerdictResult(
        verdict=verdict,
        findings=tuple(findings),
        lint=lint_report(candidate, findings, logged),
        parent_metrics=parent_metrics(measured, ablation, scenarios),
        parent_tags=tags,
    )


def evidence(
    measured: MeasureResult,
    located: LocateResult,
    choice: Choice,
    ablation: AblationResult,
    scenarios: Sequence[ScenarioResult],
    gate: GateResult,
) -> dict[str, Any]:
    """The verdict's `evidence`: each step's figures that the decision rests on."""
    d = located.diagnosis
    return {
        "measure": {
            "headline": measured.headline,
            "decomposition": measured.decomposition,
            "workload_hash": measured.workload.attrs.get("content_hash"),
        },
        "locate": {"cause": d.cause, "confidence": d.confidence, "rule": d.rule},
        "choose": {"matches": choice.matches, "quality_gate_required": choice.quality_gate_required},
        "ablate": {"effects": ablation.effects.to_dict("records") if len(ablation.effects) else []},
        "validate": {s.scenario.name: s.metrics for s in scenarios},
        "gate": {
            "quality": gate.quality_status,
            "cost": gate.cost_status,
            "cost_table": gate.cost.to_dict("records") if gate.cost is not None else [],
        },
    }


def lint_report(candidate: CandidateConfig, findings: Sequence[Finding], logged: list[str] | None) -> dict[str, Any]:
    """`lint.json`: the findings' summary, the arms the tracking server holds, the config's `lint.allow`."""
    return {
        **lint_summary(findings),
        "logged_arms": logged,
        "allow": list(candidate.lint.allow),
        "allow_reason": candidate.lint.reason,
    }


def parent_metrics(
    measured: MeasureResult, ablation: AblationResult, scenarios: Sequence[ScenarioResult]
) -> dict[str, float]:
    """The parent run's metrics: the baseline as measured, the candidate/baseline ratios (the A/A and single-change
    arms are on their own runs), and each scenario's p50 / p99 latencies and throughput."""
    out = {f"baseline.{k}": v for k, v in measured.headline.items()}
    if len(ablation.effects):
        out |= {f"ratio.{r.metric}": r.ratio for r in ablation.effects.itertuples() if r.arm == "candidate"}
    for s in scenarios:
        out |= {f"{s.scenario.name}.{k}": v for k, v in s.metrics.items() if k.endswith(PARENT_SCENARIO_STATS)}
    return out
