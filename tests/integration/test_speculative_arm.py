"""The speculative-decoding candidate as an ablation arm (SPEC K5): it runs, serves the same greedy tokens as the
baseline, and the arm carries acceptance, tokens per round and speed-up, predicted beside measured."""

import math
from pathlib import Path

import pytest

from inferopt.ablate.run import ablate
from inferopt.config import load_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # ~40 s: four trials, each starting an engine
def test_speculative_arm_runs_and_reports_k5(tmp_path):
    cand = load_config(ROOT / "configs/candidates/speculative.yaml")
    cand = cand.model_copy(
        update={
            "ablation": cand.ablation.model_copy(
                update={"repeats": 2, "max_repeats": None, "num_requests": 6, "aa_arm": False}
            )
        }
    )
    result = ablate(cand, tmp_path)
    assert not result.trials["failed"].any(), result.trials["error"].tolist()

    served = {}
    for run in result.runs:
        for rec in run.records:
            served.setdefault(run.tags.arm, {})[(run.tags.trial, rec.request_id)] = rec.output_token_ids
    assert served["candidate"] == served["baseline"]  # greedy outputs unchanged, token for token
    assert all(len(v) > 1 for v in served["candidate"].values())

    row = result.speculative.set_index("arm").loc["candidate"]
    k = cand.changes["speculative"]["num_draft_tokens"]
    assert row["k"] == k and row["rounds"] > 0 and row["trials"] == 2
    assert 0.0 < row["acceptance_rate"] <= 1.0
    assert 1.0 <= row["measured_tokens_per_round"] <= k + 1
    assert row["predicted_tokens_per_round"] == pytest.approx(sum(row["acceptance_rate"] ** i for i in range(k + 1)))
    assert row["cost_ratio"] > 0 and math.isfinite(row["predicted_speedup"])
    assert row["plain_step_ms"] > 0 and row["verify_cost_ratio"] > 0  # priced against the baseline's step
    assert math.isfinite(row["predicted_speedup_with_verify_cost"])
    assert row["measured_speedup_lo"] <= row["measured_speedup"] <= row["measured_speedup_hi"]
    # the verdict agrees with the measured speed-up: a CI below 1 is never an improvement, above 1 never a regression
    verdict = result.verdicts["candidate"].verdict
    if row["measured_speedup_hi"] < 1.0:
        assert verdict != "improves", (verdict, row["measured_speedup_hi"])
    if row["measured_speedup_lo"] > 1.0:
        assert verdict != "regresses", (verdict, row["measured_speedup_lo"])
    assert "baseline" not in set(result.speculative["arm"])  # plain arms get no speculative row
