"""The pre-run check's parts (issue 16 item 1): the strict YAML reader, which file an error is in, the number
bounds, the cross-file checks (`check_candidate`) — and that every shipped candidate passes them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from inferopt.config import ConfigError, load_config
from inferopt.config.precheck import check_candidate, parse_set_items
from inferopt.config.yaml_io import MAX_NODES, parse_yaml, read_yaml

ROOT = Path(__file__).resolve().parents[2]
CANDIDATES = sorted([*(ROOT / "configs/candidates").glob("*.yaml"), *(ROOT / "configs/planted").glob("*.yaml")])


@pytest.mark.parametrize("path", CANDIDATES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_candidate_passes_the_pre_run_check(path: Path) -> None:
    if "vllm" in path.name and not (ROOT / ".venv-vllm/bin/python").exists():
        pytest.skip("no .venv-vllm here (INFEROPT_SKIP_VLLM): the check would rightly refuse `python:`")
    assert check_candidate(path).name


def test_duplicate_keys_name_both_lines() -> None:
    with pytest.raises(ConfigError, match=r"duplicate key 'b' at line 3 \(first at line 2\)"):
        parse_yaml("a: 1\nb: 2\nb: 3\n", "f.yaml")
    assert parse_yaml("base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  y: 3\n", "f.yaml")["c"] == {"x": 1, "y": 3}


def test_alias_bomb_is_refused_at_once_and_small_aliases_pass() -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{n}: &{n} [" + ", ".join([f"*{p}"] * 9) + "]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
    )
    assert len(bomb) < 1100  # ~9**9 = 387 million nodes once expanded
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=f"more than {MAX_NODES} YAML nodes"):
        parse_yaml(bomb, "bomb.yaml")
    assert time.perf_counter() - t0 < 2.0
    with pytest.raises(ConfigError, match="recursive alias"):
        parse_yaml("a: &a [1, *a]\n", "r.yaml")
    assert parse_yaml("a: &a [1, 2]\nb: *a\n", "ok.yaml") == {"a": [1, 2], "b": [1, 2]}


def test_file_level_problems_are_one_clean_message(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1.yaml: line 1: not UTF-8 text .*fix:"):
        read_yaml(bad)
    with pytest.raises(ConfigError, match="is a directory"):
        read_yaml(tmp_path)
    secret = tmp_path / "s.yaml"
    secret.write_text("token: sk-LEAK-123\n  bad: [indent\n")
    with pytest.raises(ConfigError) as err:
        read_yaml(secret)
    assert "line 2" in str(err.value) and "sk-LEAK-123" not in str(err.value)  # position, never the text


def test_set_items_parse_as_yaml_and_malformed_ones_are_named() -> None:
    assert parse_set_items(["a.b=3", "c=[1, 2]", "d=x=y"]) == {"a.b": 3, "c": [1, 2], "d": "x=y"}
    for item, needle in (("nokey", "expected FIELD=VALUE"), ("=1", "expected FIELD=VALUE"), ("a=[", "not valid YAML")):
        with pytest.raises(ConfigError, match=needle):
            parse_set_items([item])
    with pytest.raises(ConfigError, match="given twice"):
        parse_set_items(["a=1", "a=2"])


def test_errors_name_the_referenced_file_and_the_set_item(tmp_path: Path) -> None:
    cand = ROOT / "configs/candidates/fake-batching.yaml"
    with pytest.raises(ConfigError) as err:
        load_config(cand, **{"workload.timeout_s": float("inf")})
    assert "(set by --set workload.timeout_s)" in str(err.value)
    slo = tmp_path / "slo.yaml"
    slo.write_text("ttft_p50_ms: 300\nttft_p99_ms: 200\ntpot_p95_ms: 20\n")
    with pytest.raises(ConfigError) as err:
        check_candidate(cand, {"slo": str(slo)})  # a file given by --set
    assert f"(in {slo}" in str(err.value) and "ttft_p50_ms" in str(err.value)


def test_numbers_out_of_range_are_refused_where_pydantic_would_accept_them() -> None:
    cand = ROOT / "configs/candidates/fake-batching.yaml"
    for dotted, value, needle in (
        ("workload.arrival.rate_per_s", 1e-300, "tiny"),
        ("workload.timeout_s", float("inf"), "finite"),
        ("workload.seed", -1, ">= 0"),
        ("baseline.decode_step_ms", float("nan"), "finite"),
        ("ablation.repeats", 1, "needs >= 2"),
        ("target_metrics", ["tpot_ms_p5O"], "did you mean 'tpot_ms_p95'"),
    ):
        with pytest.raises(ConfigError, match=needle):
            load_config(cand, **{dotted: value})
    with pytest.raises(ConfigError, match="more than a day"):
        check_candidate(cand, {"workload.arrival.rate_per_s": 1e-4})


def test_hardware_must_match_the_device_unless_said(tmp_path: Path) -> None:
    cand = ROOT / "configs/candidates/batching.yaml"  # hf on cpu
    h200 = str(ROOT / "configs/hardware/h200.yaml")
    with pytest.raises(ConfigError, match=r"h200.*describes a gpu.*allow_hardware_mismatch"):
        check_candidate(cand, {"hardware": h200})
    assert check_candidate(cand, {"hardware": h200, "allow_hardware_mismatch": True}).hardware.kind == "gpu"
