"""The pieces behind arms on workers and the nightly check, without Prefect or MLflow: a trial saved as plain
files loads back equal; missing worker results become failed trials that say why; the nightly comparison
flags a planted slowdown, a crash and more failed requests, passes an unchanged system, and refuses to judge
from fewer than two repeats."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from inferopt.ablate.dispatch import PrecomputedTrials, load_run, save_run, trial_config, trial_dir
from inferopt.ablate.plan import Trial
from inferopt.ablate.regression import ACCEPTED, TONIGHT, compare_to_accepted
from inferopt.config import load_config
from inferopt.measure.runner import RunTags
from inferopt.measure.session import MeasuredRun
from inferopt.records import RequestRecord


def _phases(rng: np.random.Generator, scale: float, n: int = 60, failed: int = 0) -> pd.DataFrame:
    ttft = rng.lognormal(np.log(40 * scale), 0.2, n)
    tpot = rng.lognormal(np.log(3 * scale), 0.1, n)
    out = np.full(n, 8)
    outcome = np.array(["ok"] * (n - failed) + ["timeout"] * failed)
    return pd.DataFrame(
        {"outcome": outcome, "ttft_ms": ttft, "tpot_ms": tpot, "e2e_ms": ttft + 7 * tpot, "output_len": out}
    )


def _trials(arm: str, scale: float, repeats: int, seed: int, failed_requests: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        [
            {
                "arm": arm,
                "repeat": r,
                "duration_s": 0.5 * scale * rng.lognormal(0, 0.02),
                "failed": False,
                "phases": _phases(rng, scale * rng.lognormal(0, 0.02), failed=failed_requests),
            }
            for r in range(repeats)
        ]
    )


def test_unchanged_passes_and_planted_slowdown_is_a_regression() -> None:
    accepted = _trials(ACCEPTED, 1.0, 4, seed=1)
    same = compare_to_accepted(accepted, _trials(TONIGHT, 1.0, 4, seed=2))
    assert not same.regressed and same.reasons == [] and same.n_pairs == 4
    slow = compare_to_accepted(accepted, _trials(TONIGHT, 1.5, 4, seed=3))
    assert slow.regressed
    flagged = set(slow.effects.loc[slow.effects["regression"], "metric"])
    assert {"ttft_ms_p50", "tpot_ms_p50", "output_tok_per_s"} <= flagged
    # the same slowdown inside a 60 % tolerance is not loud: significant but within what the team accepts
    assert not compare_to_accepted(accepted, _trials(TONIGHT, 1.5, 4, seed=3), tolerance=0.6).regressed


def test_crash_and_failed_requests_are_regressions_and_one_repeat_is_refused() -> None:
    accepted = _trials(ACCEPTED, 1.0, 3, seed=1)
    tonight = _trials(TONIGHT, 1.0, 3, seed=2)
    tonight.loc[2, "failed"] = True
    crash = compare_to_accepted(accepted, tonight)
    assert crash.regressed and any("crashed" in r for r in crash.reasons)
    errors = compare_to_accepted(accepted, _trials(TONIGHT, 1.0, 3, seed=2, failed_requests=12))
    assert any(r.startswith("failed requests") for r in errors.reasons)
    with pytest.raises(ValueError, match="needs >= 2"):
        compare_to_accepted(accepted, _trials(TONIGHT, 1.0, 1, seed=2))


def test_trial_files_round_trip_and_missing_results_fail_with_the_reason(tmp_path) -> None:
    rec = RequestRecord(request_id="r1", outcome="ok", input_len=4, output_len=2, token_s=[1.0, 2.0], arm="candidate")
    run = MeasuredRun(
        tags=RunTags(run_tag="p", arm="candidate", trial=1, scenario="ablation"),
        records=[rec],
        phases=_phases(np.random.default_rng(0), 1.0, n=5),
        duration_s=1.25,
        engine_info={"engine": "fake"},
        warmup_declared=2,
        join={"kind": "none"},
    )
    save_run(run, trial_dir(tmp_path / "candidate", 1))
    back = load_run(trial_dir(tmp_path / "candidate", 1))
    assert back.tags == run.tags and back.duration_s == 1.25 and back.warmup_declared == 2
    assert back.records[0].token_s == [1.0, 2.0] and back.engine_info == {"engine": "fake"}
    pd.testing.assert_frame_equal(back.phases, run.phases)

    trials = PrecomputedTrials({"candidate": tmp_path / "candidate"}, missing={"baseline": "flow run X ended CRASHED"})
    assert trials(Trial(0, 1, "candidate"), run.tags).duration_s == 1.25
    lost = trials(Trial(1, 0, "baseline"), RunTags(arm="baseline"))
    assert lost.failed and "flow run X ended CRASHED" in lost.error
    assert trials(Trial(2, 0, "candidate"), RunTags(arm="candidate")).failed  # the worker never saved repeat 0


def test_trial_config_loads_a_resolved_dump_without_the_sections_a_trial_does_not_need() -> None:
    cfg = load_config("configs/candidates/fake-batching.yaml", kind="candidate")
    dump = cfg.model_dump(mode="json")
    dump["validation"] = {"not": "a field of any version"}  # a run logged by another version
    back = trial_config(dump)
    assert back.candidate_system == cfg.candidate_system and back.workload == cfg.workload


def test_the_nightly_says_when_it_cannot_see_a_regression_of_the_tolerance() -> None:
    # two pairs: Holm over every metric at df = 1 can never reject, so "no regression" would mean nothing
    few = compare_to_accepted(_trials(ACCEPTED, 1.0, 2, seed=1), _trials(TONIGHT, 1.0, 2, seed=2))
    assert not few.regressed and few.underpowered
    assert all(line.startswith("underpowered: cannot detect a regression of 5%") for line in few.underpowered)
    # it says how many repeats would do, and that many do: TPOT's spread here needs ~13-14
    some = compare_to_accepted(_trials(ACCEPTED, 1.0, 12, seed=1), _trials(TONIGHT, 1.0, 12, seed=2))
    tpot = next(line for line in some.underpowered if " tpot_ms_p50 " in line)
    need = int(tpot.rsplit("repeats >= ", 1)[1])
    assert 12 < need <= 30
    enough = compare_to_accepted(_trials(ACCEPTED, 1.0, 30, seed=1), _trials(TONIGHT, 1.0, 30, seed=2))
    assert not any(" tpot_ms_p50 " in line for line in enough.underpowered)
