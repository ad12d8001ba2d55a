"""The `optimize` flow on a multi-turn agentic load (fake engine): the measure step logs the session records and
session latency, the gate prices the successful *session*, the report shows both."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient


@pytest.mark.slow  # ~45 s here: the whole flow, sessions replayed in every trial and scenario
def test_flow_on_sessions_logs_sessions_and_costs_them(prefect_harness, mlflow_uri, in_repo: Path) -> None:
    from flows.optimize import optimize

    overrides = {"lint.allow": ["no_queueing"], "lint.reason": "test: a queue-bound fake load on purpose"}
    result = optimize(candidate="configs/candidates/fake-sessions.yaml", overrides=overrides, experiment="t-sessions")
    run_dir = next(p for p in in_repo.iterdir() if (p / "1-measure").is_dir())
    sessions = pd.read_parquet(run_dir / "1-measure" / "sessions.parquet")
    assert len(sessions) == 10 and set(sessions["outcome"]) <= {"ok", "failed"}
    assert (sessions["tool_ms"] > 0).any() and (sessions["history_ms"] > 0).all()
    cost = pd.read_parquet(run_dir / "6-gate" / "cost.parquet")
    assert set(cost["task_unit"]) == {"session"} and cost["cost_per_successful_session_usd"].notna().any()
    child = MlflowClient().search_runs(
        [MlflowClient().get_experiment_by_name("t-sessions").experiment_id],
        filter_string="tags.`inferopt.step` = 'measure'",
    )[0]
    assert {"session_task_ms_p50", "session_success_rate", "decomposition.session_adds_up"} <= set(child.data.metrics)
    html = (run_dir / "report.html").read_text()
    assert "Sessions (a session is the user" in html and "cost per successful session" in html
    assert result["decision"] in {"accept", "reject", "inconclusive"}
