"""What each step's Prefect task logs of its step's result: tables, figures, JSON documents, metrics and tags
on the step's MLflow child run (and the parent's, for the verdict). One `log_<step>` per step.

Deliberately not here: computing or deciding anything (the step's entry function in `inferopt/` returns it all)
and the MLflow plumbing (`tracking.py`).
"""

from __future__ import annotations

from inferopt.gate import GateResult
from inferopt.verdict import VerdictResult
from tasks.tracking import Tracker

# --------------------------------------------------------------------------- 6 gate


def log_gate(tracker: Tracker, result: GateResult, name: str) -> None:
    """The suite's tables and samples, lm-eval's results, the cost table, `gate.json`, drift metrics, status tags."""
    suite = result.suite
    if not suite.table.empty:
        tracker.table(suite.table, "quality_slices.parquet", name)
        tracker.table(suite.accuracy, "quality_accuracy.parquet", name)
    if not suite.calibration.empty:
        tracker.table(suite.calibration, "quality_calibration.parquet", name)
    for arm, samples in suite.samples.items():
        tracker.table(samples, f"quality_samples_{arm}.parquet", name)
    if suite.lm_eval_results:
        tracker.json(suite.lm_eval_results, "lm_eval_results.json", name)
    if result.cost is not None and len(result.cost):
        tracker.table(result.cost, "cost.parquet", name)
    tracker.json(result.to_dict(), "gate.json", name)
    tracker.metrics(result.metrics(), name)
    tracker.tags(
        {"inferopt.quality": result.quality_status, "inferopt.quality.suite": suite.status}
        | {"inferopt.cost": result.cost_status}
        | {f"inferopt.quality.path.{arm}": path for arm, path in suite.paths.items() if path},
        name,
    )
    for line in result.reasons:
        print(f"[gate] {line}")


# --------------------------------------------------------------------------- the verdict (on the parent run)


def log_verdict(tracker: Tracker, result: VerdictResult) -> None:
    """`lint.json` with its tags and counts, the findings that matter (printed), `verdict.json`, the parent's
    metrics and summary tags."""
    lint = result.lint
    tracker.json(lint, "lint.json")
    tracker.tags(
        {
            "inferopt.lint": lint["status"],
            **{f"inferopt.lint.{sev}": ",".join(c) for sev, c in lint["cheats"].items() if c},
        }
    )
    tracker.metrics({f"lint.{sev}": float(n) for sev, n in lint["counts"].items()})
    for f in result.findings:
        if f.severity != "note":
            print(f"[lint] {f}")
    tracker.json(result.verdict.to_dict(), "verdict.json")
    tracker.metrics(result.parent_metrics)
    tracker.tags(result.parent_tags)
