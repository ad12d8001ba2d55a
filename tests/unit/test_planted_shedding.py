"""Issue 13's planted cheat through the real ablation on the fake engine (configs/systems/fake.yaml): an arm
that bounds its queue sheds the requests that would have waited longest (the slowest), so over its served
requests alone its TTFT p99 looks faster. The ablation must call it worse: every failed request is censored at
the deadline, and the failure rate is a primary harm hypothesis."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from inferopt.ablate.run import ablate, fresh_fake_noise
from inferopt.config import CandidateConfig, load_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # ~10-20 s of real load: off the fast suite, still in CI
def test_an_arm_that_sheds_its_slowest_requests_is_reported_worse_not_faster(tmp_path: Path) -> None:
    d = load_config(ROOT / "configs/candidates/fake-batching.yaml").model_dump()
    d["changes"] = {"batching.max_queue": 3}  # the baseline queues without bound at batch 1
    d["target_metrics"] = ["ttft_ms_p99"]  # what the shedding claims to improve
    d["workload"]["arrival"] = {"kind": "poisson", "rate_per_s": 60.0}
    # 5 repeats: at 3 the one-sided failure-rate test fell short of power once under load
    d["ablation"] = {"repeats": 5, "aa_arm": False}
    res = ablate(CandidateConfig.model_validate(json.loads(json.dumps(d))), tmp_path, system_for_trial=fresh_fake_noise)
    trials = res.trials.set_index(["arm", "repeat"])

    def ok_only_p99(arm: str) -> float:
        return float(
            np.mean([np.quantile(p.loc[p["outcome"] == "ok", "ttft_ms"], 0.99) for p in trials.loc[arm, "phases"]])
        )

    shed = np.mean([(p["outcome"] != "ok").mean() for p in trials.loc["candidate", "phases"]])
    assert 0.02 < shed < 0.8, shed  # it did shed, and still served most of its load
    assert ok_only_p99("candidate") < ok_only_p99("baseline")  # the cheat works on ok-only percentiles
    eff = res.effects.set_index("metric")
    assert eff.loc["ttft_ms_p99", "direction"] == "worse" and eff.loc["ttft_ms_p99", "arm_value"] == 5000.0
    assert bool(eff.loc["failure_rate", "harm"]) and eff.loc["failure_rate", "harm_family"] == "primary"
    verdict = res.verdicts["candidate"]
    assert verdict.verdict == "regresses"
    assert any(r.startswith("failure_rate") and "beyond" in r for r in verdict.reasons), verdict.reasons
