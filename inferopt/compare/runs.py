"""One flow run as the comparison reads it: its results directory (`results/<run_id>/`, read with
`inferopt.report.rundir`) plus the per-request tables the report leaves unloaded (the ablation's phases).

`RunSide` holds what a comparison needs from one run: the candidate's name, the workload's content hash
(`content_hash` of the measured workload, else the verdict's evidence), the verdict and its reasons, the
measured baseline's per-request phases and slice summary, and the ablation's trials with their phases.

Deliberately not here: MLflow (the CLI finds or downloads the directory) and any statistics.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from inferopt.report.rundir import load_run_dir


@dataclass(frozen=True)
class RunSide:
    """What one run contributes to a comparison. Tables are empty when the run has no such step."""

    run_id: str
    path: Path
    candidate: str
    workload_hash: str | None
    decision: str
    reasons: tuple[str, ...]
    measure_phases: pd.DataFrame
    measure_duration_s: float | None
    summary: pd.DataFrame  # the measure step's long summary (slice_dim, slice_value, metric, stat, value)
    trials: pd.DataFrame  # arm, repeat, duration_s, resources (dict), phases (DataFrame): ok trials only
    scenarios: pd.DataFrame  # the validate step's scenario table

    def arm_trials(self, arm: str) -> pd.DataFrame:
        return self.trials[self.trials["arm"] == arm] if len(self.trials) else self.trials


def _workload_hash(root: Path, verdict: dict[str, Any] | None) -> str | None:
    path = root / "1-measure" / "workload.parquet"
    if path.exists():
        value = pd.read_parquet(path).attrs.get("content_hash")
        if value:
            return str(value)
    value = (((verdict or {}).get("evidence") or {}).get("measure") or {}).get("workload_hash")
    return str(value) if value else None


def _resources(value: Any) -> dict[str, float]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def load_trials(step_dir: Path) -> pd.DataFrame:
    """The ablation's ok trials with their per-request phases (the frame `compare_arms` takes)."""
    cols = ["arm", "repeat", "duration_s", "resources", "phases"]
    trials_path, phases_path = step_dir / "trials.parquet", step_dir / "phases.parquet"
    if not (trials_path.exists() and phases_path.exists()):
        return pd.DataFrame(columns=cols)
    trials = pd.read_parquet(trials_path)
    trials = trials[~trials["failed"].astype(bool)]
    phases = pd.read_parquet(phases_path)
    groups = {key: g for key, g in phases.groupby(["arm", "trial"], sort=False)}
    rows = [
        {
            "arm": t.arm,
            "repeat": int(t.repeat),
            "duration_s": float(t.duration_s),
            "resources": _resources(getattr(t, "resources", None)),
            "phases": groups.get((t.arm, t.repeat), phases.iloc[0:0]),
        }
        for t in trials.itertuples()
    ]
    return pd.DataFrame(rows, columns=cols)


def _measure_duration_s(phases: pd.DataFrame, verdict: dict[str, Any] | None) -> float | None:
    """The measure window, back from the headline's offered rate (requests / duration)."""
    head = (((verdict or {}).get("evidence") or {}).get("measure") or {}).get("headline") or {}
    rate = head.get("offered_req_per_s")
    return len(phases) / rate if rate and len(phases) else None


def load_side(path: str | Path) -> RunSide:
    """Read one run's results directory for a comparison."""
    root = Path(path)
    run = load_run_dir(root)
    verdict = run.verdict or {}
    measure, validate = run.step("measure"), run.step("validate")
    phases = run.phases if run.phases is not None else pd.DataFrame()
    return RunSide(
        run_id=run.run_id,
        path=root,
        candidate=str((run.candidate or {}).get("name", run.run_id)),
        workload_hash=_workload_hash(root, verdict),
        decision=str(verdict.get("decision", "missing")),
        reasons=tuple(verdict.get("reasons", ()) or ("the run has no verdict.json",)),
        measure_phases=phases,
        measure_duration_s=_measure_duration_s(phases, verdict),
        summary=measure.tables.get("summary", pd.DataFrame()) if measure else pd.DataFrame(),
        trials=load_trials(root / "4-ablate"),
        scenarios=validate.tables.get("scenarios", pd.DataFrame()) if validate else pd.DataFrame(),
    )
