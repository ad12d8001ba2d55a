"""Ablation on the fake engine: interleaved seeded order, effects with CIs, a crashing arm marked failed
while the run goes on (and the verdict logic on top)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from step_results import arm, gate, passing_steps

from inferopt.ablate.plan import interleaved_order, plan_arms
from inferopt.ablate.run import ablate
from inferopt.config import load_config
from inferopt.engines import make_engine
from inferopt.verdict.decide import decide

ROOT = Path(__file__).resolve().parents[2]


def _candidate(**overrides):
    return load_config(ROOT / "configs/candidates/fake-batching.yaml", **overrides)


def test_interleaved_order_is_seeded_and_balanced() -> None:
    a = interleaved_order(["baseline", "candidate"], 6, seed=1)
    assert a == interleaved_order(["baseline", "candidate"], 6, seed=1)
    assert a != interleaved_order(["baseline", "candidate"], 6, seed=2)
    for rep in range(6):
        assert sorted(t.arm for t in a if t.repeat == rep) == ["baseline", "candidate"]
    firsts = {t.arm for t in a if t.order % 2 == 0}
    assert firsts == {"baseline", "candidate"}  # neither arm always goes first


def test_arms_differ_only_in_the_changes() -> None:
    cand = _candidate()
    arms = {a.name: a for a in plan_arms(cand)}
    base, arm = arms["baseline"], arms["candidate"]
    diff = {k for k, v in base.system.model_dump().items() if arm.system.model_dump()[k] != v}
    assert diff == {"batching"}


@pytest.mark.slow  # ~10-20 s of real load: off the fast suite, still in CI
def test_batching_helps_queue_bound_fake_load(tmp_path: Path) -> None:
    res = ablate(_candidate(**{"ablation.repeats": 3}), tmp_path)
    eff = res.effects[res.effects["arm"] == "candidate"].set_index("metric")  # effects hold every arm (A/A too)
    assert eff.loc["ttft_ms_p99", "direction"] == "better"
    assert eff.loc["ttft_ms_p99", "diff_hi"] < 0  # the CI of the difference excludes 0
    assert eff.loc["output_tok_per_s", "ratio"] > 1
    assert res.verdicts["candidate"].verdict == "improves"
    # no assertion on interactions here: whether the no-op batch_wait_ms arm crosses significance is a
    # ~alpha-rate event on a timing-noisy fake (a fresh CI run hit it); tests/unit/test_ablation_design.py
    # plants interactions deterministically.
    assert set(res.verdicts) == {"aa", "batching.max_batch_size", "batching.batch_wait_ms", "candidate"}
    n_trials = len(res.arms) * 3
    assert (tmp_path / "requests.jsonl").read_text().count("\n") == n_trials * (40 + 2)  # trials x (requests + warm-up)


def test_crashing_arm_is_marked_failed_and_run_goes_on(tmp_path: Path) -> None:
    def flaky(system):
        if system.batching.max_batch_size == 8:
            raise RuntimeError("CUDA error: out of memory (planted)")
        return make_engine(system)

    res = ablate(_candidate(), tmp_path, engine_factory=flaky)
    assert res.verdicts["candidate"].verdict == "failed"
    assert "out of memory (planted)" in res.verdicts["candidate"].reasons[0]
    ok_trials = res.trials[~res.trials["failed"]]
    assert set(ok_trials["arm"]) == {"baseline", "aa", "batching.batch_wait_ms"} and len(ok_trials) == 6
    assert res.verdicts["batching.max_batch_size"].verdict == "failed"  # the arm that carries the crash
    assert res.verdicts["batching.batch_wait_ms"].verdict != "failed"  # the other single change still ran
    assert res.crashed("candidate") and res.crashed("batching.max_batch_size") and not res.crashed("baseline")
    v = decide(**passing_steps(ablation=res.verdicts["candidate"]))
    assert v.decision == "reject"


@pytest.mark.parametrize(
    "ablation,scen,quality,required,cost,expected",
    [
        ("improves", True, "pass", False, "pass", "accept"),
        ("improves", False, "pass", False, "pass", "reject"),
        ("improves", True, "fail", False, "pass", "reject"),
        ("improves", True, "skipped", True, "pass", "inconclusive"),
        ("no detectable change", True, "pass", False, "pass", "inconclusive"),
        ("regresses", True, "pass", False, "pass", "reject"),
        ("improves", True, "pass", False, "fail", "reject"),
    ],
)
def test_verdict_rules(ablation, scen, quality, required, cost, expected) -> None:
    v = decide(
        **passing_steps(
            choice=dataclasses.replace(passing_steps()["choice"], warning="w"),
            ablation=arm(ablation),
            scenarios=[dataclasses.replace(passing_steps()["scenarios"][0], passed=scen)],
            gate=gate(quality_status=quality, quality_required=required, cost_status=cost),
        )
    )
    assert v.decision == expected
    assert v.warnings == ("w",) and v.reasons
