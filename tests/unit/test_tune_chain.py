"""After the search (issue 14): the final word over the judged points (`verdict.tuned.chain_outcome`), the
search's report (`report.tune_report`: the frontier, the capacity of every point, the chain's verdicts) and the
pre-run check of the search's inputs (`precheck.check_tune`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from inferopt.config import ConfigError
from inferopt.config.precheck import check_tune
from inferopt.report.rundir import RunData, StepData
from inferopt.report.tune_report import build_tune_report
from inferopt.verdict.tuned import Judged, chain_outcome

ROOT = Path(__file__).resolve().parents[2]
PATHS = {
    "system": ROOT / "configs/systems/fake.yaml",
    "workload": ROOT / "configs/workloads/fake-small.yaml",
    "slo": ROOT / "configs/slo/fake.yaml",
    "hardware": ROOT / "configs/hardware/cpu.yaml",
}


def test_the_first_accepted_point_is_the_proven_change():
    rec = Judged("batch=8", "rec.yaml", "reject", ("REJECT: ablation regresses",), "run-a")
    tie = Judged("batch=16", "c.yaml", "accept", ("ACCEPT",), "run-b")
    out = chain_outcome("tie", [rec, tie])
    assert out.decision == "proven" and out.proven is tie
    assert "the search's first pick batch=8 was not accepted" in out.message and "REJECT" in out.message
    assert out.to_dict()["verdict_run_id"] == "run-b"


def test_none_accepted_is_not_proven_and_nothing_judged_keeps_the_search_answer():
    out = chain_outcome("winner", [Judged("batch=8", "r.yaml", "refused", ("cheat: single request",))])
    assert out.decision == "not_proven" and out.proven is None and "REFUSED (cheat: single request)" in out.message
    none = chain_outcome("no_change_helps", [])
    assert none.decision == "nothing_to_judge" and "no_change_helps" in none.message


def test_the_search_report_shows_the_frontier_every_point_and_the_chain():
    points = pd.DataFrame(
        [
            {"point": 1, "label": "batching.max_batch_size=8", "proposal": "batch_size", "capacity_req_per_s": 400.0},
            {"point": 0, "label": "baseline", "proposal": "baseline", "capacity_req_per_s": 100.0},
        ]
    )
    chain = chain_outcome("winner", [Judged("batching.max_batch_size=8", "r.yaml", "accept", ("ACCEPT",), "run-9")])
    run = RunData(
        run_id="abc",
        docs={"tune": {"decision": "winner", "message": "raises capacity", "evidence": ["duel: passed 2/2"]}},
        top=StepData("abc", tables={"points": points}, figures={"frontier.png": b"\x89PNG fake"}),
    )
    run.docs["chain"] = chain.to_dict()
    html = build_tune_report(run)
    assert "SEARCH: WINNER · CHAIN: PROVEN" in html and "run-9" in html and "duel: passed 2/2" in html
    assert html.index("batching.max_batch_size=8") < html.index(">baseline<")  # highest capacity first
    assert 'alt="frontier.png"' in html and "capacity under the SLO, highest first" in html
    empty = build_tune_report(RunData(run_id="x"))  # a search that stopped early: says what is missing
    assert "no configuration was tried" in empty and "No point went through the chain" in empty


def test_the_search_report_shows_the_pruned_grid_predicted_beside_measured():
    grid = pd.DataFrame(
        [
            {"point": 0, "label": "baseline", "kind": "measured", "predicted_capacity_req_per_s": 100.0},
            {"point": 1, "label": "batching.max_queue=4", "kind": "predicted", "predicted_capacity_req_per_s": 90.0},
        ]
    )
    summary = {"decision": "winner", "message": "m"}
    summary["pruning"] = {"trials_real": 1, "trials_full_grid": 2, "trials_saved": 1, "sim_top": "batching.max_queue=4"}
    summary["pruning"] |= {"measured_top": None, "sim_top_is_measured_top": None, "message": "measure 1 of 2 points"}
    html = build_tune_report(RunData("p", docs={"tune": summary}, top=StepData("p", tables={"points_predicted": grid})))
    assert "Pruned by the simulator" in html and "1 real trials of a 2-point grid (saved 1)" in html
    assert "kind=predicted is the simulator" in html and ">predicted<" in html and "measure 1 of 2 points" in html
    assert "Pruned by the simulator" not in build_tune_report(RunData("q", docs={"tune": {"decision": "winner"}}))


def test_the_search_inputs_are_checked_as_a_candidate_and_overrides_name_their_file():
    cfg = check_tune(PATHS, {"workload.num_requests": 8, "slo.ttft_p99_ms": 300})
    assert cfg.workload.num_requests == 8 and cfg.slo.ttft_p99_ms == 300 and cfg.baseline.engine == "fake"
    with pytest.raises(ConfigError, match=r"--set workload\.arrival\.rate_per_s.*more than a day"):
        check_tune(PATHS, {"workload.arrival.rate_per_s": 1e-6})
    with pytest.raises(ConfigError, match=r"prefix it with the file it sets"):
        check_tune(PATHS, {"num_requests": 8})
    gpu = {**PATHS, "system": ROOT / "configs/systems/hf-tiny.yaml", "hardware": ROOT / "configs/hardware/l4.yaml"}
    with pytest.raises(ConfigError, match=r"describes a gpu, but the baseline system runs on device: cpu"):
        check_tune(gpu)
