"""The heavy faults, each injected for real and bounded: the MLflow endpoint down for 20 s in the middle of a run
(a real server behind a forwarder that is cut; everything logged meanwhile reaches MLflow once it is back), and
the optimize flow SIGKILLed mid-ablation, then `--resume <run id>` (the killed attempt's runs marked KILLED with
the reason, the finished trials loaded with all their records, the rest rerun, the run finished; nothing
orphaned)."""

from __future__ import annotations

from pathlib import Path

import faultkit
import pytest


@pytest.mark.slow  # ~70 s here: an MLflow server start (~50 s on this loaded box) and a 20 s outage
def test_mlflow_down_for_20_s_mid_run_loses_nothing(tmp_path: Path) -> None:
    out = faultkit.mlflow_outage(tmp_path, outage_s=20.0)
    assert out.survived and out.records_lost == 0, out.detail


@pytest.mark.slow  # ~90 s: two runs of the optimize CLI on the fake engine (Prefect and MLflow start each time)
def test_sigkill_mid_ablation_then_resume_keeps_every_trial(tmp_path: Path) -> None:
    out = faultkit.kill_and_resume(tmp_path)
    assert out.survived and out.records_lost == 0 and out.orphans == 0, out.detail
