"""The verdict: `decide` with every step passing accepts; each step failing in turn gives its decision and names
its reason first; `judge` composes evidence, the cheat lint and `decide` over a real fake-engine run, no Prefect."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from step_results import CHOICE, STEADY, arm, gate, passing_steps

from inferopt.config import load_config
from inferopt.verdict import judge
from inferopt.verdict.decide import ACCEPT_LINE, decide
from inferopt.verdict.lint import Finding

ROOT = Path(__file__).resolve().parents[2]
FAILED_STEADY = dataclasses.replace(STEADY, passed=False, reasons=("TTFT p99 450.0 ms > 200 ms: FAIL",))
REFUSED = Finding("dropped_failures", "refuse", "3 sent, 2 records", {"check": "records_missing"})


def test_every_step_passing_accepts_with_every_steps_reasons() -> None:
    v = decide(**passing_steps())
    assert v.decision == "accept" and v.reasons[0] == ACCEPT_LINE and v.warnings == ()
    assert v.reasons[1:] == (
        "locate: dominant cause 'queueing'",
        "ablate: candidate improves",
        "  ttft_ms_p99: 500 -> 50 ms (x0.100, better)",
        "validate[steady]: pass",
        "  TTFT p99 60.0 ms <= 200 ms: ok",
        "gate quality: pass",
        "  sliced suite: pass",
        "gate cost: pass",
        "  cost per successful task: not more expensive",
        "lint (V4 benchmark cheats): clean",
    )


@pytest.mark.parametrize(
    ("step", "failing", "decision", "head"),
    [
        ("ablation", arm("failed", "candidate arm failed: CUDA OOM"), "reject", "REJECT because: ablation: failed"),
        ("ablation", arm("regresses"), "reject", "REJECT because: ablation: regresses"),
        (
            "ablation",
            arm("no detectable change"),
            "inconclusive",
            "INCONCLUSIVE because: ablation: no detectable change",
        ),
        ("ablation", arm("skipped", "skipped: GPU-only"), "inconclusive", "INCONCLUSIVE because: ablation: skipped"),
        ("scenarios", [STEADY, FAILED_STEADY], "reject", "REJECT because: validation scenario 'steady' misses the SLO"),
        ("scenarios", [], "inconclusive", "INCONCLUSIVE because: validation: no scenario ran"),
        ("gate", gate(quality_status="fail"), "reject", "REJECT because: quality gate failed"),
        (
            "gate",
            gate(quality_status="skipped", quality_required=True),
            "inconclusive",
            "INCONCLUSIVE because: quality gate required but skipped",
        ),
        (
            "gate",
            gate(quality_status="inconclusive"),
            "inconclusive",
            "INCONCLUSIVE because: quality: some slice's interval straddles the margin",
        ),
        ("gate", gate(cost_status="fail"), "reject", "REJECT because: cost per successful task is worse"),
        ("gate", gate(cost_status="skipped"), "inconclusive", "INCONCLUSIVE because: cost not measured"),
    ],
)
def test_one_failing_step_decides_and_is_named_first(step: str, failing, decision: str, head: str) -> None:
    v = decide(**passing_steps(**{step: failing}))
    assert v.decision == decision
    assert v.reasons[0].startswith(head), v.reasons[0]


def test_the_failing_steps_own_reasons_are_kept() -> None:
    v = decide(**passing_steps(scenarios=[FAILED_STEADY], ablation=arm("failed", "candidate arm failed: CUDA OOM")))
    assert v.reasons[0] == "REJECT because: ablation: failed; validation scenario 'steady' misses the SLO"
    assert "  candidate arm failed: CUDA OOM" in v.reasons
    i = v.reasons.index("validate[steady]: FAIL")
    assert v.reasons[i + 1] == "  TTFT p99 450.0 ms > 200 ms: FAIL"


def test_a_skipped_quality_gate_that_is_not_required_does_not_block() -> None:
    assert decide(**passing_steps(gate=gate(quality_status="skipped"))).decision == "accept"


def test_a_reject_outranks_an_open_question() -> None:
    v = decide(**passing_steps(ablation=arm("no detectable change"), gate=gate(cost_status="fail")))
    assert v.decision == "reject" and v.reasons[0] == "REJECT because: cost per successful task is worse"


def test_a_post_run_cheat_leaves_the_verdict_open_and_warns() -> None:
    v = decide(**passing_steps(), lint=[REFUSED])
    assert v.decision == "inconclusive"
    assert v.reasons[0] == "INCONCLUSIVE because: benchmark cheat(s) dropped_failures found after the run (SPEC V4)"
    assert v.warnings == ("benchmark cheat dropped_failures (refused): 3 sent, 2 records",)


def test_a_choice_mismatch_warns_and_decides_nothing() -> None:
    mismatch = dataclasses.replace(CHOICE, matches=False, warning="WARNING: REMEDY DOES NOT MATCH THE CAUSE")
    v = decide(**passing_steps(choice=mismatch))
    assert v.decision == "accept" and v.warnings == ("WARNING: REMEDY DOES NOT MATCH THE CAUSE",)


def test_verdict_json_is_a_plain_document() -> None:
    doc = json.loads(json.dumps(decide(**passing_steps(), lint=[REFUSED]).to_dict()))
    assert list(doc) == ["decision", "reasons", "warnings", "evidence", "lint"]
    assert doc["decision"] == "inconclusive" and isinstance(doc["reasons"], list)
    assert doc["lint"] == [dataclasses.asdict(REFUSED)]


# --------------------------------------------------------------------------- judge: the whole composition


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory):
    """Steps 1-6 of the fake candidate run in-process (the gate with the fake engine: no suite, no drift)."""
    from inferopt.ablate import ablate
    from inferopt.ablate.run import fresh_fake_noise
    from inferopt.choose import choose
    from inferopt.gate import gate as run_gate
    from inferopt.locate import locate_step
    from inferopt.measure import measure
    from inferopt.validate import validate_candidate

    tmp = tmp_path_factory.mktemp("judge")
    cfg = load_config(
        ROOT / "configs/candidates/fake-batching.yaml",
        kind="candidate",
        **{"workload.num_requests": 24, "ablation.num_requests": 24},
    )
    measured = measure(cfg, tmp / "m")
    located = locate_step(cfg, measured.phases)
    choice = choose(located.diagnosis.cause, dict(cfg.changes))
    ablation = ablate(cfg, tmp / "a", system_for_trial=fresh_fake_noise)
    scenarios = validate_candidate(cfg, tmp / "v")
    return cfg, measured, located, choice, ablation, scenarios, run_gate(cfg, ablation, located, choice)


def test_judge_lints_decides_and_fills_the_parent_run(fake_run) -> None:
    cfg, measured, located, choice, ablation, scenarios, gate_result = fake_run
    arms = [a.name for a in ablation.arms]
    res = judge(cfg, measured, located, choice, ablation, scenarios, gate_result, logged_arms=arms)
    expected = decide(
        diagnosis=located.diagnosis,
        choice=choice,
        ablation=ablation.verdicts["candidate"],
        scenarios=[dataclasses.replace(STEADY, **_scenario(s)) for s in scenarios],
        gate=gate_result,
        lint=res.findings,
    )
    assert (res.verdict.decision, res.verdict.reasons) == (expected.decision, expected.reasons)
    assert [(f.cheat, f.severity) for f in res.findings] == [("fixed_outputs", "note")]  # the fake engine's note
    assert res.lint["status"] == "clean" and res.lint["logged_arms"] == sorted(arms)
    ev = res.verdict.evidence
    assert list(ev) == ["measure", "locate", "choose", "ablate", "validate", "gate"]
    assert ev["locate"]["cause"] == located.diagnosis.cause and set(ev["validate"]) == {"steady", "burst"}
    assert res.parent_tags["inferopt.verdict"] == res.verdict.decision
    assert res.parent_tags["inferopt.arm_verdict"] == ablation.verdicts["candidate"].verdict
    assert res.parent_metrics["baseline.requests"] == 24 and "ratio.ttft_ms_p99" in res.parent_metrics
    assert "steady.ttft_ms_p99" in res.parent_metrics and "steady.ttft_ms_p95" not in res.parent_metrics


def test_judge_never_accepts_when_an_arm_was_not_logged(fake_run) -> None:
    cfg, measured, located, choice, ablation, scenarios, gate_result = fake_run
    res = judge(cfg, measured, located, choice, ablation, scenarios, gate_result, logged_arms=["baseline", "candidate"])
    assert res.lint["status"] == "refused" and res.lint["cheats"]["refuse"] == ["best_only"]
    assert res.verdict.decision != "accept"
    assert any("benchmark cheat best_only (refused)" in w for w in res.verdict.warnings)


def _scenario(s) -> dict:
    return {"name": s.scenario.name, "kind": s.scenario.kind, "passed": s.passed, "reasons": tuple(s.reasons)}
