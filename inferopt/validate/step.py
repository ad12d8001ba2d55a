"""Step 5's entry, `validate_candidate`: the candidate (or the baseline) through the candidate's scenarios
(`scenarios.validate`), and what the verdict and the report read of each result: a `ScenarioVerdict`
(`scenario_verdicts.json`), the runs that ran and their phases.

Deliberately not here: running or judging a scenario (`scenarios.py`, `judge.py`, `overload.py`,
`node_failure.py`) and tracking.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from inferopt.choose.output_lengths import arm_workload
from inferopt.config import CandidateConfig
from inferopt.measure.session import MeasuredRun
from inferopt.validate.judge import ScenarioResult
from inferopt.validate.scenarios import validate


@dataclass(frozen=True)
class ScenarioVerdict:
    """One scenario's outcome: passed or not, why, and which groups starved."""

    name: str
    kind: str
    passed: bool
    reasons: tuple[str, ...] = ()
    starved: tuple[str, ...] = ()

    @classmethod
    def of(cls, result: ScenarioResult) -> ScenarioVerdict:
        starved = result.fairness.starved if result.fairness else []
        return cls(result.scenario.name, result.scenario.kind, result.passed, tuple(result.reasons), tuple(starved))

    def to_dict(self) -> dict[str, Any]:
        """This scenario's entry in `scenario_verdicts.json`."""
        return {"kind": self.kind, "passed": self.passed, "reasons": list(self.reasons), "starved": list(self.starved)}


def validate_candidate(
    candidate: CandidateConfig,
    out_dir: str | Path,
    *,
    arm: Literal["candidate", "baseline"] = "candidate",
    run_tag: str = "",
) -> list[ScenarioResult]:
    """Every scenario of `candidate.validation` on the candidate system (or, `arm="baseline"`, the baseline)."""
    system = candidate.candidate_system if arm == "candidate" else candidate.baseline
    return validate(
        system,
        arm_workload(candidate),  # natural lengths when the changes can change outputs (unless declared)
        candidate.validation.scenarios,
        candidate.slo,
        out_dir,
        arm=arm,
        run_tag=run_tag,
        warmup_requests=candidate.measure.warmup_requests,
        fairness=candidate.validation.fairness,
    )


def scenario_verdicts(results: Sequence[ScenarioResult]) -> dict[str, ScenarioVerdict]:
    return {r.scenario.name: ScenarioVerdict.of(r) for r in results}


def runs_that_ran(results: Sequence[ScenarioResult]) -> list[MeasuredRun]:
    """Every scenario's judged run and its comparison runs (e.g. overload's unbounded one), failed ones left out."""
    return [run for r in results for run in (r.run, *r.extra_runs) if not run.failed]


def scenario_phases(results: Sequence[ScenarioResult]) -> pd.DataFrame:
    """The phases of every run that ran, one table (empty when none ran)."""
    runs = runs_that_ran(results)
    return pd.concat([run.phases for run in runs], ignore_index=True) if runs else pd.DataFrame()
