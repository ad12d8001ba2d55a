"""The planted cases of `benchmarks/tune_planted.py` (configs/tune_planted/): each loads, names a cause the locate
step can return and right levers that its engine declares a knob space for (so the search can find them), and
the benchmark's per-case judgement reads a search's result as the figures say; one fake case end to end (slow)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from inferopt.choose.remedies import CATALOGUE
from inferopt.config.knob_spaces import KNOB_SPACES
from inferopt.locate.bottleneck import CAUSES

ROOT = Path(__file__).resolve().parents[2]
CASES = sorted((ROOT / "configs/tune_planted").rglob("*.yaml"))  # the vLLM cases in vllm/ too


def _bench():
    spec = importlib.util.spec_from_file_location("tune_planted", ROOT / "benchmarks/tune_planted.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["tune_planted"] = mod
    spec.loader.exec_module(mod)
    return mod


BENCH = _bench()


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_each_planted_case_loads_and_its_right_levers_are_searchable(path: Path):
    case = BENCH.load_case(path)
    assert case.cause in CAUSES and case.cause != "none"
    remedies = {r.name: r for r in CATALOGUE}
    declared = {s.remedy for s in KNOB_SPACES[case.system.engine]}
    for lever in case.levers:
        assert lever in declared, f"{path.name}: {lever} has no knob space on {case.system.engine}"
        assert case.cause in remedies[lever].targets, f"{path.name}: {lever} does not serve {case.cause}"
    assert case.budget.max_trials >= 2


def test_the_benchmark_has_the_issues_keys_and_one_row_per_case():
    rows = [
        {"case": "a", "right": True, "capacity_gain": 2.0, "trials": 4, "located": True, "duel_backed": True},
        {"case": "b", "right": False, "capacity_gain": None, "trials": 3, "located": False, "duel_backed": False},
    ]
    rows[1]["repeat_agrees"] = False
    out = BENCH.summary(rows)
    assert {"cases", "right_levers", "capacity_gain", "trials", "repeat_agrees"} <= set(out)
    assert out["cases"] == 2 and out["right_levers"] == 1 and out["repeat_agrees"] is False
    assert out["capacity_gain"] == {"a": 2.0, "b": None} and set(out["per_case"]) == {"a", "b"}
    assert BENCH.same_recommendation(("winner", "batch=16"), ("tie", "batch=16"))
    assert not BENCH.same_recommendation(("winner", "batch=16"), ("tie", "batch=8"))
    assert BENCH.same_recommendation(("no_change_helps", None), ("no_change_helps", None))
    assert not BENCH.same_recommendation(("no_change_helps", None), ("tie", "batch=8"))


def test_the_pruning_figures_per_case_and_over_all():
    rows = [
        {"case": "a", "trials_full": 12, "trials_pruned": 4, "same_pick": True, "pruned_share": 0.333},
        {"case": "b", "trials_full": 4, "trials_pruned": 4, "same_pick": True, "pruned_share": 1.0},
        {"case": "c"},  # run with --no-prune-compare: not counted
    ]
    for x in rows[:2]:
        x["prune_accepted"] = x["same_pick"] and x["trials_pruned"] <= BENCH.PRUNED_SHARE * x["trials_full"]
    out = BENCH.prune_summary(rows)
    assert out["trials_pruned"] == {"a": 4, "b": 4, "all": 8} and out["trials_full"] == {"a": 12, "b": 4, "all": 16}
    assert out["same_pick"] == {"a": True, "b": True, "all": True} and out["pruned_share"]["all"] == 0.5
    assert out["prune_accepted"] == {"a": True, "b": False, "all": False}
    assert BENCH.prune_summary([{"case": "c"}]) == {}


@pytest.mark.slow  # ~40 s: the fake queue-bound case through the whole search (7 capacity searches, 2 duels)
def test_the_fake_queue_bound_case_gets_a_larger_batch(tmp_path):
    case = BENCH.load_case(ROOT / "configs/tune_planted/queue-bound.yaml")
    row, r = BENCH.run_case(case, tmp_path)
    assert row["located"] and row["proposed_serve_cause"], row
    assert row["right"] and row["recommended_lever"] == "batch_size" and row["duel_backed"], row["message"]
    assert row["capacity_gain"] > 1.0 and row["trials"] == len(r.points) == case.budget.max_trials
