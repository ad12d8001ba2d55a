"""One Prefect test harness and one throwaway MLflow store for the whole flows/ test session
(the harness costs ~20–30 s to start here, so it is shared)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def mlflow_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
    os.environ["MLFLOW_TRACKING_URI"] = uri
    return uri


@pytest.fixture(scope="session")
def prefect_harness():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture()
def in_repo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Run from the repo root (config paths are relative to it) with results/ in a temp dir."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("INFEROPT_RESULTS", str(tmp_path))
    return tmp_path


@pytest.fixture(scope="session")
def local_prefect(tmp_path_factory: pytest.TempPathFactory):
    """A real Prefect server on 127.0.0.1 with the repo's prefect.yaml deployed on process pools `local` and
    `arms`, its own MLflow store (experiment `inferopt`, artifacts in the temp dir); killed at the end
    (`tests/flows/local_prefect.py`)."""
    from local_prefect import start_local_prefect
    from mlflow.tracking import MlflowClient

    tmp = tmp_path_factory.mktemp("local-prefect")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    MlflowClient(tracking_uri=uri).create_experiment("inferopt", artifact_location=(tmp / "artifacts").as_uri())
    lp = start_local_prefect(tmp, uri, tmp / "results")
    try:
        yield lp
    finally:
        lp.close()
