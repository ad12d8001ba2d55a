"""The `tune` flow (flows/tune.py, deployment optimize/system) on the fake engine: one MLflow parent run with a
child per point and the baseline's, the points table, the frontier and the recommendation YAML, which loads and
passes the cheat lint `flows.optimize` applies; bad input exits 2 before Prefect or MLflow start."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from inferopt.config import (
    ConstantArrivals,
    FakeSystem,
    HardwareConfig,
    LengthConfig,
    SLOConfig,
    WorkloadConfig,
    load_config,
)
from inferopt.config.systems import BatchingKnobs

ROOT = Path(__file__).resolve().parents[2]


def write_inputs(tmp: Path) -> dict[str, str]:
    """A queue-bound fake system (batch size 1, ~110 req/s) under arrivals at 160 req/s, as YAML files."""
    configs = {
        "system": FakeSystem(
            name="fake-queue",
            context_ms=0.0,
            prefill_base_ms=5.0,
            prefill_ms_per_token=0.0,
            decode_step_ms=1.0,
            decode_ms_per_seq=0.5,
            batching=BatchingKnobs(max_batch_size=1, batch_wait_ms=0.0),
        ),
        "workload": WorkloadConfig(  # outputs of 2 or 3 tokens: not one fixed length (the cheat lint)
            name="queue",
            num_requests=40,
            arrival=ConstantArrivals(rate_per_s=160.0),
            lengths=LengthConfig(input_median=16, input_sigma=0, output_median=2, output_sigma=0.5, output_max=3),
        ),
        "slo": SLOConfig(name="test", ttft_p99_ms=500, tpot_p95_ms=50),
        "hardware": HardwareConfig(
            name="test-cpu",
            kind="cpu",
            peak_flops_per_s={"float32": 1e11},
            mem_bandwidth_bytes_per_s=1e10,
            memory_bytes=2**34,
            tdp_w=65,
            price_per_hour_usd=0.1,
        ),
    }
    tmp.mkdir(exist_ok=True)
    paths = {}
    for kind, cfg in configs.items():
        paths[kind] = str(tmp / f"{kind}.yaml")
        Path(paths[kind]).write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    return paths


@pytest.mark.slow  # ~60 s on the loaded 2-core box: three capacity searches, two duels, the logging; + the chain
def test_tune_flow_logs_every_point_and_the_recommendation(prefect_harness, mlflow_uri, in_repo, tmp_path) -> None:
    from flows.tune import tune
    from inferopt.verdict.lint import refuse_cheats

    paths = write_inputs(tmp_path / "in")
    result = tune(**paths, budget=3, capacity={"max_probes": 6, "rel_tol": 0.15}, experiment="test-tune")
    client = MlflowClient(tracking_uri=mlflow_uri)
    parent = client.get_run(result["run_id"])
    assert parent.info.status == "FINISHED" and parent.data.tags["inferopt.kind"] == "tune"
    assert parent.data.tags["inferopt.tune.decision"] == result["decision"] in ("winner", "tie"), result["message"]
    children = client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{result['run_id']}'"
    )
    by_name = {c.info.run_name: c for c in children}
    assert set(by_name) == {"1-measure", "2-locate", "3-propose", "point-00", "point-01", "point-02"}
    assert by_name["2-locate"].data.tags["inferopt.cause"] == "queueing"  # logged as the optimize flow does
    for name in ("point-00", "point-01", "point-02"):
        run = by_name[name]
        assert {"probes.parquet", "capacity_curve.png"} <= {a.path for a in client.list_artifacts(run.info.run_id)}
        assert run.data.metrics["capacity.req_per_s"] > 0 and run.data.tags["inferopt.point"]
    assert by_name["point-00"].data.tags["inferopt.point"] == "baseline"
    parent = client.get_run(result["run_id"])  # again: the chain's tags came after the search
    files = {a.path for a in client.list_artifacts(result["run_id"])}
    assert {"points.parquet", "points.csv", "frontier.png", "tune.json", "recommendation.yaml"} <= files
    # the simulator, fitted on the baseline's probes and judged on the other points' (inferopt.simulate)
    assert {"sim_error.parquet", "sim_error.png", "sim_cost_model.json", "sim_replica_plan.parquet"} <= files
    assert parent.data.tags["inferopt.sim.usable"] in ("true", "false")
    assert parent.data.metrics["sim.probes_held_back"] > 0 and "sim.median_rel_err.ttft_ms_p50" in parent.data.metrics
    mirror = in_repo / result["run_id"]
    import pandas as pd

    points = pd.read_parquet(mirror / "points.parquet")
    assert len(points) == 3 and points["capacity_req_per_s"].is_monotonic_decreasing
    cfg = load_config(mirror / "recommendation.yaml", kind="candidate")
    assert set(cfg.changes) == {"batching.max_batch_size"} and cfg.baseline.name == "fake-queue"
    refuse_cheats(cfg)  # what flows.optimize checks before it runs: it would take this candidate
    # the recommendation went through the chain: its own optimize run, whose verdict the tune's parent run holds
    chain = result["chain"]
    [judged] = chain["judged"]
    assert judged["decision"] in ("accept", "reject", "inconclusive") and judged["run_id"], judged
    assert chain["decision"] == ("proven" if judged["decision"] == "accept" else "not_proven"), chain
    assert parent.data.tags["inferopt.verdict"] == judged["decision"]
    assert parent.data.tags["inferopt.tune.chain"] == chain["decision"]
    verdict_run = client.get_run(judged["run_id"])
    assert verdict_run.data.tags["inferopt.tune_run_id"] == result["run_id"]
    assert verdict_run.data.tags["inferopt.verdict"] == judged["decision"]
    assert {"chain.json", "report.html"} <= files
    html = (mirror / "report.html").read_text()  # the frontier and the capacity of every point tried
    assert "frontier.png" in html and "capacity under the SLO, highest first" in html and "baseline" in html
    assert f"CHAIN: {chain['decision'].upper().replace('_', ' ')}" in html


def test_bad_input_exits_2_before_prefect_or_mlflow(in_repo, tmp_path, capsys) -> None:
    from flows.tune import main

    paths = write_inputs(tmp_path / "in")
    rest = ["--workload", paths["workload"], "--slo", paths["slo"], "--hardware", paths["hardware"]]
    cases = [
        ([paths["system"], *rest, "--budget", "1"], "max_trials=1"),
        ([paths["system"], *rest, "--space", "max_num_seqs=8,16"], "no field 'max_num_seqs'"),
        ([paths["system"], *rest, "--space", "batching.max_batch_size="], "empty search space"),
        ([paths["system"], *rest, "--capacity", "max_probe=3"], "unknown field(s) ['max_probe']"),
        ([paths["system"], *rest, "--capacity", "max_probes=1"], "too small to bracket"),
        ([paths["system"], *rest, "--capacity", "max_probes=many"], "fix: numbers"),
        ([paths["system"], *rest, "--control", "speculative_decoding"], "control arm 'speculative_decoding'"),
        ([paths["system"], *rest, "--set", "workload.arrival.rate_per_s=-3"], "workload"),
        ([paths["system"], *rest, "--set", "num_requests=16"], "prefix it with the file it sets"),
        ([paths["system"], *rest, "--set", "slo.ttft_p99_ms=oops"], "ttft_p99_ms"),
        ([paths["system"], *rest, "--judge", "-1"], "--judge -1"),
        ([paths["system"], *rest, "--dispatch", "workers", "--parallel", "0"], "--parallel 0"),
        ([paths["system"], *rest, "--set", "workload.seed"], "expected FIELD=VALUE"),
        (["configs/systems/openai-example.yaml", *rest], "the openai engine declares no knob space"),
        ([str(tmp_path / "missing.yaml"), *rest], "file not found"),
    ]
    for argv, words in cases:
        assert main(argv) == 2, argv
        assert words in capsys.readouterr().err, argv
    assert [p.name for p in in_repo.iterdir()] == ["in"]  # no results directory: nothing started


def test_the_deployment_is_optimize_system_with_loadable_defaults() -> None:
    from flows.tune import DEFAULT_HARDWARE, load_inputs, tune

    [dep] = [d for d in yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"] if d["name"] == "system"]
    assert dep["entrypoint"] == "flows/tune.py:tune" and tune.name == "optimize"  # -> optimize/system
    params = {k: str(ROOT / v) for k, v in dep["parameters"].items()}
    configs, budget, spaces = load_inputs(**params, hardware=str(ROOT / DEFAULT_HARDWARE))
    assert configs[0].engine == "hf" and budget.max_trials == 12 and spaces is None


def test_pruning_is_a_setting_of_the_search_off_by_default(in_repo, tmp_path, capsys) -> None:
    from flows.tune import load_inputs, main

    paths = write_inputs(tmp_path / "in")
    assert load_inputs(**paths, prune=True)[1].prune and not load_inputs(**paths)[1].prune
    rest = ["--workload", paths["workload"], "--slo", paths["slo"], "--hardware", paths["hardware"]]
    for flag in ("--prune", "--no-prune"):  # both spellings parse; the bad budget is what refuses
        assert main([paths["system"], *rest, flag, "--budget", "1"]) == 2
        assert "max_trials=1" in capsys.readouterr().err
