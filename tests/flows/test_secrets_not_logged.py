"""Secrets never logged (issue 16 item 2): a whole `optimize` run on the fake engine whose baseline carries the
secret-bearing fields of the real systems (headers, an env mapping, an api key, a `--api-key` flag), and a
candidate file that holds them too; no byte of any artifact under results/<run>/, of the run's MLflow
artifact store, of the MLflow database, or of what the run printed contains a secret value."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from mlflow.tracking import MlflowClient

from inferopt.config import CandidateConfig, FakeSystem, load_config

SECRETS = {
    "header": "Bearer sk-HEADER-5b7e21",
    "env": "hf_ENV-0c94d3",
    "api_key": "KEY-a81f66",
    "flag": "FLAG-3e2d90",
}


class SecretFake(FakeSystem):
    """The fake engine with the shapes secrets come in on the openai and vllm systems."""

    headers: dict[str, str] = {}
    extra_env: dict[str, str] = {}
    api_key: str = ""
    extra_args: tuple[str, ...] = ()


class SecretCandidate(CandidateConfig):
    baseline: SecretFake  # type: ignore[assignment] - the subclass, so dumps keep its fields


def _planted(path: str) -> CandidateConfig:
    cfg = load_config(path, kind="candidate")
    base = SecretFake(
        **cfg.baseline.model_dump(),
        headers={"Authorization": SECRETS["header"]},
        extra_env={"HF_TOKEN": SECRETS["env"]},
        api_key=SECRETS["api_key"],
        extra_args=("--api-key", SECRETS["flag"]),
    )
    return SecretCandidate.model_validate({**cfg.model_dump(), "baseline": base.model_dump()})


def _leaks(root: Path) -> list[str]:
    found = []
    for p in sorted(root.rglob("*")):
        if p.is_file():
            data = p.read_bytes()
            found += [f"{p}: {name}" for name, s in SECRETS.items() if s.encode() in data]
    return found


@pytest.mark.slow  # heavy (CI runs it); keeps `-m "not slow"` near 5 min
def test_no_secret_in_artifacts_db_or_output(
    prefect_harness, mlflow_uri, in_repo: Path, monkeypatch, tmp_path: Path, capsys
) -> None:
    import flows.optimize as opt

    candidate = tmp_path / "secret-candidate.yaml"
    text = Path("configs/candidates/fake-batching.yaml").read_text().replace("../", str(Path.cwd() / "configs") + "/")
    candidate.write_text(text + f"# the team's endpoint: headers: {{Authorization: {SECRETS['header']}}}\n")
    planted = _planted(str(candidate))
    assert planted.baseline.headers and planted.candidate_system.api_key == SECRETS["api_key"]  # the plant took
    monkeypatch.setattr(opt, "precheck", lambda path, overrides=None: planted)

    result = opt.optimize(candidate=str(candidate), experiment="test-secrets")
    run = MlflowClient(tracking_uri=mlflow_uri).get_run(result["run_id"])
    assert run.info.status == "FINISHED"
    assert run.data.params["baseline.headers.Authorization"] == "***"  # logged, but redacted

    mirror = Path(result["results_dir"])
    resolved = json.loads((mirror / "candidate.resolved.json").read_text())  # the plant reached the artifacts
    assert resolved["baseline"]["headers"] == {"Authorization": "***"} and resolved["baseline"]["api_key"] == "***"
    assert resolved["baseline"]["extra_args"] == ["--api-key", "***"]
    engine = json.loads((mirror / "1-measure" / "measure.json").read_text())["engine"]
    assert engine["extra_env"] == {"HF_TOKEN": "***"}
    assert "Authorization: ***" in (mirror / candidate.name).read_text()
    assert _leaks(mirror) == []
    store = Path(unquote(urlparse(run.info.artifact_uri).path))
    assert store.is_dir() and _leaks(store) == []
    db = Path(unquote(urlparse(mlflow_uri).path))
    assert _leaks(db.parent) == []  # the database and any journal beside it
    out = capsys.readouterr()
    assert not [n for n, s in SECRETS.items() if s in out.out + out.err]
