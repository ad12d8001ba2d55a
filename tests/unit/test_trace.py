"""Trace replay: JSONL and CSV traces become the same workload table as synthetic loads; bad rows fail
early naming the file, row and field; scenarios scale a trace through its time_scale."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from inferopt.config import ScenarioConfig, TraceConfig, WorkloadConfig
from inferopt.config.loader import load_config
from inferopt.validate.scenarios import scenario_requests, scenario_workload
from inferopt.workload import WORKLOAD_COLUMNS, build_workload, workload_hash
from inferopt.workload.trace import TraceError

ROOT = Path(__file__).resolve().parents[2]


def _wl(path: Path, **trace_kw) -> WorkloadConfig:
    return WorkloadConfig(name="tr", trace=TraceConfig(path=str(path), **trace_kw))


def _jsonl(tmp_path: Path, rows: list[dict], name: str = "t.jsonl") -> Path:
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def test_jsonl_trace_table_shape_order_and_shift(tmp_path) -> None:
    p = _jsonl(
        tmp_path,
        [
            {"timestamp": 1700000010.5, "input_len": 20, "output_len": 4, "tenant": "b", "priority": 1},
            {"timestamp": 1700000010.0, "prompt": "héllo world, twelve bytes+", "output_len": 3, "prefix_group": 1},
            {
                "timestamp": 1700000012.0,
                "input_len": 5,
                "output_len": 2,
                "prefix_group": 0,
                "prefix_len": 30,
                "extra": "x",
            },
        ],
    )
    table = build_workload(_wl(p, time_scale=2.0))
    assert list(table.columns) == list(WORKLOAD_COLUMNS)
    assert table["arrival_offset_s"].tolist() == pytest.approx([0.0, 1.0, 4.0])  # sorted, shifted, gaps x2
    first = table.iloc[0]
    assert first["input_len"] == math.ceil(len("héllo world, twelve bytes+".encode()) / 4)
    assert first["prefix_group"] == 1 and first["prefix_len"] == min(32, first["input_len"] - 1)
    assert table.iloc[1]["tenant"] == "b" and table.iloc[1]["priority"] == 1 and table.iloc[1]["prefix_len"] == 0
    assert table.iloc[2]["prefix_len"] == 4  # clipped: one unique token stays
    assert table["request_id"].tolist() == ["tr-00000", "tr-00001", "tr-00002"]
    assert table.attrs["content_hash"] == workload_hash(table)


def test_csv_trace_and_tokenizer_and_limits(tmp_path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("timestamp,input_len,prompt,output_len,tenant\n0.0,10,,3,\n0.5,,a b c,2,x\n1.0,7,,2,\n")
    table = build_workload(_wl(p), count_tokens=lambda s: len(s.split()))
    assert table["input_len"].tolist() == [10, 3, 7] and table["tenant"].tolist() == ["default", "x", "default"]
    assert len(build_workload(_wl(p, limit=2))) == 2
    assert len(build_workload(_wl(p), num_requests=1)) == 1


@pytest.mark.parametrize(
    "rows,field",
    [
        ([{"timestamp": 0, "input_len": 3, "output_len": 2}, {"input_len": 3, "output_len": 2}], "timestamp"),
        ([{"timestamp": 0, "input_len": 3, "output_len": 2}, {"timestamp": 1, "output_len": 2}], "input_len"),
        ([{"timestamp": 0, "input_len": 3.5, "output_len": 2}], "input_len"),
        ([{"timestamp": 0, "input_len": 3, "output_len": 0}], "output_len"),
        ([{"timestamp": "soon", "input_len": 3, "output_len": 2}], "timestamp"),
        ([{"timestamp": 0, "input_len": 3, "output_len": 2, "prefix_group": -3}], "prefix_group"),
    ],
)
def test_bad_jsonl_row_names_file_row_and_field(tmp_path, rows, field) -> None:
    p = _jsonl(tmp_path, rows)
    with pytest.raises(TraceError) as err:
        build_workload(_wl(p))
    msg = str(err.value)
    assert str(p) in msg and f"line {len(rows)}" in msg and f"field {field!r}" in msg and "fix:" in msg


def test_bad_csv_and_unreadable_files(tmp_path) -> None:
    p = tmp_path / "t.csv"
    p.write_text("timestamp,input_len,output_len\n0,4,2\n1,four,2\n")
    with pytest.raises(TraceError, match=r"line 3, field 'input_len'"):
        build_workload(_wl(p))
    p.write_text("time,input_len,output_len\n0,4,2\n")
    with pytest.raises(TraceError, match="no `timestamp` column"):
        build_workload(_wl(p))
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"timestamp": 0, "input_len": 2, "output_len": 2}\n{not json\n')
    with pytest.raises(TraceError, match=r"line 2.*not valid JSON"):
        build_workload(_wl(bad))
    with pytest.raises(TraceError, match="no such trace file"):
        build_workload(_wl(tmp_path / "missing.jsonl"))


def test_example_config_loads_and_scenarios_scale_time(tmp_path) -> None:
    wl = load_config(ROOT / "configs/workloads/trace-example.yaml", kind="workload")
    table = build_workload(wl)
    assert len(table) == 24 and table["arrival_offset_s"].iloc[0] == 0.0
    steady = scenario_workload(wl, ScenarioConfig(name="steady", kind="steady", rate_scale=2.0))
    assert steady.trace.time_scale == pytest.approx(0.5)
    fast = build_workload(steady)
    assert np.allclose(fast["arrival_offset_s"], table["arrival_offset_s"] / 2)
    burst = scenario_requests(wl, ScenarioConfig(name="burst", kind="burst", burstiness=8.0, num_requests=20))
    assert burst["input_len"].tolist() == table["input_len"].tolist()[:20]  # same rows, re-timed
    gaps = np.diff(burst["arrival_offset_s"])
    assert (gaps >= 0).all() and not np.allclose(burst["arrival_offset_s"], table["arrival_offset_s"][:20])
