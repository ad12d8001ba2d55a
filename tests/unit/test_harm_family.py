"""The ablation's two families (SPEC A1): harm is always tested — a metric worse than the baseline beyond its
tolerance fails the arm whether or not the targets moved — and failures count (a failed request is censored
at the deadline, failure rate and goodput are metrics), so an arm cannot look faster by failing its slowest."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from inferopt.ablate.compare import ALL_METRICS, arm_verdict, compare_arms
from inferopt.config.settings import METRIC_NAMES
from inferopt.measure.slo import RequestSLO
from inferopt.stats.inference import min_detectable_shift

CTX = RequestSLO(deadline_ms=2000.0, ttft_ms=500.0, tpot_ms=50.0)


def _phases(rng: np.random.Generator, n: int, ttft_scale: float = 1.0, tpot_scale: float = 1.0) -> pd.DataFrame:
    ttft = rng.lognormal(np.log(100.0), 0.5, n) * ttft_scale
    tpot = rng.lognormal(np.log(20.0), 0.1, n) * tpot_scale
    out = np.full(n, 32)
    return pd.DataFrame(
        {"outcome": "ok", "ttft_ms": ttft, "tpot_ms": tpot, "e2e_ms": ttft + 31 * tpot, "output_len": out}
    )


def _trials(arms: dict[str, list[pd.DataFrame]]) -> pd.DataFrame:
    rows = [
        {"arm": a, "repeat": r, "duration_s": 10.0, "phases": p} for a, ps in arms.items() for r, p in enumerate(ps)
    ]
    return pd.DataFrame(rows)


def _fail_slowest(p: pd.DataFrame, share: float) -> pd.DataFrame:
    """The planted cheat: the slowest `share` of requests time out (no TTFT, no tokens) instead of finishing."""
    p = p.copy()
    slow = p["ttft_ms"] >= p["ttft_ms"].quantile(1.0 - share)
    p.loc[slow, ["outcome"]] = "timeout"
    p.loc[slow, ["ttft_ms", "tpot_ms", "e2e_ms"]] = np.nan
    p.loc[slow, "output_len"] = 0
    return p


def test_metric_names_match_the_metric_definitions() -> None:
    assert [m.name for m in ALL_METRICS] == list(METRIC_NAMES)


def test_an_arm_that_times_out_its_slowest_requests_is_worse_not_faster() -> None:
    rng = np.random.default_rng(7)
    base = [_phases(rng, 200) for _ in range(4)]
    arm = [_fail_slowest(_phases(rng, 200), 0.10) for _ in range(4)]
    ok_only_p99 = [np.quantile(p.loc[p["outcome"] == "ok", "ttft_ms"], 0.99) for p in arm]
    assert np.mean(ok_only_p99) < np.mean([np.quantile(p["ttft_ms"], 0.99) for p in base])  # the cheat "works"
    eff = compare_arms(
        _trials({"baseline": base, "cheat": arm}),
        "baseline",
        "cheat",
        alpha=0.05,
        targets=("ttft_ms_p99",),
        context=CTX,
    ).set_index("metric")
    assert eff.loc["ttft_ms_p99", "direction"] == "worse"  # censored at the 2 s deadline
    assert eff.loc["ttft_ms_p99", "arm_value"] == pytest.approx(2000.0)
    assert eff.loc["failure_rate", "arm_value"] == pytest.approx(0.10, abs=0.01)
    assert bool(eff.loc["failure_rate", "harm"]) and eff.loc["goodput_req_per_s", "diff"] < 0
    verdict, reasons = arm_verdict(eff.reset_index(), ("ttft_ms_p99",))
    assert verdict == "regresses" and any(r.startswith("failure_rate") and "beyond" in r for r in reasons)


def test_harm_beyond_tolerance_fails_the_arm_though_no_target_moved() -> None:
    rng = np.random.default_rng(11)
    base = [_phases(rng, 150) for _ in range(4)]
    slower = [_phases(rng, 150, tpot_scale=1.3) for _ in range(4)]  # TTFT (the target) unchanged, TPOT x1.3
    eff = compare_arms(
        _trials({"baseline": base, "arm": slower}), "baseline", "arm", alpha=0.05, targets=("ttft_ms_p99",), context=CTX
    )
    row = eff.set_index("metric").loc["tpot_ms_p50"]
    assert row["family"] == "side effect" and bool(row["harm"]) and row["direction"] == "worse"
    verdict, reasons = arm_verdict(eff, ("ttft_ms_p99",))
    assert verdict == "regresses"
    assert any(r.startswith("tpot_ms_p50") and "beyond the 5 % tolerance" in r for r in reasons), reasons


def test_a_small_cost_within_tolerance_is_named_but_not_harm() -> None:
    rng = np.random.default_rng(12)
    base = [_phases(rng, 400) for _ in range(6)]
    faster = [_phases(rng, 400, ttft_scale=0.5, tpot_scale=1.02) for _ in range(6)]
    eff = compare_arms(
        _trials({"baseline": base, "arm": faster}), "baseline", "arm", alpha=0.05, targets=("ttft_ms_p99",), context=CTX
    )
    assert not eff["harm"].any()
    assert arm_verdict(eff, ("ttft_ms_p99",))[0] == "improves"
    # a declared tolerance decides: the same 2 % cost fails an arm that allows only 1 %
    strict = compare_arms(
        _trials({"baseline": base, "arm": faster}),
        "baseline",
        "arm",
        alpha=0.05,
        targets=("ttft_ms_p99",),
        context=CTX,
        tolerances={"tpot_ms_p50": 0.001},
    )
    assert bool(strict.set_index("metric").loc["tpot_ms_p50", "harm"])


def test_minimum_detectable_effect_grows_with_noise_and_shrinks_with_repeats() -> None:
    assert min_detectable_shift(0.01, 3, 0.05) > min_detectable_shift(0.01, 10, 0.05)
    assert min_detectable_shift(0.02, 5, 0.05) == pytest.approx(2 * min_detectable_shift(0.01, 5, 0.05))
    # (t_{0.975,4} + t_{0.8,4}) x se = (2.776 + 0.941) x 0.01
    assert min_detectable_shift(0.01, 5, 0.05) == pytest.approx(0.03717, abs=1e-4)
    assert np.isnan(min_detectable_shift(0.01, 1, 0.05))


def test_slo_attainment_and_goodput_count_failures_in_the_denominator() -> None:
    p = pd.DataFrame(
        {
            "outcome": ["ok", "ok", "ok", "timeout"],
            "ttft_ms": [100.0, 600.0, 100.0, np.nan],
            "tpot_ms": [10.0, 10.0, 80.0, np.nan],
            "e2e_ms": [400.0, 900.0, 2000.0, np.nan],
            "output_len": [30, 30, 30, 0],
        }
    )
    att = CTX.attainment(p, duration_s=2.0)
    assert att["slo_ttft_share"] == pytest.approx(0.5) and att["slo_tpot_share"] == pytest.approx(0.5)
    assert att["slo_attainment"] == pytest.approx(0.25)  # one of four met every bound; the timeout met none
    assert att["goodput_req_per_s"] == pytest.approx(0.5) and att["goodput_tok_per_s"] == pytest.approx(15.0)
