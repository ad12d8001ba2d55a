"""Run comparison pieces on synthetic data: the unpaired tests find a planted shift and not an A/A one, the
verdicts line up section by section, slices carry both runs' tails (the whole comparison on real flow runs is
tests/flows/test_compare_runs.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from inferopt.ablate.compare import METRICS_BY_NAME
from inferopt.compare.core import slice_rows, verdict_rows, verdict_sections
from inferopt.compare.runs import RunSide
from inferopt.compare.unpaired import MANN_WHITNEY, WELCH, per_request_effect, per_trial_effect

P99 = METRICS_BY_NAME["ttft_ms_p99"]
P50 = METRICS_BY_NAME["ttft_ms_p50"]


def _trials(rng: np.random.Generator, scale: float, n: int = 300, trials: int = 2) -> list[np.ndarray]:
    return [rng.gamma(2.0, 10.0 * scale, n) for _ in range(trials)]


def test_a_planted_shift_is_found_unpaired_and_an_aa_pair_is_not() -> None:
    rng = np.random.default_rng(1)
    shifted = per_request_effect(_trials(rng, 1.0), _trials(rng, 1.3), P50, alpha=0.05, n_boot=500, seed=0)
    assert shifted["test"] == MANN_WHITNEY and shifted["p_value"] < 1e-6
    assert 1.15 < shifted["ratio_lo"] < shifted["ratio"] < shifted["ratio_hi"] and shifted["diff"] > 0
    same = per_request_effect(_trials(rng, 1.0), _trials(rng, 1.0), P99, alpha=0.05, n_boot=500, seed=0)
    assert same["p_value"] > 0.01 and same["ratio_lo"] < 1.0 < same["ratio_hi"]


def test_welch_over_trials_and_its_degenerate_cases() -> None:
    spec = METRICS_BY_NAME["output_tok_per_s"]
    row = per_trial_effect(np.array([100.0, 102.0, 98.0]), np.array([120.0, 123.0, 118.0]), spec, alpha=0.05)
    assert row["test"] == WELCH and row["p_value"] < 0.01 and row["ratio"] == 120.33333333333333 / 100.0
    assert row["diff_lo"] > 0 and row["ratio_lo"] > 1.0
    one = per_trial_effect(np.array([100.0]), np.array([120.0]), spec, alpha=0.05)
    assert np.isnan(one["p_value"]) and one["ratio"] == 1.2  # one trial each: a value, no test
    flat = per_trial_effect(np.array([5.0, 5.0]), np.array([5.0, 5.0]), spec, alpha=0.05)
    assert flat["p_value"] == 1.0 and flat["ratio_lo"] == flat["ratio_hi"] == 1.0


def _side(run_id: str, decision: str, reasons: tuple[str, ...], phases: pd.DataFrame | None = None) -> RunSide:
    empty = pd.DataFrame()
    return RunSide(
        run_id, None, "c", "h", decision, reasons, phases if phases is not None else empty, 1.0, empty, empty, empty
    )  # type: ignore[arg-type]


def test_verdicts_line_up_by_section() -> None:
    a = ("REJECT because: x", "ablate: candidate regresses", "  ttft worse", "validate[burst]: FAIL", "  p99 high")
    b = ("ACCEPT: fine", "ablate: candidate improves", "  ttft better", "validate[burst]: pass")
    assert verdict_sections(a)["validate[burst]"] == "validate[burst]: FAIL\n  p99 high"
    rows = verdict_rows(_side("a", "reject", a), _side("b", "accept", b)).set_index("section")
    assert rows.loc["decision", "a"] == "reject" and rows.loc["decision", "b"] == "accept"
    assert rows.loc["ablate", "b"] == "ablate: candidate improves\n  ttft better" and not rows.loc["ablate", "same"]
    assert rows.loc["reasons", "a"] == "REJECT because: x"
    only_a = verdict_rows(_side("a", "reject", a), _side("b", "accept", ("ACCEPT: fine",))).set_index("section")
    assert only_a.loc["validate[burst]", "b"] == "absent"


def test_slices_hold_both_runs_tails() -> None:
    rng = np.random.default_rng(0)

    def phases(scale: float) -> pd.DataFrame:
        n = 200
        return pd.DataFrame(
            {
                "outcome": ["ok"] * n,
                "ttft_ms": rng.gamma(2.0, 10.0 * scale, n),
                "tpot_ms": rng.gamma(2.0, 1.0, n),
                "e2e_ms": rng.gamma(2.0, 30.0, n),
                "input_bucket": np.where(np.arange(n) % 2 == 0, "short", "long"),
            }
        )

    rows = slice_rows(_side("a", "x", ()), _side("b", "x", ()))
    assert rows.empty  # no measured phases: no slices
    rows = slice_rows(_side("a", "x", (), phases(1.0)), _side("b", "x", (), phases(2.0)))
    ttft = rows[(rows["metric"] == "ttft_ms")].set_index(["slice_dim", "slice_value"])
    assert set(ttft.index) == {("all", "all"), ("input_bucket", "short"), ("input_bucket", "long")}
    assert ttft.loc[("input_bucket", "short"), "n_a"] == 100 and ttft.loc[("all", "all"), "ratio_p50"] > 1.5
    assert ttft.loc[("all", "all"), "p_unadjusted"] < 1e-6
