"""Secrets never logged (issue 16 item 2): the redaction of the systems that carry them (openai headers, vLLM
env and flags), of flattened params, of free text; the tracker applies it to params, tags, JSON and copied
configs; the nightly refuses a resolved config whose secrets were redacted instead of running with '***'."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferopt.config import ConfigError, OpenAISystem, VLLMSystem
from inferopt.config.redact import (
    REDACTED,
    is_secret_name,
    redacted,
    redacted_flat,
    redacted_paths,
    scrub_text,
    secret_values,
)

VLLM = VLLMSystem(
    model={"path": "builtin:tiny-llama"},
    extra_env={"HF_TOKEN": "hf_abc", "VLLM_LOGGING_LEVEL": "DEBUG"},
    extra_args=("--api-key", "sk-1", "--hf-token=hf_2", "--max-num-seqs", "8"),
    speculative_config={"method": "ngram", "api_key": "sk-3", "num_speculative_tokens": 4},
)
OPENAI = OpenAISystem(
    base_url="http://127.0.0.1:8000",
    served_model="m",
    vocab_size=288,
    headers={"Authorization": "Bearer sk-4", "X-Team": "infra"},
)
SECRETS = {"hf_abc", "DEBUG", "sk-1", "hf_2", "sk-3", "Bearer sk-4", "infra"}


def test_redacted_hides_every_secret_of_the_systems_that_have_them() -> None:
    v, o = redacted(VLLM.model_dump(mode="json")), redacted(OPENAI.model_dump(mode="json"))
    assert v["extra_env"] == {"HF_TOKEN": REDACTED, "VLLM_LOGGING_LEVEL": REDACTED}  # env values: all of them
    assert v["extra_args"] == ["--api-key", REDACTED, f"--hf-token={REDACTED}", "--max-num-seqs", "8"]
    assert v["speculative_config"] == {"method": "ngram", "api_key": REDACTED, "num_speculative_tokens": 4}
    assert o["headers"] == {"Authorization": REDACTED, "X-Team": REDACTED}  # names kept, values hidden
    text = json.dumps([v, o])
    assert not [s for s in SECRETS if f'"{s}"' in text]
    assert v["model"] == VLLM.model_dump(mode="json")["model"] and o["vocab_size"] == 288  # the rest unchanged


def test_names_that_only_contain_a_word_are_not_secrets() -> None:
    assert all(map(is_secret_name, ["api_key", "HF_TOKEN", "X-Api-Key", "accessToken", "--hf-token", "password"]))
    assert not any(map(is_secret_name, ["eos_token_id", "tokenizer", "max_num_batched_tokens", "token-burst", "kv"]))
    data = {"eos_token_id": 2, "tokenizer": "/models/t", "validation": {"token-burst": {"passed": True}}}
    assert redacted(data) == data


def test_flat_params_free_text_and_read_back() -> None:
    flat = {
        "baseline.headers.Authorization": "Bearer sk-4",
        "baseline.extra_env.HF_TOKEN": "hf_abc",
        "baseline.api_key": "sk-5",
        "baseline.eos_token_id": 2,
        "baseline.extra_args": ["--api-key", "sk-1"],
        "baseline.name": "b",
    }
    out = redacted_flat(flat)
    assert out == {
        **{k: REDACTED for k in list(flat)[:3]},
        "baseline.eos_token_id": 2,
        "baseline.extra_args": ["--api-key", REDACTED],
        "baseline.name": "b",
    }
    found = secret_values({"baseline": VLLM.model_dump(mode="json")})
    assert {"hf_abc", "sk-1", "hf_2", "sk-3"} <= found
    assert scrub_text("extra_env: {HF_TOKEN: hf_abc}  # sk-1", found) == "extra_env: {HF_TOKEN: ***}  # ***"
    assert set(redacted_paths(redacted({"baseline": OPENAI.model_dump(mode="json")}))) == {
        "baseline.headers.Authorization",
        "baseline.headers.X-Team",
    }


def test_tracker_redacts_params_tags_json_and_copied_configs(tmp_path: Path, monkeypatch) -> None:
    from mlflow.tracking import MlflowClient

    from tasks.tracking import Tracker

    db = tmp_path / "mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    tracker = Tracker.start("t", experiment="redact", results_root=tmp_path / "results")
    dump = OPENAI.model_dump(mode="json")
    tracker.params({"baseline": dump})
    tracker.tags({"inferopt.api_key": "sk-6", "inferopt.note": "kept"})
    tracker.json({"system": VLLM.model_dump(mode="json")}, "x.json")
    cfg = tmp_path / "cand.yaml"
    cfg.write_text("headers: {Authorization: Bearer sk-4}\n")
    tracker.file(cfg, secrets=secret_values(dump))
    tracker.finish()
    run = MlflowClient().get_run(tracker.parent_run_id)
    assert (
        run.data.params["baseline.headers.Authorization"] == REDACTED and run.data.params["baseline.name"] == "openai"
    )
    assert run.data.tags["inferopt.api_key"] == REDACTED and run.data.tags["inferopt.note"] == "kept"
    assert (tracker.results_dir / "cand.yaml").read_text() == "headers: {Authorization: ***}\n"
    every = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and p != cfg)
    assert not [s for s in ("hf_abc", "sk-1", "hf_2", "sk-3", "sk-4", "sk-6") if s.encode() in every]


def test_nightly_refuses_a_resolved_config_with_redacted_secrets(tmp_path: Path) -> None:
    from flows.nightly import load_accepted

    class Client:  # the accepted run's candidate.resolved.json, as the optimize flow logged it
        def download_artifacts(self, run_id: str, path: str, dst: str) -> str:
            out = Path(dst) / path
            out.write_text(json.dumps({"name": "c", "baseline": redacted(OPENAI.model_dump(mode="json"))}))
            return str(out)

    with pytest.raises(ConfigError, match=r"baseline.headers.Authorization.*redacted.*fix: pass each as an override"):
        load_accepted(Client(), "run-1", None)
