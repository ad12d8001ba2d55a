"""Prefect task for the final verdict: combine the six steps' evidence and the benchmark-cheat lint (SPEC V4),
log verdict.json and lint.json, tag the parent."""

from __future__ import annotations

from prefect import task

from inferopt.ablate.run import AblationResult
from inferopt.choose.remedies import Choice
from inferopt.config import CandidateConfig
from inferopt.gate import GateResult
from inferopt.locate.step import LocateResult
from inferopt.measure.step import MeasureResult
from inferopt.validate.scenarios import ScenarioResult
from inferopt.verdict.decide import Verdict, decide
from inferopt.verdict.lint import lint_summary
from inferopt.verdict.lint.collect import lint_run
from tasks.tracking import Tracker


@task(name="verdict")
def verdict_task(
    candidate: CandidateConfig,
    measured: MeasureResult,
    located: LocateResult,
    choice: Choice,
    ablation: AblationResult,
    scenarios: list[ScenarioResult],
    gate: GateResult,
    tracker: Tracker,
) -> Verdict:
    arm = ablation.candidate_verdict
    evidence = {
        "measure": {
            "headline": measured.headline,
            "decomposition": measured.decomposition,
            "workload_hash": measured.workload.attrs.get("content_hash"),
        },
        "locate": {
            "cause": located.diagnosis.cause,
            "confidence": located.diagnosis.confidence,
            "rule": located.diagnosis.rule,
        },
        "choose": {"matches": choice.matches, "quality_gate_required": choice.quality_gate_required},
        "ablate": {"effects": ablation.effects.to_dict("records") if len(ablation.effects) else []},
        "validate": {s.scenario.name: s.metrics for s in scenarios},
        "gate": {
            "quality": gate.quality_status,
            "cost": gate.cost_status,
            "cost_table": gate.cost.to_dict("records") if gate.cost is not None else [],
        },
    }
    logged = logged_arms(tracker)
    findings = lint_run(
        candidate, measured=measured, ablation=ablation, scenarios=scenarios, cost=gate.cost, logged_arms=logged
    )
    lint = {
        **lint_summary(findings),
        "logged_arms": logged,
        "allow": list(candidate.lint.allow),
        "allow_reason": candidate.lint.reason,
    }
    tracker.json(lint, "lint.json")
    tracker.tags(
        {
            "inferopt.lint": lint["status"],
            **{f"inferopt.lint.{sev}": ",".join(c) for sev, c in lint["cheats"].items() if c},
        }
    )
    tracker.metrics({f"lint.{sev}": float(n) for sev, n in lint["counts"].items()})
    for f in findings:
        if f.severity != "note":
            print(f"[lint] {f}")
    verdict = decide(
        ablation_verdict=arm.verdict,
        ablation_reasons=list(arm.reasons),
        scenarios_passed={s.scenario.name: s.passed for s in scenarios},
        scenario_reasons={s.scenario.name: s.reasons for s in scenarios},
        quality_status=gate.quality_status,
        quality_required=gate.quality_required,
        quality_reasons=gate.quality_reasons,
        cost_status=gate.cost_status,
        cost_reasons=gate.cost_reasons,
        locate_cause=located.diagnosis.cause,
        choice_warning=choice.warning,
        evidence=evidence,
        lint=findings,
    )
    tracker.json(verdict.to_dict(), "verdict.json")
    # the parent run's metrics: the baseline as measured, the candidate/baseline ratios, the scenarios
    parent = {f"baseline.{k}": v for k, v in measured.headline.items()}
    if len(ablation.effects):  # the candidate's ratios (the A/A and single-change arms are on their own runs)
        parent |= {f"ratio.{r.metric}": r.ratio for r in ablation.effects.itertuples() if r.arm == "candidate"}
    for s in scenarios:
        parent |= {
            f"{s.scenario.name}.{k}": v for k, v in s.metrics.items() if k.endswith(("_p99", "_p50", "tok_per_s"))
        }
    tracker.metrics(parent)
    tracker.tags({"inferopt.workload_hash": str(measured.workload.attrs.get("content_hash"))})
    tracker.tags(
        {
            "inferopt.verdict": verdict.decision,
            "inferopt.cause": located.diagnosis.cause,
            "inferopt.arm_verdict": arm.verdict,
        }
    )
    return verdict


def logged_arms(tracker: Tracker) -> list[str] | None:
    """The ablation arms logged as child runs of this flow run (tag `inferopt.arm`), read back from the tracking
    server: what was logged, not what the flow meant to log. None when the server cannot be read."""
    try:
        runs = tracker.client.search_runs(
            [tracker.experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{tracker.parent_run_id}'",
            max_results=1000,
        )
    except Exception:  # noqa: BLE001 - the lint then compares the plan with the returned result only
        return None
    return sorted(
        {
            r.data.tags["inferopt.arm"]
            for r in runs
            if r.data.tags.get("inferopt.step") == "ablate" and "inferopt.arm" in r.data.tags
        }
    )
