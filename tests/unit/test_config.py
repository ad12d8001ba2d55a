"""Configs fail early and clearly: every shipped file loads; bad input names the file, field and fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferopt.config import CandidateConfig, ConfigError, detect_kind, load_config, set_dotted

ROOT = Path(__file__).resolve().parents[2]
# tune_planted/: cases of benchmarks/tune_planted.py (a system, load and the right lever), checked by
# tests/unit/test_tune_planted_cases.py; their parts are configs of the kinds below
CONFIGS = sorted(p for p in (ROOT / "configs").rglob("*.yaml") if not {"quality", "tune_planted"} & set(p.parts))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_config_loads(path: Path) -> None:
    cfg = load_config(path)
    assert cfg is not None


def _write(tmp_path: Path, text: str, name: str = "cand.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _candidate_text(
    extra: str = "", rate: str = "2.0", model: str = "builtin:tiny-llama", changes: str = "attn_implementation: sdpa"
) -> str:
    return f"""
name: t
baseline:
  engine: hf
  model: {{path: {model}}}
  attn_implementation: eager
changes:
  {changes}
workload:
  arrival: {{kind: poisson, rate_per_s: {rate}}}
slo: {{ttft_p99_ms: 100, tpot_p95_ms: 10}}
hardware: {ROOT / "configs/hardware/cpu.yaml"}
{extra}
"""


def test_candidate_resolves_references_and_changes() -> None:
    cfg = load_config(ROOT / "configs/candidates/batching.yaml")
    assert isinstance(cfg, CandidateConfig)
    assert cfg.baseline.batching.max_batch_size == 1
    assert cfg.candidate_system.batching.max_batch_size == 8
    assert cfg.candidate_system.batching.batch_wait_ms == 10
    # exactly the changed fields differ
    base, cand = cfg.baseline.model_dump(), cfg.candidate_system.model_dump()
    assert {k for k in base if base[k] != cand[k]} == {"batching"}


def test_typo_field_is_named_with_a_suggestion(tmp_path: Path) -> None:
    p = _write(tmp_path, _candidate_text(extra="ablation: {repeets: 3}"))
    with pytest.raises(ConfigError) as err:
        load_config(p)
    msg = str(err.value)
    assert str(p) in msg and "ablation.repeets" in msg and "did you mean 'repeats'" in msg


def test_negative_rate_is_named(tmp_path: Path) -> None:
    p = _write(tmp_path, _candidate_text(rate="-1"))
    with pytest.raises(ConfigError) as err:
        load_config(p)
    msg = str(err.value)
    assert "workload.arrival.rate_per_s" in msg and "> 0" in msg


def test_missing_model_path_fails_before_loading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers

    def boom(*a, **k):  # pragma: no cover - must never be reached
        raise AssertionError("a model was loaded before the config was validated")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", boom)
    p = _write(tmp_path, _candidate_text(model=str(tmp_path / "no-such-model")))
    with pytest.raises(ConfigError) as err:
        load_config(p)
    msg = str(err.value)
    assert "baseline.model.path" in msg and "config.json" in msg and "fix" in msg


def test_change_to_unknown_field_is_named(tmp_path: Path) -> None:
    p = _write(tmp_path, _candidate_text(changes="attn_implementaton: sdpa"))
    with pytest.raises(ConfigError) as err:
        load_config(p)
    assert "attn_implementaton" in str(err.value) and "attn_implementation" in str(err.value)


def test_change_that_changes_nothing_is_refused(tmp_path: Path) -> None:
    p = _write(tmp_path, _candidate_text(changes="attn_implementation: eager"))
    with pytest.raises(ConfigError, match="already has"):
        load_config(p)


def test_wrong_literal_lists_options(tmp_path: Path) -> None:
    p = _write(tmp_path, _candidate_text(changes="attn_implementation: flash"))
    with pytest.raises(ConfigError) as err:
        load_config(p)
    assert "sdpa" in str(err.value)


def test_missing_file_reference(tmp_path: Path) -> None:
    p = _write(tmp_path, _candidate_text().replace(str(ROOT / "configs/hardware/cpu.yaml"), "nope.yaml"))
    with pytest.raises(ConfigError, match="nope.yaml: file not found"):
        load_config(p)


def test_overrides_apply_and_validate() -> None:
    cfg = load_config(ROOT / "configs/candidates/fake-batching.yaml", **{"workload.num_requests": 5})
    assert cfg.workload.num_requests == 5
    with pytest.raises(ConfigError, match="workload.num_requests"):
        load_config(ROOT / "configs/candidates/fake-batching.yaml", **{"workload.num_requests": 0})


def test_set_dotted_creates_sections_or_names_the_document() -> None:
    data: dict = {"baseline": {"decode_step_ms": 1.0}}
    set_dotted(data, "workload.arrival.rate_per_s", 2.0)  # load_config's overrides: missing sections are made
    set_dotted(data, "baseline.decode_step_ms", 6.0)
    assert data == {"baseline": {"decode_step_ms": 6.0}, "workload": {"arrival": {"rate_per_s": 2.0}}}
    with pytest.raises(ValueError, match="'measure' is not a section of the accepted candidate"):
        set_dotted(data, "measure.repeats", 3, what="the accepted candidate")  # the nightly flow's overrides
    with pytest.raises(ValueError, match="'decode_step_ms' is not a section"):
        set_dotted(data, "baseline.decode_step_ms.x", 3, what="the accepted candidate")
    set_dotted(data, "baseline.name", "b", what="the accepted candidate")
    assert data["baseline"]["name"] == "b"


def test_configs_are_frozen() -> None:
    cfg = load_config(ROOT / "configs/candidates/fake-batching.yaml")
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="frozen"):
        cfg.name = "x"  # type: ignore[misc]


def test_detect_kind_refuses_unknown() -> None:
    with pytest.raises(ConfigError):
        detect_kind({"foo": 1})
