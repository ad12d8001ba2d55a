"""Public trace formats and the column mapping: each format loads from its sample in configs/traces/ (through
its workload YAML), `auto` tells them by header, a trace with its own column names replays through
`trace.columns` (and runs on an engine at its own lengths), Mooncake hash_ids become prefix groups, and bad
rows name file, row, field and fix."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from pydantic import ValidationError

from inferopt.config import FakeSystem, TraceConfig, WorkloadConfig
from inferopt.config.loader import load_config
from inferopt.config.trace_formats import detect_format, shared_prefixes
from inferopt.measure.runner import RunTags
from inferopt.measure.session import run_system
from inferopt.workload import WORKLOAD_COLUMNS, build_workload
from inferopt.workload.trace import TraceError

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = {
    "azure": "trace-azure.yaml",
    "burstgpt": "trace-burstgpt.yaml",
    "mooncake": "trace-mooncake.yaml",
    "sessions": "trace-sessions.yaml",
    "own-columns": "trace-own-columns.yaml",
}


def _wl(path: Path, **trace_kw) -> WorkloadConfig:
    return WorkloadConfig(name="tr", trace=TraceConfig(path=str(path), **trace_kw))


def _sample(name: str) -> pd.DataFrame:
    return build_workload(load_config(ROOT / "configs/workloads" / SAMPLES[name], kind="workload"))


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_sample_loads_as_a_workload_table(name: str) -> None:
    table = _sample(name)
    assert len(table) >= 24 and list(table.columns)[: len(WORKLOAD_COLUMNS)] == list(WORKLOAD_COLUMNS)
    assert table["arrival_offset_s"].iloc[0] == 0.0 and table["arrival_offset_s"].is_monotonic_increasing
    assert 0 < table["arrival_offset_s"].iloc[-1] < 60  # the samples' clocks read in their own units
    assert (table["input_len"] >= 1).all() and (table["output_len"] >= 1).all()


def test_azure_iso_timestamps_become_seconds(tmp_path) -> None:
    p = tmp_path / "AzureLLMInferenceTrace_conv.csv"
    p.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:47.1805900,396,109\n2024-05-10 00:00:00.009930+00:00,20,1\n"
    )
    table = build_workload(_wl(p, limit=2))  # auto: told by the header
    assert table["arrival_offset_s"].tolist() == pytest.approx([0.0, 0.5])
    assert table["input_len"].tolist() == [374, 396] and table["output_len"].tolist() == [44, 109]


def test_burstgpt_model_as_tenant_and_failed_rows_refused(tmp_path) -> None:
    assert set(_sample("burstgpt")["tenant"]) == {"ChatGPT", "GPT-4"}
    p = tmp_path / "b.csv"
    p.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n45,GPT-4,1087,0,1087,API log\n"
    )
    with pytest.raises(TraceError, match=r"line 3, field 'Response tokens' \(output_len\).*failed request.*fix:"):
        build_workload(_wl(p))


def test_mooncake_hash_ids_give_prefix_groups(tmp_path) -> None:
    rows = [
        {"timestamp": 0, "input_length": 2000, "output_length": 5, "hash_ids": [0, 1, 2, 3]},
        {"timestamp": 10, "input_length": 1900, "output_length": 5, "hash_ids": [0, 1, 2, 9]},
        {"timestamp": 20, "input_length": 700, "output_length": 5, "hash_ids": [0, 7]},
        {"timestamp": 30, "input_length": 600, "output_length": 5, "hash_ids": [0, 8]},
        {"timestamp": 40, "input_length": 300, "output_length": 5, "hash_ids": [5]},
    ]
    p = tmp_path / "mooncake_trace.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = build_workload(_wl(p))
    assert table["arrival_offset_s"].tolist() == pytest.approx([0.0, 0.01, 0.02, 0.03, 0.04])  # ms
    assert table["prefix_len"].tolist() == [3 * 512, 3 * 512, 512, 512, 0]
    groups = table["prefix_group"].tolist()
    assert groups[0] == groups[1] != groups[2] == groups[3] and groups[4] == -1


def test_shared_prefixes_short_rows_and_rows_without_hashes() -> None:
    assert shared_prefixes([(1, 2), None, (1, 2, 3), (4,)], 16) == [(0, 32), None, (0, 32), (-1, 0)]


def test_sessions_columns_are_carried() -> None:
    table = _sample("sessions")
    assert {"session_id", "turn"} <= set(table.columns)
    first = table[table["session_id"] == "s00"].sort_values("turn")
    assert first["turn"].tolist() == [0, 1, 2, 3] and first["input_len"].is_monotonic_increasing


def test_own_columns_replay_through_a_mapping() -> None:
    table = _sample("own-columns")
    raw = pd.read_csv(ROOT / "configs/traces/own-columns-sample.csv")
    assert table["input_len"].tolist() == raw["prompt_tokens"].tolist()
    assert table["arrival_offset_s"].tolist() == pytest.approx(((raw["arrived_at_ms"] - 1048) / 1000).tolist())
    assert set(table["tenant"]) == {"team-a", "team-b"}


def test_without_the_mapping_the_own_columns_csv_is_refused_with_the_fix() -> None:
    with pytest.raises(TraceError, match=r"no `timestamp` column.*trace.columns: \{timestamp: <your column>\}"):
        build_workload(_wl(ROOT / "configs/traces/own-columns-sample.csv"))


def test_detect_format_by_header() -> None:
    assert detect_format(["TIMESTAMP", "ContextTokens", "GeneratedTokens"]) == "azure"
    assert detect_format(["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens"]) == "burstgpt"
    assert detect_format(["timestamp", "input_length", "output_length", "hash_ids"]) == "mooncake"
    assert detect_format(["timestamp", "session_id", "turn", "input_len", "output_len"]) == "sessions"
    assert detect_format(["timestamp", "input_len", "output_len"]) == "native"


def _csv(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "t.csv"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "text,kw,match",
    [
        ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,3,2\n", {}, r"line 2, field 'TIMESTAMP' \(timestamp\)"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,-3,2\n", {}, r"'ContextTokens' \(input_len\)"),
        (
            "ts,n,m\n0,3,2\n",
            {"columns": {"timestamp": "ts", "input_len": "n", "output_len": "gen"}},
            "columns.output_len",
        ),
        ("timestamp,input_len,output_len,session_id\n0,3,2,a\n", {}, r"line 2, field 'turn'"),
        ("timestamp,input_len,output_len,session_id,turn\n0,3,2,a,0\n1,3,2,a,0\n", {}, r"line 3.*turn 0 twice"),
    ],
)
def test_bad_rows_and_mappings_name_file_row_and_field(tmp_path, text, kw, match) -> None:
    p = _csv(tmp_path, text)
    with pytest.raises(TraceError, match=match) as err:
        build_workload(_wl(p, **kw))
    assert str(p) in str(err.value) and "fix:" in str(err.value)


@pytest.mark.parametrize(
    "hashes,match",
    [("[]", "not a non-empty list"), ('[0, "a"]', "not a block id"), ("[0, 1, 2, 3, 4]", "more than input_len")],
)
def test_bad_hash_ids(tmp_path, hashes, match) -> None:
    p = tmp_path / "m.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": %s}\n' % hashes)
    with pytest.raises(TraceError, match=rf"line 1, field 'hash_ids': .*{match}"):
        build_workload(_wl(p))


def test_config_refuses_unknown_field_in_the_mapping_and_unknown_format() -> None:
    with pytest.raises(ValidationError, match="did you mean 'timestamp'"):
        TraceConfig(path="t.csv", columns={"timestamps": "ts"})
    with pytest.raises(ValidationError, match="format"):
        TraceConfig(path="t.csv", format="parquet")


@pytest.mark.slow  # still run in CI; off the fast suite (~5 min): 7-10 s here
def test_the_own_columns_trace_replays_on_an_engine_at_its_lengths() -> None:
    table = _sample("own-columns")
    run = run_system(FakeSystem(decode_step_ms=0.2, prefill_base_ms=0.2), table, RunTags(arm="a"), timeout_s=10)
    assert not run.failed and len(run.records) == len(table) and {r.outcome for r in run.records} == {"ok"}
    assert run.engine_info["output_lengths"] == "forced"  # trace replay: the trace's own output lengths
    by_id = {r.request_id: r for r in run.records}
    assert [by_id[i].output_len for i in table["request_id"]] == table["output_len"].tolist()
    assert [by_id[i].tenant for i in table["request_id"]] == table["tenant"].tolist()
