"""Benchmark Report export and the GuideLLM / AIPerf imports: a trial written with the llm-d package's schema
validates with its own loader and JSON schema; the sample files (made by running the tools against our no-op
server, `benchmarks/peers.py --keep`, trimmed) import into our records with the timings they carry."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import pytest
from llmd_benchmark_report import load_benchmark_report

from inferopt.interop.__main__ import main as import_main
from inferopt.interop.benchmark_report import statistics, trial_report, trial_reports, write_trial_reports
from inferopt.interop.peer_files import read_aiperf, read_guidellm, read_peer_file, token_times_s
from inferopt.measure.phases import phase_table
from inferopt.records import RequestRecord

DATA = Path(__file__).resolve().parents[1] / "data" / "peers"
GUIDELLM = DATA / "guidellm_benchmarks.json"
AIPERF = DATA / "aiperf_profile_export.jsonl"


def _record(i: int, *, outcome: str = "ok", trial: int = 0, warmup: bool = False, arm: str = "baseline"):
    t0 = 1000.0 + i * 0.1
    tokens = [t0 + 0.02 + k * 0.005 for k in range(4)] if outcome == "ok" else []
    return RequestRecord(
        request_id=f"r{i}",
        outcome=outcome,
        error=None if outcome == "ok" else "boom",
        input_len=16 + i,
        target_output_len=4,
        intended_s=t0,
        sent_s=t0 + 0.001,
        client_token_s=tokens,
        client_chunk_s=tokens,
        client_chunk_tokens=[1] * len(tokens),
        client_done_s=(tokens[-1] if tokens else t0 + 0.05),
        output_len=len(tokens),
        arm=arm,
        trial=trial,
        scenario="ablation",
        warmup=warmup,
    )


def test_a_trial_report_validates_with_the_packages_loader_and_json_schema() -> None:
    import jsonschema

    records = [_record(i) for i in range(20)] + [_record(20, outcome="error"), _record(21, outcome="timeout")]
    report = trial_report(records, experiment="run-1")
    doc = json.loads(report.get_json_str())
    assert load_benchmark_report(doc).version == "0.2.1"  # the package's own validator
    schema = json.loads(files("llmd_benchmark_report").joinpath("br_v0_2_json_schema.json").read_text())
    jsonschema.validate(doc, schema)
    agg = doc["results"]["request_performance"]["aggregate"]
    assert agg["requests"]["total"] == 22 and agg["requests"]["failures"] == 2 and agg["requests"]["incomplete"] == 1
    ttft = agg["latency"]["time_to_first_token"]
    assert ttft["units"] == "ms" and ttft["p50"] == pytest.approx(20.0, abs=1e-6)
    assert agg["latency"]["time_per_output_token"]["mean"] == pytest.approx(5.0, abs=1e-6)
    duration_s = max(r.client_done_s or 0 for r in records) - records[0].intended_s  # first intended -> last reply
    assert agg["throughput"]["output_token_rate"]["mean"] == pytest.approx(80 / duration_s)
    assert doc["scenario"]["load"]["standardized"]["tool"] == "inferopt"


def test_reports_per_trial_leave_warmups_out_and_a_bad_report_fails_the_validator(tmp_path: Path) -> None:
    records = [_record(i, trial=i % 2) for i in range(10)] + [_record(10, trial=2, warmup=True)]
    reports = trial_reports(records, experiment="run-1")
    assert set(reports) == {("baseline", "ablation", 0), ("baseline", "ablation", 1)}
    uids = {r.run.uid for r in reports.values()}
    assert len(uids) == 2 and len({r.run.eid for r in reports.values()}) == 1
    paths = write_trial_reports(records, tmp_path, experiment="run-1")
    assert sorted(p.name for p in paths) == ["baseline-ablation-0.json", "baseline-ablation-1.json"]
    doc = json.loads(paths[0].read_text())
    doc["results"]["request_performance"]["aggregate"]["latency"]["time_to_first_token"]["units"] = "tokens/s"
    with pytest.raises(ValueError):
        load_benchmark_report(doc)


def test_statistics_of_nothing_is_none_and_of_values_has_the_schemas_percentiles() -> None:
    assert statistics([float("nan"), None], "ms") is None
    s = statistics(range(101), "ms")
    assert s["p50"] == 50 and s["p99p9"] == pytest.approx(99.9) and s["min"] == 0 and s["max"] == 100


def test_token_times_spread_evenly_between_first_and_last() -> None:
    assert token_times_s(1.0, 2.0, 3) == [1.0, 1.5, 2.0]
    assert token_times_s(None, 2.0, 3) == [] and token_times_s(1.0, 1.0, 2) == [1.0, 1.0]


def test_a_guidellm_file_imports_with_its_timings() -> None:
    raw = json.loads(GUIDELLM.read_text())["benchmarks"][0]["requests"]["successful"]
    records = read_guidellm(GUIDELLM)
    assert len(records) == len(raw) == 6 and {r.outcome for r in records} == {"ok"}
    first, t = records[0], raw[0]["info"]["timings"]
    assert first.request_id == raw[0]["request_id"] and first.arm == "guidellm"
    assert first.intended_s == t["targeted_start"] and first.sent_s == t["request_start"]
    assert (
        first.client_token_s[0] == t["first_token_iteration"] and first.client_token_s[-1] == t["last_token_iteration"]
    )
    assert first.client_done_s == t["request_end"] and first.output_len == raw[0]["output_metrics"]["text_tokens"]
    phases = phase_table(records)
    expect_ttft_ms = (t["first_token_iteration"] - t["targeted_start"]) * 1000
    assert phases["ttft_ms"].iloc[0] == pytest.approx(expect_ttft_ms)
    assert phases["e2e_ms"].iloc[0] == pytest.approx((t["request_end"] - t["targeted_start"]) * 1000)


def test_a_guidellm_errored_request_is_an_error_record(tmp_path: Path) -> None:
    doc = json.loads(GUIDELLM.read_text())
    bad = json.loads(json.dumps(doc["benchmarks"][0]["requests"]["successful"][0]))
    bad["info"]["error"] = "HTTP 500: upstream"
    bad["info"]["timings"]["first_token_iteration"] = bad["info"]["timings"]["last_token_iteration"] = None
    bad["output_metrics"]["text_tokens"] = 0
    doc["benchmarks"][0]["requests"]["errored"] = [bad]
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    records = read_peer_file(path)
    err = [r for r in records if r.outcome != "ok"]
    assert len(records) == 7 and len(err) == 1 and err[0].error == "HTTP 500: upstream" and not err[0].client_token_s
    with pytest.raises(ValueError, match="no 'benchmarks'"):
        (tmp_path / "x.json").write_text("{}")
        read_guidellm(tmp_path / "x.json")


def test_an_aiperf_file_imports_with_its_timings(tmp_path: Path) -> None:
    lines = [json.loads(x) for x in AIPERF.read_text().splitlines()]
    records = read_aiperf(AIPERF)
    assert len(records) == len(lines) == 8 and {r.outcome for r in records} == {"ok"}
    meta, metrics = lines[0]["metadata"], lines[0]["metrics"]
    r = records[0]
    assert r.request_id == meta["x_request_id"] and r.intended_s == pytest.approx(meta["credit_issued_ns"] * 1e-9)
    assert r.sent_s == pytest.approx(meta["request_start_ns"] * 1e-9)
    first = meta["request_start_ns"] * 1e-9 + metrics["time_to_first_token"]["value"] / 1000
    assert r.client_token_s[0] == pytest.approx(first) and r.output_len == metrics["output_sequence_length"]["value"]
    failed = dict(lines[1], error={"code": 503, "type": "ServiceUnavailable", "message": "overloaded"})
    path = tmp_path / "profile_export.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in (lines[0], failed)) + "\n")
    got = read_peer_file(path)
    assert [x.outcome for x in got] == ["ok", "error"] and "overloaded" in (got[1].error or "")


def test_the_import_command_writes_our_tables_and_a_report(tmp_path: Path, capsys) -> None:
    assert import_main([str(AIPERF), "-o", str(tmp_path)]) == 0
    import pandas as pd

    assert len(pd.read_parquet(tmp_path / "requests.parquet")) == 8
    assert len(pd.read_parquet(tmp_path / "phases.parquet")) == 8
    (report,) = tmp_path.glob("benchmark_report-*.json")
    doc = json.loads(report.read_text())
    assert load_benchmark_report(doc).scenario.load.standardized.tool == "aiperf"
    assert "aiperf profiling trial 0: 8 requests, 8 ok" in capsys.readouterr().out
    (tmp_path / "junk.json").write_text("[1, 2]")
    assert import_main([str(tmp_path / "junk.json")]) == 2
