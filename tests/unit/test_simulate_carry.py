"""The simulator past its fitted system: a model carried across a weight or KV dtype by the roofline prior (and
refusing anything else), the static batcher's fixed KV cache against a hand schedule and against the fake
engine it mirrors, the pruner's wider band for a carried prediction, a fit that knows which step shapes it
never measured, the usability judgement and the capacity range a latency error allows."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from inferopt.config import ConstantArrivals, FakeSystem, LengthConfig, SLOConfig, WorkloadConfig
from inferopt.config.systems import BatchingKnobs
from inferopt.engines.base import GenRequest, TokenEvent
from inferopt.engines.fake import FakeEngine
from inferopt.simulate.calibrate import (
    Calibration,
    capacity_range,
    extrapolation,
    judge,
    policy_for,
    simulated_run,
    static_kv_tokens,
)
from inferopt.simulate.costs import (
    DECODE_FEATURES,
    PREFILL_FEATURES,
    CostModel,
    Fit,
    WrongSystem,
    cost_fields,
    fit_nnls,
    prefill_features,
    system_fingerprint,
)
from inferopt.simulate.observe import fit_static, static_observations
from inferopt.simulate.prune import prune
from inferopt.simulate.scheduler import StaticPolicy, simulate
from inferopt.validate.capacity import CapacityBudget, CapacityResult


def fake(**kw) -> FakeSystem:
    base = dict(
        name="fake-carry",
        context_ms=0.0,
        prefill_base_ms=5.0,
        prefill_ms_per_token=0.0,
        decode_step_ms=24.0,
        decode_ms_per_seq=4.0,
        jitter_cv=0.0,
        batching=BatchingKnobs(max_batch_size=2, batch_wait_ms=0.0),
    )
    base.update(kw)
    return FakeSystem(**base)


def model(system, decode=(0.024, 0.004, 0.002), prefill=(0.005, 0.0, 0.0)) -> CostModel:
    return CostModel(
        engine=system.engine,
        fingerprint=system_fingerprint(system),
        system_name=system.name,
        prefill=Fit(PREFILL_FEATURES, prefill, (), 1.0, 0),
        decode=Fit(DECODE_FEATURES, decode, (), 1.0, 0),
        stats={"kv_bytes_per_token": 1000.0},
        fields_json=json.dumps(cost_fields(system), sort_keys=True),
    )


def workload(n: int, rate_per_s: float, output_len: int) -> WorkloadConfig:
    """n fixed-length requests (16-token prompts) at constant gaps."""
    lengths = LengthConfig(input_median=16, input_sigma=0, output_median=output_len, output_sigma=0)
    return WorkloadConfig(
        name="x", seed=1, num_requests=n, arrival=ConstantArrivals(rate_per_s=rate_per_s), lengths=lengths
    )


def table(offsets, input_len, output_len) -> pd.DataFrame:
    n = len(offsets)
    return pd.DataFrame(
        {
            "request_id": [f"r{i}" for i in range(n)],
            "arrival_offset_s": np.asarray(offsets, float),
            "input_len": [input_len] * n,
            "output_len": [output_len] * n,
            "prefix_group": [-1] * n,
            "prefix_len": [0] * n,
            "tenant": ["t"] * n,
            "priority": [0] * n,
        }
    )


def test_a_weight_dtype_change_scales_the_decode_steps_constant_by_the_bytes():
    cost = model(fake())
    int8 = cost.carried_to(fake(weight_dtype="int8"))
    assert int8.decode.coef == pytest.approx((0.006, 0.004, 0.002))  # 4 -> 1 byte a weight; per-seq as fitted
    assert int8.prefill == cost.prefill and int8.fingerprint == system_fingerprint(fake(weight_dtype="int8"))
    assert "weight_dtype float32 -> int8" in int8.carried and int8.carried in int8.notes
    assert cost.carried_to(fake()) is cost and not cost.carried  # the fitted system itself: not carried
    bf16 = cost.carried_to(fake(weight_dtype="bfloat16"))
    assert bf16.decode.coef[0] == pytest.approx(0.012)


def test_a_kv_dtype_change_scales_the_kv_terms_and_a_cost_field_is_refused():
    cost = model(fake())
    fp8 = cost.carried_to(fake(kv_cache_dtype="fp8"))
    assert fp8.decode.coef == pytest.approx((0.024, 0.004, 0.001)) and fp8.stats["kv_bytes_per_token"] == 500.0
    with pytest.raises(WrongSystem, match="cost-relevant field"):
        cost.carried_to(fake(decode_step_ms=12.0))  # the engine's own step time: no prior carries it
    with pytest.raises(WrongSystem, match="cost-relevant field"):
        cost.carried_to(fake(weight_dtype="int8", decode_step_ms=12.0))  # a dtype and something else
    legacy = CostModel("fake", cost.fingerprint, "x", cost.prefill, cost.decode)  # no fields kept: refuses
    with pytest.raises(WrongSystem):
        legacy.carried_to(fake(weight_dtype="int8"))


def test_a_kv_size_is_a_knob_the_simulator_models_not_a_refusal():
    system, bigger = fake(kv_cache_tokens=64), fake(kv_cache_tokens=128)
    assert system_fingerprint(system) == system_fingerprint(bigger)
    assert static_kv_tokens(bigger) == 128 and static_kv_tokens(fake(kv_cache_tokens=64, kv_cache_dtype="fp8")) == 128
    assert policy_for(bigger, model(system)).kv_tokens == 128 and policy_for(fake(), model(fake())).kv_tokens is None


def test_static_kv_preempts_the_newest_and_it_resumes_by_recomputing():
    """Two 4-token prompts, 3 tokens each, KV of 10 tokens: step 1 uses 2 x 5 (fits), step 2 would need 2 x 6,
    so the second leaves; the first ends at 7 ms; the second is prefilled again (5 ms) and ends at 13 ms."""
    system = fake(kv_cache_tokens=10)
    cost = model(system, decode=(0.001, 0.0, 0.0))
    recs = simulate(table([0.0, 0.0], 4, 3), StaticPolicy(system.batching, kv_tokens=10), cost)
    assert recs[0].token_s == pytest.approx([0.005, 0.006, 0.007])
    assert recs[1].token_s == pytest.approx([0.005, 0.012, 0.013])
    assert [r.outcome for r in recs] == ["ok", "ok"] and recs[1].prefill_end_s == pytest.approx(0.005)


async def _fake_run(system: FakeSystem, n: int, input_len: int, output_len: int | list[int]) -> list[list[float]]:
    engine = FakeEngine(system)
    await engine.start()
    outs = output_len if isinstance(output_len, list) else [output_len] * n
    try:

        async def one(i: int) -> list[float]:
            req = GenRequest(f"r{i}", list(range(1, input_len + 1)), outs[i])
            return [ev.server_s async for ev in engine.stream(req) if isinstance(ev, TokenEvent)]

        return await asyncio.gather(*(one(i) for i in range(n)))
    finally:
        await engine.stop()


def test_static_kv_matches_the_fake_engines_preemption_step_for_step():
    """The scripted fake engine (real asyncio sleeps) and the simulation of its planted costs, under a KV cache
    that holds two of four sequences: the same tokens, the same order of ends, each end close (a loaded box
    only lengthens the real sleeps)."""
    system = fake(kv_cache_tokens=24, batching=BatchingKnobs(max_batch_size=4, batch_wait_ms=0.0), decode_step_ms=4.0)
    stamps = asyncio.run(_fake_run(system, 4, 8, 4))
    cost = model(system, decode=(0.004, 0.004, 0.0))
    recs = simulate(table([0.0] * 4, 8, 4), policy_for(system, cost), cost)
    t0 = min(s[0] for s in stamps) - recs[0].token_s[0]
    real_end = [s[-1] - t0 for s in stamps]
    assert [len(s) for s in stamps] == [len(r.token_s) for r in recs] == [4] * 4
    assert np.argsort(real_end, kind="stable").tolist() == np.argsort([r.token_s[-1] for r in recs]).tolist()
    for real, sim in zip(real_end, recs, strict=True):  # a sleep is never shorter; the event loop adds a little
        assert sim.token_s[-1] - 0.002 <= real <= 1.3 * sim.token_s[-1] + 0.005
    assert max(r.token_s[-1] for r in recs) > 1.5 * min(r.token_s[-1] for r in recs)  # two were preempted


def _cal(cost: CostModel) -> Calibration:
    return Calibration(cost, pd.DataFrame(), pd.DataFrame(), {}, {}, 0.05, 3, 3, 0.15, True, "planted")


def _result(cap: float) -> CapacityResult:
    return CapacityResult("found", cap, cap, cap * 1.1, "planted", ())


def test_a_carried_prediction_is_kept_within_the_wider_band_a_fitted_one_is_not():
    """Capacities 10 (baseline), 7 (a batch size, fitted), 7 (int8, carried), 10.5 (bf16, carried) with a 5 %
    error and no bracket: 7 cannot reach 10.5 x 0.95 even at +5 %, but a carried 7 at +20 % can reach 10.5 x 0.8."""
    base = fake()
    space = [
        base,
        fake(batching=BatchingKnobs(max_batch_size=4)),
        fake(weight_dtype="int8"),
        fake(weight_dtype="bfloat16"),
    ]
    caps = {0: 10.0, 1: 7.0, 2: 7.0, 3: 10.5}
    predict = {system_fingerprint(s) + str(s.batching.max_batch_size): caps[i] for i, s in enumerate(space)}
    decision = prune(
        space,
        lambda s: _result(predict[system_fingerprint(s) + str(s.batching.max_batch_size)]),
        _cal(model(base)),
        top_k=1,
        frontier=False,
    )
    t = decision.predicted
    assert list(t["carried"] != "") == [False, False, True, True]
    assert decision.measure == (0, 2, 3) and t.loc[1, "why"].startswith("pruned")


def test_a_fit_on_batches_of_one_cannot_tell_a_batch_of_eight_and_says_so():
    """Every measured prefill had one 16-token row: the per-batch constant and the per-token cost are one
    direction, so a batch of 8 (8 x the tokens, 1 x the constant) is outside what was measured."""
    x = np.array([prefill_features([16], [0])] * 6)
    fit = fit_nnls(x, np.full(6, 0.005) + np.linspace(0, 1e-5, 6), PREFILL_FEATURES)
    assert fit.identified(prefill_features([16], [0]))
    assert not fit.identified(prefill_features([16] * 8, [0] * 8))
    varied = np.array([prefill_features([16] * b, [0] * b) for b in (1, 2, 4, 1, 2, 4)])
    both = fit_nnls(varied, 0.005 + 0.0001 * varied[:, 1], PREFILL_FEATURES)
    assert both.identified(prefill_features([16] * 8, [0] * 8))  # batch sizes varied: 8 is interpolated


def test_extrapolation_names_the_steps_a_batch_one_fit_never_measured():
    system = fake(batching=BatchingKnobs(max_batch_size=1, batch_wait_ms=0.0), decode_ms_per_seq=0.0)
    truth = model(system, decode=(0.001, 0.0, 0.0))
    wl = workload(30, 300.0, 3)
    run, _ = simulated_run(truth, system, wl, 300.0, 30, 1)
    cost = fit_static(run.records, system)
    assert extrapolation(cost, system, wl, 300.0, 30) == ""
    eight = fake(batching=BatchingKnobs(max_batch_size=8, batch_wait_ms=0.0), decode_ms_per_seq=0.0)
    assert "never measured" in extrapolation(cost, eight, wl, 300.0, 30)


def test_judge_gates_on_the_slos_latencies_and_a_knife_edge_capacity_in_its_range():
    med = {"ttft_ms_p99": 0.05, "tpot_ms_p95": 0.1, "tpot_ms_p99": 0.3}
    slo_only = ["ttft_ms_p99", "tpot_ms_p95"]
    assert not judge(med, 0.05, 0.15, 3)[0]  # every latency: tpot p99 is 30 % off
    assert judge(med, 0.05, 0.15, 3, gating=slo_only)[0]  # the SLO bounds ttft p99 and tpot p95 only
    usable, why = judge(med, 0.38, 0.15, 3, in_range=True, gating=slo_only)
    assert usable and "knife-edge" in why
    assert not judge(med, 0.38, 0.15, 3, in_range=False, gating=slo_only)[0]
    assert not judge(med, 0.05, 0.15, 0, gating=slo_only)[0]  # nothing held back: unknown


def test_capacity_range_widens_where_the_latency_curve_is_flat_at_the_bound():
    """Batch 4, a decode step of 24 ms + 4 ms a sequence: TPOT sits at 40 ms once batches fill, 34 ms is the
    bound; at +/- 20 % of latency the range spans what a flat curve allows, at 0 % it is one point."""
    system = fake(batching=BatchingKnobs(max_batch_size=4, batch_wait_ms=0.0))
    cost = model(system, decode=(0.024, 0.004, 0.0), prefill=(0.001, 0.0, 0.0))
    wl = workload(16, 2.0, 12)
    slo = SLOConfig(name="s", ttft_p99_ms=1000, tpot_p95_ms=34)
    budget = CapacityBudget(max_probes=6, rel_tol=0.15, requests_per_probe=16)
    lo0, hi0 = capacity_range(cost, system, wl, slo, budget, 0.0)
    lo, hi = capacity_range(cost, system, wl, slo, budget, 0.2)
    assert lo0 == hi0 and lo <= lo0 <= hi0 <= hi and hi > lo


def test_a_kv_bounded_batch_is_fitted_on_the_sequences_each_step_computed():
    """The fake engine's KV-bounded batch charges a decode step for the sequences still generating (finished
    and preempted ones leave it), and so does the simulator. Counted as rows until the longest ends (hf's padded
    batch), the fit put 0.11 ms a sequence on a planted 0.3 (a KV case's capacity 25 % high); counted as it
    computed, the planted costs come back. One prompt length: the prefill time goes to tokens, not pairs."""
    system = fake(kv_cache_tokens=192, batching=BatchingKnobs(max_batch_size=8, batch_wait_ms=0.0))
    planted = model(system, decode=(0.003, 0.0003, 0.0), prefill=(0.001, 5e-5, 0.0))
    rng = np.random.default_rng(7)
    t = table(np.cumsum(rng.exponential(0.05, 200)), 32, 32)
    t["output_len"] = rng.integers(8, 48, len(t))
    recs = simulate(t, policy_for(system, planted), planted, timeout_s=1e9)
    resumed = [r for r in recs if len(r.token_s) > 1 and np.diff(r.token_s).max() > 0.05]  # waited a batch out
    assert len(resumed) > 20  # the premise: the cache preempted many
    fitted = fit_static(recs, system)
    np.testing.assert_allclose(fitted.decode.coef[:2], (0.003, 0.0003), rtol=0.01)
    assert fitted.prefill.coef[1] == pytest.approx(5e-5, rel=0.01) and fitted.prefill.coef[2] < 1e-9
    obs = static_observations(recs, live_rows=False)  # hf's count: every row until the longest ends
    padded = fit_nnls(np.array(obs["dx"]), np.array(obs["dy"]), DECODE_FEATURES)
    assert padded.coef[1] < 0.5 * 0.0003


def test_a_static_batch_of_the_fake_engine_is_charged_for_the_rows_still_generating():
    """The fake engine's decode step costs its base plus a share per sequence still generating; hf's padded
    batch computes every row until the longest ends. The engine declares which (`finished_rows_compute`) and the
    simulator charges by it: outputs of 2, 6, 12 and 24 tokens end where the real sleeps end; charged for every
    row, the batch would run about 1.8x as long."""
    system = fake(batching=BatchingKnobs(max_batch_size=4, batch_wait_ms=0.0), decode_step_ms=4.0)
    assert not system.capabilities.finished_rows_compute
    outs = [2, 6, 12, 24]
    stamps = asyncio.run(_fake_run(system, 4, 8, outs))
    cost = model(system, decode=(0.004, 0.004, 0.0))
    t = table([0.0] * 4, 8, 1)
    t["output_len"] = outs
    recs = simulate(t, policy_for(system, cost), cost)
    assert [len(s) for s in stamps] == [len(r.token_s) for r in recs] == outs
    real_span = max(s[-1] for s in stamps) - min(s[0] for s in stamps)
    sim_span = max(r.token_s[-1] for r in recs) - min(r.token_s[0] for r in recs)
    assert sim_span == pytest.approx(0.020 + 4 * 0.016 + 6 * 0.012 + 12 * 0.008)
    assert sim_span - 0.002 <= real_span <= 1.3 * sim_span + 0.005  # a sleep is never shorter
    padded = simulate(t, replace(policy_for(system, cost), live_rows=False), cost)
    assert max(r.token_s[-1] for r in padded) - min(r.token_s[0] for r in padded) > 1.6 * real_span
