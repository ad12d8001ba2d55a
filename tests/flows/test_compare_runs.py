"""`python -m inferopt.compare` on two fake-engine flow runs of one candidate: paired (same workload hash)
through `compare_arms`, plainly unpaired when the hashes differ, the table printed and logged as an MLflow run
of its own; and the flow's parent run reads on its own (its description holds the verdict, its reasons and a
link to the report; every trial has a Benchmark Report that the llm-d package validates)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from llmd_benchmark_report import load_benchmark_report
from mlflow.tracking import MlflowClient

FAST = {"validation.scenarios": [{"name": "steady", "kind": "steady"}]}  # one scenario: the flow in half the time


def _run(experiment: str) -> dict:
    from flows.optimize import optimize

    return optimize(candidate="configs/candidates/fake-batching.yaml", overrides=FAST, experiment=experiment)


@pytest.mark.slow  # heavy (CI runs it); keeps `-m "not slow"` near 5 min
def test_two_runs_compared_paired_and_unpaired(prefect_harness, mlflow_uri, in_repo: Path, capsys) -> None:
    from inferopt.compare.__main__ import main
    from inferopt.compare.core import PAIRED_TEST, compare_runs
    from inferopt.compare.runs import load_side
    from inferopt.compare.unpaired import MANN_WHITNEY

    a, b = _run("test-compare"), _run("test-compare")
    client = MlflowClient(tracking_uri=mlflow_uri)

    # the parent run reads on its own: verdict, reasons, a link to the report
    parent = client.get_run(a["run_id"])
    note = parent.data.tags["mlflow.note.content"]
    assert note.startswith(f"**VERDICT: {a['decision'].upper()}**")
    assert f"/runs/{a['run_id']}/artifacts/report.html" in note and a["reasons"][0].strip() in note
    children = client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{a['run_id']}'"
    )
    by_name = {c.info.run_name: c.info.run_id for c in children}
    assert {"1-measure", "4-ablate", "5-validate"} <= set(by_name)
    # a Benchmark Report per trial, logged and valid
    logged = [f.path for f in client.list_artifacts(by_name["4-ablate"], "benchmark_report")]
    assert "benchmark_report/candidate-ablation-1.json" in logged and len(logged) == 10  # 5 arms x 2 repeats
    measured = json.loads(
        (in_repo / a["run_id"] / "1-measure" / "benchmark_report" / "baseline-measure-0.json").read_text()
    )
    assert load_benchmark_report(measured).results.request_performance.aggregate.requests.total == 40

    # the second run's report ends beside the first (the previous run of its candidate); the first has none
    report_b = (in_repo / b["run_id"] / "report.html").read_text()
    assert f'<h2 id="compare">Compared with {a["run_id"][:8]}</h2>' in report_b
    assert "Headline metrics (B against A)" in report_b and "<b>paired</b>" in report_b
    assert 'id="compare"' not in (in_repo / a["run_id"] / "report.html").read_text()

    # paired: the same candidate and workload
    sa, sb = load_side(in_repo / a["run_id"]), load_side(in_repo / b["run_id"])
    assert sa.workload_hash and sa.workload_hash == sb.workload_hash
    paired = compare_runs(sa, sb)
    assert paired.pairing == "paired"
    cand = paired.metrics[paired.metrics["source"] == "ablate:candidate"].set_index("metric")
    assert (cand["test"] == PAIRED_TEST).all() and {"ttft_ms_p99", "output_tok_per_s"} <= set(cand.index)
    assert (
        cand.loc["ttft_ms_p99", "ratio_lo"] <= cand.loc["ttft_ms_p99", "ratio"] <= cand.loc["ttft_ms_p99", "ratio_hi"]
    )
    assert (paired.metrics[paired.metrics["source"] == "measure"]["test"].str.startswith("unpaired")).all()
    assert set(paired.verdicts["section"]) >= {"decision", "reasons", "ablate", "validate[steady]"}
    assert len(paired.slices) and set(paired.slices["slice_dim"]) >= {"all", "input_bucket"}
    # unpaired where the workloads differ, and said so
    other = compare_runs(sa, dataclasses.replace(sb, workload_hash="0000"))
    assert other.pairing == "unpaired" and "every test is unpaired" in other.pairing_reason
    tests = set(other.metrics[other.metrics["source"] == "ablate:candidate"]["test"])
    assert MANN_WHITNEY in tests and PAIRED_TEST not in tests

    # the command: the table printed, the comparison logged as its own run linking both
    capsys.readouterr()
    assert main([a["run_id"], b["run_id"], "--experiment", "test-compare"]) == 0
    out = capsys.readouterr().out
    assert f"B {b['run_id']}" in out and "paired: same workload" in out and "ablate:candidate" in out
    cmp_id = out.strip().splitlines()[-1].split()[3].rstrip(";")
    run = client.get_run(cmp_id)
    assert run.data.tags["inferopt.kind"] == "compare"
    assert run.data.tags["inferopt.compare.runs"] == f"{a['run_id']},{b['run_id']}"
    assert a["run_id"] in run.data.tags["mlflow.note.content"]
    files = {f.path for f in client.list_artifacts(cmp_id)}
    assert {"comparison.parquet", "comparison.md", "comparison.html", "slices.parquet", "verdicts.parquet"} <= files
    # a run that is not mirrored locally: its artifacts are downloaded into the same layout
    import shutil

    from tasks.compare import run_dir

    shutil.rmtree(in_repo / b["run_id"])
    fetched = load_side(run_dir(b["run_id"]))
    assert fetched.workload_hash == sb.workload_hash and len(fetched.trials) == len(sb.trials)
    assert fetched.decision == sb.decision and len(fetched.measure_phases) == 40
