"""Gather what the cheat lint reads (SPEC V4) from the six steps' results, and run every check.

`lint_run` is the one call the verdict task makes: the config-level checks again (so an allowed cheat is
recorded on the verdict), then the post-run checks over every measured run — measure, each ablation trial,
each validation scenario — the ablation's arms against the plan, and the cost table.

Deliberately not here: the checks themselves (`prerun.py`, `postrun.py`) and tracking.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from inferopt.ablate.plan import plan_arms
from inferopt.config import CandidateConfig
from inferopt.verdict.lint.cheats import Finding, apply_allow
from inferopt.verdict.lint.postrun import (
    RunEvidence,
    check_arms,
    check_cost,
    check_denominators,
    check_outputs,
    check_queueing,
    check_warm_cache,
)
from inferopt.verdict.lint.prerun import check_config, workload_tables


def collect_runs(
    candidate: CandidateConfig,
    measured: Any = None,
    ablation: Any = None,
    scenarios: Sequence[Any] = (),
    tables: dict | None = None,
) -> list[RunEvidence]:
    """One `RunEvidence` per measured run, with the requests its table sent and the metrics reported for it:
    `measured` a MeasureResult (its `headline`), `ablation` an AblationResult (`trial_headlines()` per arm and
    repeat), `scenarios` ScenarioResults (their `metrics`)."""
    tables = tables if tables is not None else workload_tables(candidate)
    out: list[RunEvidence] = []
    if measured is not None:
        out.append(
            RunEvidence("measure", "measure", measured.run, sent=len(measured.workload), reported=measured.headline)
        )
    if ablation is not None:
        heads = ablation.trial_headlines()
        by_trial = {(h["arm"], int(h["repeat"])): h for h in heads.to_dict("records")} if len(heads) else {}
        for run in ablation.runs:
            key = (run.tags.arm, int(run.tags.trial))
            out.append(
                RunEvidence(
                    f"ablation:{key[0]}#{key[1]}",
                    "ablation",
                    run,
                    sent=len(tables["ablation"]),
                    reported=by_trial.get(key),
                )
            )
    for s in scenarios:
        table = tables.get(f"validate:{s.scenario.name}")
        out.append(
            RunEvidence(
                f"validate:{s.scenario.name}",
                "validate",
                s.run,
                sent=len(table) if table is not None else None,
                reported=s.metrics or None,
            )
        )
    return out


def sent_by_arm(runs: Iterable[RunEvidence]) -> dict[str, int]:
    """Requests sent per ablation arm over its trials that ran (what the cost table must count)."""
    out: dict[str, int] = {}
    for r in runs:
        if r.stage == "ablation" and not r.run.failed and r.sent is not None:
            out[r.run.tags.arm] = out.get(r.run.tags.arm, 0) + r.sent
    return out


def lint_run(
    candidate: CandidateConfig,
    *,
    measured: Any = None,
    ablation: Any = None,
    scenarios: Sequence[Any] = (),
    cost: Any = None,
    logged_arms: Iterable[str] | None = None,
) -> list[Finding]:
    """Every cheat check over one flow run's artifacts (see `prerun.py`, `postrun.py`), `lint.allow` applied."""
    tables = workload_tables(candidate)
    runs = collect_runs(candidate, measured, ablation, scenarios, tables)
    findings = check_config(candidate, tables)
    findings += check_outputs(runs)
    findings += check_warm_cache(runs, candidate.measure.warmup_requests)
    findings += check_queueing(runs)
    findings += check_denominators(runs)
    if ablation is not None:
        findings += check_arms(plan_arms(candidate), ablation, logged_arms)
    findings += check_cost(cost, sent_by_arm(runs))
    return apply_allow(findings, candidate.lint)
