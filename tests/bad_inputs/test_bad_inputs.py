"""Every case of the bad-input corpus (`bad_input_cases.py`) is refused by the pre-run entry the CLI uses
(`flows.optimize.prerun`), in process: a ConfigError (never a library exception, never accepted), whose
printed message names the file that holds the error and the field, says the fix, and echoes no secret.
The corpus's valid bases, and inputs that only look odd, pass."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from bad_input_cases import BASES, CASES, SECRETS, SET, Case, S, T, materialize

from flows.optimize import prerun, refusal
from inferopt.config import ConfigError


def test_the_corpus_is_large_and_covers_every_kind_of_input() -> None:
    groups = {c.group for c in CASES}
    assert len(CASES) >= 150
    assert {"yaml", "candidate", "system", "workload", "trace", "slo", "hardware", "set"} <= groups


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_bad_input_is_refused_naming_file_field_and_fix(case: Case, tmp_path: Path) -> None:
    root = tmp_path.resolve() / "case"
    cand, sets = materialize(case, root)
    with pytest.raises(ConfigError) as err:
        prerun(str(cand), sets)
    msg = refusal(err.value, str(cand))
    want_file = SET if case.expect_file == SET else str(root / case.expect_file)
    assert want_file in msg, msg
    assert case.expect_field in msg, msg
    assert "fix" in msg, msg
    assert not [s for s in SECRETS if s in msg], msg


@pytest.mark.parametrize("base", sorted(BASES))
def test_every_base_of_the_corpus_passes(base: str, tmp_path: Path) -> None:
    cand, sets = materialize(Case(f"base-{base}", "base", base, (), (), "", ""), tmp_path / base)
    cfg, _ = prerun(str(cand), sets)
    assert cfg.name == "bad-input-base"


def _ok(tmp_path: Path, *edits, base: str = "fake", sets: tuple[str, ...] = ()):
    cand, _ = materialize(Case("ok", "ok", base, edits, sets, "", ""), tmp_path.resolve() / "ok")
    return prerun(str(cand), sets)[0]


def test_inputs_that_only_look_odd_pass(tmp_path: Path) -> None:
    gpu = {**BASES["fake"]["hardware.yaml"], "kind": "gpu", "name": "h200"}
    # an H200 roofline for a CPU run, said so explicitly
    mismatch = S("candidate.yaml", "allow_hardware_mismatch", True)
    cfg = _ok(tmp_path / "a", T("hardware.yaml", yaml.safe_dump(gpu)), mismatch, base="hf")
    assert cfg.allow_hardware_mismatch and cfg.hardware.kind == "gpu"
    # a merge key may be overridden (the one legal repeat of a key); a modest alias is fine
    text = yaml.safe_dump(BASES["fake"]["candidate.yaml"], sort_keys=False)
    ablation = "ablation:\n  repeats: 2\n  bootstrap_samples: 500\n"
    assert ablation in text
    merged = text.replace(ablation, "ablation:\n  <<: {repeats: 3, bootstrap_samples: 500}\n  repeats: 2\n")
    merged = merged.replace("target_metrics:\n- ttft_ms_p99\n", "target_metrics: &t [ttft_ms_p99]\ndescription: *t\n")
    assert "<<" in merged and "&t" in merged
    with pytest.raises(ConfigError, match="description"):  # the alias made description a list: refused as such
        _ok(tmp_path / "b", T("candidate.yaml", merged))
    cfg = _ok(tmp_path / "c", T("candidate.yaml", merged.replace("description: *t\n", "")))
    assert cfg.ablation.repeats == 2 and cfg.ablation.bootstrap_samples == 500
    # a trace in epoch milliseconds replayed with time_scale 0.001; rows out of order are sorted, not refused
    rows = BASES["trace"]["trace.jsonl"].splitlines()
    ms = [line.replace('"timestamp": 1', '"timestamp": 17000000') for line in reversed(rows)]
    ms_trace = T("trace.jsonl", "\n".join(ms) + "\n")
    cfg = _ok(tmp_path / "d", ms_trace, S("workload.yaml", "trace.time_scale", 0.001), base="trace")
    assert cfg.workload.trace.time_scale == 0.001
    # --set with YAML values, and a .yaml reference given by --set
    other = tmp_path / "other-slo.yaml"
    other.write_text("ttft_p99_ms: 300\ntpot_p95_ms: 30\n")
    cfg = _ok(tmp_path / "e", sets=("workload.num_requests=12", "description=two words", f"slo={other}"))
    assert cfg.workload.num_requests == 12 and cfg.description == "two words" and cfg.slo.ttft_p99_ms == 300
