"""Step 6's entry, `gate`: the whole quality-and-cost composition as one call that returns one `GateResult`.

Served-output agreement (the ablation's baseline and candidate records), next-token drift, the sliced suite (with
the sessions' tool-call turns of those records as its own slices, `session_tools.py`),
their combination into one quality status (`judge.combine_quality`), and cost per successful task from the
ablation's trials with the suite's task success rates (`judge.cost_table`, `judge.judge_cost`). The suite and
the drift check are parameters (with the real ones as defaults), so a test injects fakes instead of patching.

Deliberately not here: the checks themselves (`drift.py`, `suite_gate.py`, `judge.py`) and tracking (the task
logs what this returns: `GateResult.to_dict()` is `gate.json`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from inferopt.ablate.plan import BASELINE, CANDIDATE
from inferopt.ablate.run import AblationResult
from inferopt.choose.remedies import Choice
from inferopt.config import AnySystem, CandidateConfig, GateSettings
from inferopt.gate.drift import next_token_drift, served_agreement
from inferopt.gate.judge import CostStatus, QualityStatus, combine_quality, cost_table, judge_cost, judge_quality
from inferopt.gate.session_tools import fold_session_tools, session_tool_gate
from inferopt.gate.suite_gate import SuiteGate, sliced_gate
from inferopt.locate.hardware import HardwareProfile
from inferopt.locate.step import LocateResult

SuiteFn = Callable[[AnySystem, AnySystem, GateSettings], SuiteGate]  # (baseline, candidate, settings)
DriftFn = Callable[[AnySystem, AnySystem, GateSettings], dict[str, Any]]


@dataclass(frozen=True)
class GateResult:
    """The gate's outcome: quality (suite and drift combined) and cost, each with a status and its reasons, and
    the evidence behind them — the suite (its tables, paths, task success rates), the served-output agreement,
    the next-token drift and the cost table (None or empty when nothing could be costed)."""

    quality_status: QualityStatus
    quality_required: bool  # the change can alter outputs: the gate must pass, a skip is not enough
    quality_reasons: tuple[str, ...]
    cost_status: CostStatus
    cost_reasons: tuple[str, ...]
    suite: SuiteGate
    served: dict[str, Any]
    next_token: dict[str, Any]
    cost: pd.DataFrame | None = None  # one row per arm

    @property
    def drift(self) -> dict[str, Any]:
        return {"served": self.served, "next_token": self.next_token}

    @property
    def reasons(self) -> tuple[str, ...]:
        return self.quality_reasons + self.cost_reasons

    def to_dict(self) -> dict[str, Any]:
        """`gate.json`."""
        s = self.suite
        suite = {
            "status": s.status,
            "model": s.model,
            "paths": s.paths,
            "evaluated": s.evaluated,
            "skipped_tasks": s.skipped_tasks,
            "task_success_rate": s.task_success_rate,
        }
        return {
            "quality": {
                "status": self.quality_status,
                "required": self.quality_required,
                "reasons": list(self.quality_reasons),
                "suite": suite,
                **self.drift,
            },
            "cost": {"status": self.cost_status, "reasons": list(self.cost_reasons)},
        }

    def metrics(self) -> dict[str, Any]:
        """The drift figures and task success rates as flat metric names (non-numbers are dropped by tracking)."""
        flat = {f"served.{k}": v for k, v in self.served.items()}
        flat |= {f"next_token.{k}": v for k, v in self.next_token.items()}
        return flat | {f"task_success_rate.{arm}": v for arm, v in self.suite.task_success_rate.items()}


def gate(
    candidate: CandidateConfig,
    ablation: AblationResult,
    located: LocateResult,
    choice: Choice,
    *,
    suite_fn: SuiteFn = sliced_gate,
    drift_fn: DriftFn = next_token_drift,
) -> GateResult:
    """Judge the candidate's quality and cost against the baseline (see the module docstring). Never raises for
    a check that cannot run: a failed drift check or suite is `skipped` with the reason."""
    required = choice.quality_gate_required
    served = served_agreement(ablation.records(BASELINE), ablation.records(CANDIDATE))
    drift = _next_token(drift_fn, candidate)
    d_status, d_reasons = judge_quality(drift, served, candidate.gate, required)
    suite = suite_fn(candidate.baseline, candidate.candidate_system, candidate.gate)
    tool_turns = session_tool_gate(ablation.records(BASELINE), ablation.records(CANDIDATE), candidate.gate)
    suite = fold_session_tools(suite, tool_turns)
    q_status, q_reasons = combine_quality(suite.status, suite.reasons, d_status, d_reasons, required)
    costs, c_status, c_reasons = _cost(candidate, ablation, located.hardware, suite.task_success_rate)
    return GateResult(
        quality_status=q_status,
        quality_required=required,
        quality_reasons=tuple(q_reasons),
        cost_status=c_status,
        cost_reasons=tuple(c_reasons),
        suite=suite,
        served=served,
        next_token=drift,
        cost=costs,
    )


def _next_token(drift_fn: DriftFn, candidate: CandidateConfig) -> dict[str, Any]:
    try:
        return drift_fn(candidate.baseline, candidate.candidate_system, candidate.gate)
    except Exception as exc:  # noqa: BLE001 - a failed check is evidence, not a crash
        return {"status": "skipped", "reason": f"drift check failed: {type(exc).__name__}: {exc}"}


def _cost(
    candidate: CandidateConfig, ablation: AblationResult, hw: HardwareProfile, task_success: dict[str, float]
) -> tuple[pd.DataFrame | None, CostStatus, list[str]]:
    """(cost table, status, reasons): cost per successful task of every arm that ran, baseline vs candidate."""
    threads = {a.name: a.system.capabilities.cpu_threads for a in ablation.arms}
    costs = cost_table(ablation.trials, candidate.slo, hw, threads, task_success) if len(ablation.trials) else None
    if costs is not None and len(costs):
        status, reasons = judge_cost(costs)
        return costs, status, reasons
    return costs, "skipped", ["no successful trial to cost"]
