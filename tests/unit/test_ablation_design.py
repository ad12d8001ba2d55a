"""Issue 5 on the fake engine: arms from a candidate (one field each, the A/A arm), sequential stopping with
its looks and alpha, skipped vs failed, the A/A noise floor, and interactions of single changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inferopt.ablate.availability import unavailable_reason
from inferopt.ablate.plan import check_bootstrap_resolution, plan_arms
from inferopt.ablate.run import ablate, fresh_fake_noise
from inferopt.config import (
    AblationSettings,
    CandidateConfig,
    ConfigError,
    HFSystem,
    ModelSpec,
    changed_fields,
    load_config,
)
from inferopt.engines import make_engine

ROOT = Path(__file__).resolve().parents[2]
FAKE_BATCHING = ROOT / "configs/candidates/fake-batching.yaml"


def _fast(changes: dict, targets: list[str], base: dict | None = None, **ablation) -> CandidateConfig:
    """A fast fake candidate: batched (trials ~0.3 s), decode-dominated steps, 2 % noise, the small workload."""
    d = load_config(FAKE_BATCHING).model_dump()
    d["baseline"].update(
        {
            "decode_step_ms": 3.0,
            "decode_ms_per_seq": 0.0,
            "jitter_cv": 0.02,
            "batching": {"policy": "static", "max_batch_size": 8, "batch_wait_ms": 2.0, "max_queue": None},
            **(base or {}),
        }
    )
    d["workload"].update(num_requests=24)
    d["changes"] = changes
    d["target_metrics"] = targets
    d["ablation"] = {"repeats": 3, "bootstrap_samples": 2000, "aa_arm": False, **ablation}
    return CandidateConfig.model_validate(json.loads(json.dumps(d)))


# --------------------------------------------------------------------------- arms


def test_one_arm_per_change_each_moving_exactly_one_field() -> None:
    cand = load_config(FAKE_BATCHING)
    arms = plan_arms(cand)
    assert [a.name for a in arms] == [
        "baseline",
        "aa",
        "batching.max_batch_size",
        "batching.batch_wait_ms",
        "candidate",
    ]
    assert [a.role for a in arms] == ["baseline", "aa", "single", "single", "candidate"]
    moved = {a.name: set(changed_fields(cand.baseline, a.system)) for a in arms}
    assert moved["baseline"] == moved["aa"] == set()  # the A/A arm is the baseline system again
    assert moved["batching.max_batch_size"] == {"batching.max_batch_size"}
    assert moved["batching.batch_wait_ms"] == {"batching.batch_wait_ms"}
    assert moved["candidate"] == {"batching.max_batch_size", "batching.batch_wait_ms"}


def test_a_single_change_is_the_candidate_arm_not_a_duplicate() -> None:
    cand = load_config(FAKE_BATCHING, **{"changes": {"decode_step_ms": 3.0}, "ablation.aa_arm": False})
    assert [(a.name, a.role) for a in plan_arms(cand)] == [("baseline", "baseline"), ("candidate", "candidate")]


@pytest.mark.parametrize(
    "changes,needle",
    [
        (
            {"batching": {"max_batch_size": 8}},
            "moves 2 (batching.batch_wait_ms: 0.0 -> 5.0, batching.max_batch_size: 1 -> 8)",
        ),
        ({"batching": {"max_batch_size": 8, "batch_wait_ms": 0.0}, "batching.max_batch_size": 4}, "overlap"),
    ],
)
def test_a_change_that_is_not_one_field_is_refused_with_the_fields_named(changes, needle) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(FAKE_BATCHING, changes=changes)
    assert needle in str(err.value) and "fix:" in str(err.value)


def test_sequential_settings_validate_and_spend_alpha_over_looks() -> None:
    fixed = AblationSettings(repeats=3)
    assert fixed.look_repeats == (3,) and fixed.alpha_per_look == 0.05 and not fixed.sequential
    seq = AblationSettings(min_repeats=3, max_repeats=6, alpha=0.04)
    assert seq.look_repeats == (3, 4, 5, 6) and seq.alpha_per_look == pytest.approx(0.01)
    with pytest.raises(ValueError, match="min_repeats only applies"):
        AblationSettings(min_repeats=3)
    with pytest.raises(ValueError, match="exceeds max_repeats"):
        AblationSettings(min_repeats=5, max_repeats=4)
    with pytest.raises(ValueError, match="min_repeats >= 2"):
        AblationSettings(min_repeats=1, max_repeats=4)
    with pytest.raises(ValueError, match="bootstrap_samples >= "):
        check_bootstrap_resolution(AblationSettings(min_repeats=3, max_repeats=10, bootstrap_samples=500), n_metrics=6)


# --------------------------------------------------------------------------- sequential stopping


@pytest.mark.slow  # still run in CI; off the fast suite (~5 min): 7-10 s here
def test_sequential_stops_early_on_a_big_effect(tmp_path: Path) -> None:
    cand = _fast({"decode_step_ms": 6.0}, ["tpot_ms_p50"], min_repeats=3, max_repeats=6)
    res = ablate(cand, tmp_path, system_for_trial=fresh_fake_noise)
    s = res.stopping
    assert s["design"] == "sequential" and s["stopped_early"] and s["repeats_done"] < 6
    assert s["alpha_used"] == pytest.approx(0.05 / 4) and s["planned_looks"] == [3, 4, 5, 6]
    assert res.verdicts["candidate"].verdict == "regresses"
    assert set(res.trials["repeat"]) == set(range(s["repeats_done"]))  # nothing ran after the stop
    last = res.looks[res.looks["look"] == res.looks["look"].max()]
    assert last["stop"].all() and last["arm_decided"].all() and (last["alpha"] == s["alpha_used"]).all()


@pytest.mark.slow  # still run in CI; off the fast suite (~5 min): 7-10 s here
def test_sequential_stops_on_harm_when_the_targets_cannot_move(tmp_path: Path) -> None:
    # the target (failure rate, 0 in both arms) can never move; decode twice as slow is a regression beyond
    # tolerance at the first look, which settles the verdict: no more repeats are spent on it
    cand = _fast({"decode_step_ms": 6.0}, ["failure_rate"], min_repeats=3, max_repeats=6)
    res = ablate(cand, tmp_path, system_for_trial=fresh_fake_noise)
    s = res.stopping
    assert s["stopped_early"] and s["repeats_done"] == 3, s
    assert "regression beyond tolerance" in s["reason"] and "tpot_ms_p50" in s["reason"]
    assert res.verdicts["candidate"].verdict == "regresses"


@pytest.mark.slow  # ~10-20 s of real load: off the fast suite, still in CI
def test_sequential_runs_to_the_maximum_when_nothing_changes(tmp_path: Path) -> None:
    # a change with no effect on timing (the system's name): every look is undecided, the run goes to max
    cand = _fast({"name": "fake-renamed"}, ["tpot_ms_p50"], min_repeats=3, max_repeats=5, alpha=0.01)
    res = ablate(cand, tmp_path, system_for_trial=fresh_fake_noise)
    s = res.stopping
    assert s["repeats_done"] == 5 and not s["stopped_early"] and s["looks_taken"] == 3
    assert "max_repeats = 5 reached" in s["reason"]
    assert list(res.looks["repeats"]) == [3, 4, 5] and not res.looks["arm_decided"].any()
    assert res.verdicts["candidate"].verdict == "no detectable change"


# --------------------------------------------------------------------------- A/A, skipped, failed


@pytest.mark.slow  # still run in CI; off the fast suite (~5 min): ~10 s here
def test_aa_arm_reports_the_noise_floor(tmp_path: Path) -> None:
    cand = _fast({"decode_step_ms": 6.0}, ["tpot_ms_p50"], aa_arm=True, alpha=0.01)
    res = ablate(cand, tmp_path, system_for_trial=fresh_fake_noise)
    aa = res.effects[res.effects["arm"] == "aa"]
    # every latency metric's effect is reported, with its CI, and each per-trial resource the run measured
    from inferopt.ablate.compare import METRICS, RESOURCE_METRICS

    assert {m.name for m in METRICS} <= set(aa["metric"]) <= {m.name for m in METRICS + RESOURCE_METRICS}
    assert aa["diff_lo"].notna().all() and aa["mde"].notna().all() and aa["harm_p"].notna().all()
    log_scale = aa[aa["scale"] == "log"]
    assert log_scale["ratio_lo"].notna().all()  # a share that is 0 in the baseline has no ratio, only a difference
    assert not aa["harm"].any()
    assert res.verdicts["aa"].verdict == "no detectable change" and res.verdicts["aa"].role == "aa"
    assert res.verdicts["candidate"].verdict == "regresses"


@pytest.mark.slow  # still run in CI; off the fast suite (~5 min): ~9 s here
def test_noise_flagged_when_the_aa_arm_moves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import inferopt.ablate.run as run_mod

    def slow_aa(arm, trial):  # a planted "noisy machine": the A/A arm is systematically slower
        system = fresh_fake_noise(arm, trial)
        return system.model_copy(update={"decode_step_ms": 6.0}) if arm.name == "aa" else system

    res = run_mod.ablate(
        _fast({"prefill_base_ms": 0.5}, ["tpot_ms_p50"], aa_arm=True), tmp_path, system_for_trial=slow_aa
    )
    assert res.noise_suspicious and res.verdicts["aa"].verdict == "regresses"
    assert any("noise suspicious" in r for r in res.verdicts["candidate"].reasons)


def test_unavailable_option_is_skipped_and_a_crash_is_failed(tmp_path: Path) -> None:
    def engine(system):
        if system.decode_step_ms == 6.0:
            raise ModuleNotFoundError("No module named 'flash_attn' (planted)")
        if system.prefill_base_ms == 0.5:
            raise RuntimeError("CUDA error: an illegal memory access (planted)")
        return make_engine(system)

    cand = _fast({"decode_step_ms": 6.0, "prefill_base_ms": 0.5}, ["tpot_ms_p50"], repeats=2, bootstrap_samples=500)
    res = ablate(cand, tmp_path, engine_factory=engine)
    v = res.verdicts
    assert v["decode_step_ms"].verdict == "skipped" and "flash_attn" in v["decode_step_ms"].reasons[0]
    assert v["decode_step_ms"].error is None and "decode_step_ms" in res.skipped
    assert v["prefill_base_ms"].verdict == "failed" and "illegal memory access" in v["prefill_base_ms"].error
    assert v["candidate"].verdict == "skipped"  # it carries the unavailable option too
    tried = res.trials.groupby("arm").size().to_dict()
    assert tried == {"baseline": 2, "decode_step_ms": 1, "prefill_base_ms": 1, "candidate": 1}  # not retried
    assert res.trials.loc[res.trials["arm"] == "decode_step_ms", "failed_at"].item() == "start"


def test_gpu_only_options_are_known_unavailable_before_running() -> None:
    spec = ModelSpec(path="builtin:tiny-llama")
    assert unavailable_reason(HFSystem(model=spec, attn_implementation="sdpa", device="cpu")) is None
    reason = unavailable_reason(HFSystem(model=spec, attn_implementation="flash_attention_2", device="cpu"))
    assert reason and "GPU-only" in reason
    import torch

    if not torch.cuda.is_available():
        assert "no CUDA device" in unavailable_reason(HFSystem(model=spec, device="cuda"))


def test_statically_unavailable_arm_never_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import inferopt.ablate.run as run_mod

    monkeypatch.setattr(
        run_mod,
        "unavailable_reason",
        lambda s: "needs a GPU (planted)" if getattr(s, "decode_step_ms", None) == 6.0 else None,
    )
    res = run_mod.ablate(_fast({"decode_step_ms": 6.0}, ["tpot_ms_p50"], repeats=2, bootstrap_samples=500), tmp_path)
    v = res.verdicts["candidate"]
    assert (v.verdict, v.reasons) == ("skipped", ("skipped: needs a GPU (planted)",))
    assert set(res.trials["arm"]) == {"baseline"}


# --------------------------------------------------------------------------- interaction


@pytest.mark.slow  # ~10-20 s of real load: off the fast suite, still in CI
def test_interaction_flagged_when_gains_do_not_multiply(tmp_path: Path) -> None:
    # TPOT = decode_step_ms + decode_ms_per_seq x live: each change alone cuts one term (x0.6 or so), both
    # together cut both — an additive model in ms, so the combined ratio is far below the product of the two
    # 5 repeats: with 3, the single arms' p-values sit at 0.02-0.05 on a loaded box (asyncio sleeps overshoot)
    cand = _fast(
        {"decode_step_ms": 0.3, "decode_ms_per_seq": 0.05}, ["tpot_ms_p50"], base={"decode_ms_per_seq": 0.5}, repeats=5
    )
    res = ablate(cand, tmp_path, system_for_trial=fresh_fake_noise)
    assert res.verdicts["decode_step_ms"].verdict == res.verdicts["decode_ms_per_seq"].verdict == "improves"
    row = res.interactions.set_index("metric").loc["tpot_ms_p50"]
    assert row["triggered"] and row["flagged"] and row["interaction_hi"] < 1.0
    assert row["observed_ratio"] < row["predicted_ratio"]
    assert any(r.startswith("interaction on tpot_ms_p50") for r in res.verdicts["candidate"].reasons)
