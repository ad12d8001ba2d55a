"""The nightly runs only what was reviewed: the accepted run's resolved config is pinned by content hash, a changed
artifact or an override of an executable field is refused before anything runs, a secret may be filled back."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from inferopt.config import ConfigError
from inferopt.config.pin import check_pinned, config_sha256, executable_overrides
from inferopt.config.redact import REDACTED

REVIEWED = {
    "name": "c",
    "baseline": {
        "kind": "vllm",
        "python": ".venv-vllm/bin/python",
        "extra_args": ["--seed", "1"],
        "extra_env": {"HF_TOKEN": REDACTED},
    },
}


def test_the_hash_is_of_the_content_not_of_its_spelling() -> None:
    a = config_sha256(REVIEWED)
    assert a == config_sha256(json.loads(json.dumps(REVIEWED, indent=4, sort_keys=True)))
    changed = json.loads(json.dumps(REVIEWED))
    changed["baseline"]["python"] = "/tmp/evil/python"
    assert config_sha256(changed) != a


def test_check_pinned_refuses_a_changed_config_a_missing_pin_and_executable_overrides() -> None:
    pin = config_sha256(REVIEWED)
    assert check_pinned(REVIEWED, pin, {"baseline.decode_step_ms": 6.0}, where="w") == pin
    assert check_pinned(REVIEWED, pin, {"baseline.extra_env.HF_TOKEN": "hf_x"}, where="w") == pin  # a secret
    changed = {**REVIEWED, "name": "d"}
    with pytest.raises(ConfigError, match=r"^w: content sha256 .* differs .*fix: review the run again"):
        check_pinned(changed, pin, None, where="w")
    with pytest.raises(ConfigError, match=r"no pinned content hash.*fix: .*--accept"):
        check_pinned(REVIEWED, None, None, where="w")
    for bad in (
        {"baseline.python": "/tmp/evil"},
        {"baseline": {"python": "/tmp/evil"}},
        {"baseline.extra_args": ["--trust-remote-code"]},
        {"baseline.extra_env.LD_PRELOAD": "/tmp/x.so"},
    ):
        with pytest.raises(ConfigError, match=r"executable fields .*fix: put them in a candidate"):
            check_pinned(REVIEWED, pin, bad, where="w")
    assert executable_overrides(REVIEWED, {"baseline": {"python": "p", "decode_step_ms": 1}}) == ["baseline.python"]


class FakeClient:
    """The accepted run as MLflow holds it: its tags and its candidate.resolved.json."""

    def __init__(self, resolved: dict, tags: dict[str, str]) -> None:
        self.resolved, self.run_tags, self.set = resolved, tags, {}

    def download_artifacts(self, run_id: str, path: str, dst: str) -> str:
        out = Path(dst) / path
        out.write_text(json.dumps(self.resolved))
        return str(out)

    def get_run(self, run_id: str) -> SimpleNamespace:
        return SimpleNamespace(
            data=SimpleNamespace(tags=self.run_tags), info=SimpleNamespace(status="FINISHED", experiment_id="1")
        )

    def get_experiment(self, exp_id: str) -> SimpleNamespace:
        return SimpleNamespace(name="inferopt")

    def get_experiment_by_name(self, name: str) -> None:
        return None

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        self.set[key] = value


def test_accept_pins_the_hash_and_the_nightly_refuses_the_artifact_once_it_changed() -> None:
    from flows.nightly import PINNED_TAG, accept_run, load_accepted

    cfg = {"name": "c", "baseline": {"kind": "fake"}}
    tags = {"inferopt.kind": "optimize", "inferopt.verdict": "accept", "inferopt.resolved_sha256": config_sha256(cfg)}
    client = FakeClient(cfg, tags)
    accept_run(client, "run-1")
    assert client.set[PINNED_TAG] == config_sha256(cfg)
    client.run_tags = {**tags, **client.set}
    client.resolved = {"name": "c", "baseline": {"kind": "fake", "decode_step_ms": 0.1}}  # swapped after review
    with pytest.raises(ConfigError, match=r"candidate.resolved.json of accepted run run-1: content sha256 .*differs"):
        load_accepted(client, "run-1", None)
    client.resolved = cfg
    with pytest.raises(ConfigError, match=r"executable fields"):
        load_accepted(client, "run-1", {"baseline.python": "/tmp/evil"})


def test_accept_refuses_a_run_whose_artifact_differs_from_what_the_flow_logged() -> None:
    from flows.nightly import accept_run

    tags = {"inferopt.kind": "optimize", "inferopt.verdict": "accept", "inferopt.resolved_sha256": "0" * 64}
    with pytest.raises(ValueError, match=r"the artifact changed after the run"):
        accept_run(FakeClient({"name": "c"}, tags), "run-1")
