"""The serving simulator: fits recover planted step costs, the scheduler simulation matches closed forms and
hand schedules, a model refuses another engine's system, and calibration flags a bad model."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest

from inferopt.config import HFSystem, ModelSpec, SLOConfig, WorkloadConfig
from inferopt.config.systems import BatchingKnobs, VLLMSystem
from inferopt.locate.hardware import HardwareProfile
from inferopt.locate.roofline import ModelDims
from inferopt.measure.phases import phase_table
from inferopt.records import RecordSink
from inferopt.report import plots
from inferopt.simulate.bound import bound_ratios
from inferopt.simulate.calibrate import (
    Calibration,
    MeasuredProbe,
    calibrate,
    calibrate_search,
    capacity_table,
    judge,
    policy_for,
    simulated_capacity,
    simulated_probe,
    simulated_run,
)
from inferopt.simulate.costs import (
    DECODE_FEATURES,
    PREFILL_FEATURES,
    CostModel,
    Fit,
    Overheads,
    WrongSystem,
    system_fingerprint,
)
from inferopt.simulate.observe import fit_phases, fit_static
from inferopt.simulate.plan import load_curve, replica_plan
from inferopt.simulate.prune import pareto_max, prune
from inferopt.simulate.scheduler import ContinuousPolicy, StaticPolicy, simulate
from inferopt.validate.capacity import CapacityBudget


def _hf(batch: int = 4, wait_ms: float = 0.0, **kw) -> HFSystem:
    return HFSystem(
        model=ModelSpec(path="builtin:tiny-llama"),
        batching=BatchingKnobs(max_batch_size=batch, batch_wait_ms=wait_ms),
        **kw,
    )


def _model(
    system, prefill=(0.01, 1e-4, 2e-3), decode=(0.005, 1e-3, 4e-3), overheads: Overheads | None = None
) -> CostModel:
    return CostModel(
        engine=system.engine,
        fingerprint=system_fingerprint(system),
        system_name=system.name,
        prefill=Fit(PREFILL_FEATURES, tuple(prefill), (), 1.0, 0),
        decode=Fit(DECODE_FEATURES, tuple(decode), (), 1.0, 0),
        overheads=overheads or Overheads(),
    )


def _table(offsets, input_len, output_len, prefix_group=None, prefix_len=0, priority=None) -> pd.DataFrame:
    n = len(offsets)
    return pd.DataFrame(
        {
            "request_id": [f"r{i:04d}" for i in range(n)],
            "arrival_offset_s": np.asarray(offsets, float),
            "input_len": np.broadcast_to(input_len, n).astype(int),
            "output_len": np.broadcast_to(output_len, n).astype(int),
            "prefix_group": np.broadcast_to(-1 if prefix_group is None else prefix_group, n).astype(int),
            "prefix_len": np.broadcast_to(prefix_len, n).astype(int),
            "tenant": ["t"] * n,
            "priority": np.broadcast_to(0 if priority is None else priority, n).astype(int),
        }
    )


# ------------------------------------------------------------------------------------------------ fits


def test_fit_recovers_planted_coefficients_from_static_batches() -> None:
    system = _hf(batch=4)
    planted = _model(system, overheads=Overheads(admit_s=0.001, first_token_s=0.0002, send_lag_s=0.0005))
    rng = np.random.default_rng(3)
    n = 240
    table = _table(np.cumsum(rng.exponential(0.02, n)), rng.integers(8, 300, n), rng.integers(2, 30, n))
    records = simulate(table, StaticPolicy(system.batching), planted, timeout_s=1e9)
    fitted = fit_static(records, system)
    np.testing.assert_allclose(fitted.decode.coef, planted.decode.coef, rtol=1e-6)
    np.testing.assert_allclose(fitted.prefill.coef, planted.prefill.coef, rtol=1e-6)
    noise = np.random.default_rng(4)
    for r in records:  # 3 % multiplicative noise on each batch's prefill (its members share prefill_start_s)
        r.prefill_end_s = r.prefill_start_s + (r.prefill_end_s - r.prefill_start_s) * (1 + 0.03 * noise.normal())
    noisy = fit_static(records, system)
    for tokens, pairs in ((4 * 64, 4 * 64 * 32.5), (300, 300 * 150.5), (4 * 250, 4 * 250 * 125.5)):
        assert noisy.prefill_s(tokens, pairs) == pytest.approx(planted.prefill_s(tokens, pairs), rel=0.05)
    assert fitted.overheads.admit_s == pytest.approx(0.001, rel=1e-6)
    assert fitted.overheads.send_lag_s == pytest.approx(0.0005, rel=1e-6)
    assert len(noisy.prefill.residuals_s) == noisy.prefill.n > 20 and 0.9 < noisy.prefill.r2 <= 1.0


def test_fit_needs_enough_batches() -> None:
    with pytest.raises(ValueError, match="too few to fit"):
        fit_static([], _hf())


# ------------------------------------------------------------------------------------------------ scheduler


def test_static_batches_follow_a_hand_computed_schedule() -> None:
    """Three requests at t=0, max batch 2: batch [0, 1] then [2]; prefill 10 ms, decode 5 ms per step."""
    system = _hf(batch=2)
    cost = _model(system, prefill=(0.010, 0.0, 0.0), decode=(0.005, 0.0, 0.0))
    recs = simulate(_table([0.0, 0.0, 0.0], 8, 3), StaticPolicy(system.batching), cost)
    assert [r.batch_size_at_admit for r in recs] == [2, 2, 1]
    assert recs[0].token_s == pytest.approx([0.010, 0.015, 0.020])
    assert recs[2].admitted_s == pytest.approx(0.020)
    assert recs[2].token_s == pytest.approx([0.030, 0.035, 0.040])
    assert all(r.run_tag == "simulated" and r.outcome == "ok" for r in recs)


def test_static_wait_window_holds_a_lone_request() -> None:
    system = _hf(batch=4, wait_ms=50.0)
    cost = _model(system, prefill=(0.010, 0.0, 0.0), decode=(0.005, 0.0, 0.0))
    recs = simulate(_table([0.0, 0.02], 8, 1), StaticPolicy(system.batching), cost)
    assert recs[0].admitted_s == pytest.approx(0.05) and recs[0].batch_size_at_admit == 2


def test_md1_mean_queue_wait_matches_pollaczek_khinchine() -> None:
    """Batch size 1, Poisson arrivals, deterministic service D: Wq = rho D / (2 (1 - rho))."""
    system = _hf(batch=1)
    service_s, rho, n = 0.010, 0.7, 8_000
    cost = _model(system, prefill=(service_s, 0.0, 0.0), decode=(0.0, 0.0, 0.0))
    offsets = np.cumsum(np.random.default_rng(11).exponential(service_s / rho, n))
    phases = phase_table(simulate(_table(offsets, 8, 1), StaticPolicy(system.batching), cost, timeout_s=1e9))
    expected_ms = 1000.0 * rho * service_s / (2 * (1 - rho))
    assert phases["queue_ms"].mean() == pytest.approx(expected_ms, rel=0.08)


def test_bounded_queue_rejects_and_timeouts_count() -> None:
    system = _hf(batch=1).model_copy(update={"batching": BatchingKnobs(max_batch_size=1, max_queue=2)})
    cost = _model(system, prefill=(1.0, 0.0, 0.0), decode=(0.0, 0.0, 0.0))
    recs = simulate(_table([0.0, 0.01, 0.02, 0.03, 0.04], 8, 1), StaticPolicy(system.batching), cost, timeout_s=2.5)
    # r0 runs at once; r1, r2 wait (the bound); r3, r4 find 2 waiting; r2 starts at 2 s, done at 3 s > 2.52 s
    assert [r.outcome for r in recs] == ["ok", "ok", "timeout", "rejected", "rejected"]
    assert recs[2].output_len == 0 and recs[2].client_done_s == pytest.approx(2.52)


def test_continuous_chunked_prefill_takes_budgeted_steps() -> None:
    """A 100-token prompt with a 40-token budget: 3 prefill steps (40, 40, 20), the first token at the third."""
    system = _hf()
    cost = _model(system, prefill=(0.010, 0.0, 0.0), decode=(0.005, 0.0, 0.0))
    pol = ContinuousPolicy(max_num_seqs=4, max_num_batched_tokens=40)
    (rec,) = simulate(_table([0.0], 100, 3), pol, cost)
    assert rec.token_s == pytest.approx([0.030, 0.035, 0.040])
    unchunked = ContinuousPolicy(max_num_seqs=4, max_num_batched_tokens=100, chunked_prefill=False)
    (rec2,) = simulate(_table([0.0], 100, 3), unchunked, cost)
    assert rec2.token_s == pytest.approx([0.010, 0.015, 0.020])


def test_continuous_joins_new_requests_between_steps() -> None:
    system = _hf()
    cost = _model(system, prefill=(0.010, 0.0, 0.0), decode=(0.005, 0.0, 0.0))
    recs = simulate(_table([0.0, 0.012], 8, 4), ContinuousPolicy(max_num_seqs=4), cost)
    # r1 arrives during r0's first decode step and is prefilled in the next step, beside r0's decode
    assert recs[1].admitted_s == pytest.approx(0.015)
    assert recs[0].done_s < recs[1].done_s and recs[1].batch_size_at_admit == 2


def test_kv_blocks_force_preemption_yet_every_request_finishes() -> None:
    system = _hf()
    cost = _model(system, prefill=(0.002, 0.0, 0.0), decode=(0.001, 0.0, 0.0))
    pol = ContinuousPolicy(max_num_seqs=8, kv_blocks=6, block_size=16)
    recs = simulate(_table([0.0] * 4, 30, 20), pol, cost, timeout_s=1e9)
    assert all(r.outcome == "ok" and r.output_len == 20 for r in recs)
    unbounded = simulate(_table([0.0] * 4, 30, 20), ContinuousPolicy(max_num_seqs=8), cost, timeout_s=1e9)
    assert max(r.done_s for r in recs) > max(r.done_s for r in unbounded)  # recompute costs time


def test_prefix_cache_hits_in_whole_blocks() -> None:
    system = _hf()
    cost = _model(system)
    pol = ContinuousPolicy(block_size=16, prefix_caching=True)
    recs = simulate(_table([0.0, 1.0, 2.0], 64, 2, prefix_group=0, prefix_len=40), pol, cost)
    assert [r.cached_tokens for r in recs] == [0, 32, 32]


def test_priority_policy_serves_the_better_priority_first() -> None:
    system = _hf()
    cost = _model(system, prefill=(0.010, 0.0, 0.0), decode=(0.005, 0.0, 0.0))
    table = _table([0.0, 0.001, 0.002], 8, 2, priority=np.array([0, 1, 0]))
    recs = simulate(table, ContinuousPolicy(max_num_seqs=1, priority=True), cost)
    assert recs[2].admitted_s < recs[1].admitted_s


# ------------------------------------------------------------------------------------------------ refusal


def test_model_refuses_another_engines_system() -> None:
    hf = _hf()
    model = _model(hf)
    vllm = VLLMSystem(model=ModelSpec(path="builtin:tiny-llama"))
    with pytest.raises(WrongSystem, match="fitted on the 'hf' engine.*'vllm' engine"):
        model.check_system(vllm)
    with pytest.raises(WrongSystem):
        policy_for(vllm, model)
    with pytest.raises(WrongSystem, match="cost-relevant field"):
        model.check_system(hf.model_copy(update={"torch_threads": 2}))
    model.check_system(hf.model_copy(update={"batching": BatchingKnobs(max_batch_size=8)}))  # knobs are simulated


# ------------------------------------------------------------------------------------------------ calibration

WL = WorkloadConfig(
    name="sim",
    seed=5,
    num_requests=40,
    arrival={"kind": "poisson", "rate_per_s": 20.0},
    lengths={"input_median": 64, "input_sigma": 0.5, "output_median": 8, "output_sigma": 0.5},
)
SLO = SLOConfig(ttft_p99_ms=400, tpot_p95_ms=40)
BUDGET = CapacityBudget(max_probes=5, rel_tol=0.1, requests_per_probe=40)


def _measured(tmp_path, truth: CostModel, system, rates, label) -> list[MeasuredProbe]:
    out = []
    for i, rate in enumerate(rates):
        probe = simulated_probe(truth, system, WL, SLO, BUDGET, (i, "start", rate))
        path = tmp_path / f"{label}-{i}.jsonl"
        run, _ = simulated_run(truth, system, WL, rate, BUDGET.requests_per_probe, WL.seed)
        with RecordSink(path, fsync=False) as sink:
            for r in run.records:
                sink.write(dataclasses.replace(r, trial=i, scenario=label))  # as a capacity probe's records are
        out.append(MeasuredProbe(label, system, dataclasses.replace(probe, records_path=str(path))))
    return out


def test_calibration_passes_a_true_model_and_flags_a_bad_one(tmp_path) -> None:
    fit_sys, held_sys = _hf(batch=4, wait_ms=5.0), _hf(batch=2)
    truth = _model(fit_sys, prefill=(0.004, 5e-5, 1e-3), decode=(0.004, 1e-3, 2e-3))
    fit_on = _measured(tmp_path, truth, fit_sys, [10.0, 20.0, 40.0], "fit")
    held = _measured(tmp_path, truth, held_sys, [14.0, 28.0], "held")
    caps = {"held": (held_sys, simulated_capacity(truth, held_sys, WL, SLO, BUDGET))}
    good = calibrate(fit_on, held, fit_static, WL, SLO, BUDGET, capacities=caps)
    assert good.usable, good.message
    assert max(good.median_rel_err.values()) < 0.05 and good.capacity_rel_err < 0.05
    assert good.probes_fit == 3 and good.probes_held_back == 2
    assert set(good.table["split"]) == {"fit", "held_back"}

    def slow_fitter(records, system):  # a model twice as slow as the truth
        m = fit_static(records, system)
        return dataclasses.replace(m, decode=dataclasses.replace(m.decode, coef=tuple(2 * c for c in m.decode.coef)))

    bad = calibrate(fit_on, held, slow_fitter, WL, SLO, BUDGET, capacities=caps)
    assert not bad.usable and "unusable for pruning" in bad.message


def test_a_held_back_capacity_is_predicted_by_the_search_it_was_measured_by() -> None:
    """The measured search started at another rate than the calibration's budget: the simulated search starts
    there too, so a true model predicts its capacity exactly (from the budget's start, the same truth brackets
    another rate: the two grids differ by up to a bracket)."""
    held_sys = _hf(batch=2)
    truth = _model(_hf(batch=4, wait_ms=5.0), prefill=(0.004, 5e-5, 1e-3), decode=(0.004, 1e-3, 2e-3))
    measured = simulated_capacity(truth, held_sys, WL, SLO, dataclasses.replace(BUDGET, start_req_per_s=35.0))
    assert simulated_capacity(truth, held_sys, WL, SLO, BUDGET).req_per_s != measured.req_per_s  # grids differ
    table = capacity_table(truth, {"held": (held_sys, measured)}, WL, SLO, BUDGET)
    assert table["predicted_req_per_s"].iloc[0] == measured.req_per_s and table["rel_err"].iloc[0] == 0.0


def test_judge_needs_held_back_probes() -> None:
    ok, msg = judge({"ttft_ms_p50": 0.01}, math.nan, 0.15, 0)
    assert not ok and "unknown" in msg


# ------------------------------------------------------------------------------------------------ planning, pruning


def test_replica_plan_scales_a_deterministic_load_and_says_predicted() -> None:
    system = _hf(batch=1)
    cost = _model(system, prefill=(0.010, 0.0, 0.0), decode=(0.0, 0.0, 0.0))
    wl = WorkloadConfig(
        name="deterministic",
        num_requests=80,
        arrival={"kind": "constant", "rate_per_s": 50.0},
        lengths={"input_median": 8, "input_sigma": 0, "output_median": 2, "output_sigma": 0},
    )
    slo = SLOConfig(ttft_p99_ms=60_000, tpot_p95_ms=60_000)  # only saturation bounds it: capacity = 100 req/s
    budget = CapacityBudget(max_probes=12, rel_tol=0.05, requests_per_probe=80)
    plan = replica_plan(cost, system, wl, slo, budget, (1, 2, 4))
    assert list(plan["kind"]) == ["predicted"] * 3
    per = plan["per_replica_req_per_s"].to_numpy(float)
    assert per[0] == pytest.approx(100.0, rel=0.1) and per == pytest.approx([per[0]] * 3, rel=0.1)
    curve = load_curve(cost, system, wl, slo, budget, [50.0, 300.0], replicas=2)
    assert list(curve["kind"]) == ["predicted"] * 2 and bool(curve["passed"].iloc[0]) and not curve["passed"].iloc[1]


def _cal(usable: bool, cap_err: float = 0.05) -> Calibration:
    return Calibration(_model(_hf()), pd.DataFrame(), pd.DataFrame(), {}, {}, cap_err, 3, 3, 0.15, usable, "planted")


def test_prune_keeps_baseline_top_and_frontier_and_nothing_when_unusable() -> None:
    system = _hf()
    caps = {1: 1.0, 2: 2.0, 4: 3.9, 8: 4.0, 16: 2.5}
    space = [system.model_copy(update={"batching": BatchingKnobs(max_batch_size=b)}) for b in caps]
    truth = _model(system, prefill=(0.01, 0.0, 0.0), decode=(0.005, 0.0, 0.0))

    def predict(s):  # a planted capacity per batch size; per-user speed from the simulator itself
        result = simulated_capacity(truth, s, WL, SLO, BUDGET)
        return dataclasses.replace(result, req_per_s=caps[s.batching.max_batch_size])

    decision = prune(space, predict, _cal(True), top_k=1)
    assert decision.usable and 0 in decision.measure and 3 in decision.measure  # baseline and the best (8)
    assert 2 in decision.measure  # 3.9 is within 2 x 5 % of 4.0: the simulator cannot order them
    assert 1 not in decision.measure or decision.predicted.loc[1, "frontier"]
    assert len(decision.measure) + len(decision.skipped) == len(space) and decision.skipped
    nothing = prune(space, predict, _cal(False))
    assert not nothing.usable and nothing.measure == tuple(range(len(space))) and "nothing pruned" in nothing.message


def test_pareto_max() -> None:
    keep = pareto_max(np.array([1.0, 2.0, 3.0, 2.0]), np.array([3.0, 2.0, 1.0, 1.0]))
    assert keep.tolist() == [True, True, True, False]


def test_calibrate_search_fits_on_the_baseline_and_holds_back_the_rest(tmp_path) -> None:
    fit_sys, held_sys = _hf(batch=4, wait_ms=5.0), _hf(batch=2)
    truth = _model(fit_sys, prefill=(0.004, 5e-5, 1e-3), decode=(0.004, 1e-3, 2e-3))
    base = simulated_capacity(truth, fit_sys, WL, SLO, BUDGET)
    held = simulated_capacity(truth, held_sys, WL, SLO, BUDGET)

    def with_records(label, system, result):  # the probes' records on disk, as a measured search leaves them
        probes = []
        for p in result.probes:
            run, _ = simulated_run(truth, system, WL, p.offered_req_per_s, BUDGET.requests_per_probe, WL.seed)
            path = tmp_path / f"{label}-{p.index}.jsonl"
            with RecordSink(path, fsync=False) as sink:
                for r in run.records:
                    sink.write(dataclasses.replace(r, trial=p.index, scenario=label))
            probes.append(dataclasses.replace(p, records_path=str(path)))
        return label, system, dataclasses.replace(result, probes=tuple(probes))

    out = calibrate_search(
        [with_records("base", fit_sys, base), with_records("b2", held_sys, held)], WL, SLO, BUDGET, fit_static
    )
    assert out.calibration is not None and out.calibration.usable, out.message
    assert out.calibration.probes_fit == len(base.probes) and out.calibration.probes_held_back == len(held.probes)
    assert calibrate_search([], WL, SLO, BUDGET, fit_static).calibration is None


def test_bound_ratio_is_fitted_time_over_the_roofline() -> None:
    dims = ModelDims(n_layers=2, hidden=64, intermediate=128, n_heads=4, n_kv_heads=4, head_dim=16, vocab=256)
    hw = HardwareProfile("cpu", "cpu", "float32", 1e10, 1e9, 1e9, 10.0, 0.0, False, "planted")
    cost = _model(_hf(), prefill=(0.0, 1e-4, 0.0), decode=(0.001, 0.0, 0.0))
    df = bound_ratios(cost, dims, hw, decode_shapes=[(1, 16)], prefill_shapes=[(1, 64)])
    dec = df[df["phase"] == "decode"].iloc[0]
    assert dec["fitted_s"] == pytest.approx(0.001) and dec["x_bound"] == pytest.approx(0.001 / dec["bound_s"])
    assert (df["x_bound"] > 1).all()  # 1 GB/s cannot move these weights in less time than the planted steps take


def _span_load(prefill, seed, n, gap_s, inputs, outputs, pol, overheads=None):
    """A continuous batcher with planted costs on a Poisson load: the truth, its table, the records, and the
    records as vLLM's span join keeps them (only the first token's server time)."""
    truth = _model(VLLM, prefill=prefill, decode=(0.006, 1.5e-3, 3e-3), overheads=overheads)
    rng = np.random.default_rng(seed)
    table = _table(np.cumsum(rng.exponential(gap_s, n)), rng.integers(*inputs, n), rng.integers(*outputs, n))
    measured = simulate(table, pol, truth, timeout_s=1e9)
    return truth, table, measured, [dataclasses.replace(r, token_s=r.token_s[:1]) for r in measured]


VLLM = VLLMSystem(model=ModelSpec(path="builtin:tiny-llama"))


def test_phase_fit_recovers_a_continuous_batchers_costs_from_span_records() -> None:
    """vLLM's span join keeps only the first token's server time: the per-request fit must still find the
    planted decode and prefill costs closely enough that a replay with it predicts TTFT and TPOT."""
    system = VLLM
    pol = ContinuousPolicy(max_num_seqs=8, max_num_batched_tokens=512)
    truth, table, measured, spans = _span_load((0.004, 4e-5, 5e-4), 8, 160, 0.05, (16, 400), (3, 40), pol)
    fitted = fit_phases(spans, system)
    for seqs, ctx in ((4, 1000), (8, 2000)):  # the shapes this load runs (a lone sequence is rare at it)
        assert fitted.decode_s(seqs, ctx) == pytest.approx(truth.decode_s(seqs, ctx), rel=0.15)
    replay = phase_table(simulate(table, pol, fitted, timeout_s=1e9))
    real = phase_table(measured)
    for col in ("ttft_ms", "tpot_ms"):
        assert replay[col].median() == pytest.approx(real[col].median(), rel=0.15), col
    with pytest.raises(ValueError, match="too few"):
        fit_phases(spans[:2], system)


def test_phase_fit_charges_a_step_for_every_prompt_it_computed_not_its_constant() -> None:
    """Under load several prompts share a step, so one request's scheduled -> first token window holds its
    peers' prompt tokens too. Fitted against its own tokens only, the step constant absorbed them (vLLM-CPU:
    22 ms, a lone prompt's TTFT over-predicted by half); counted, a lone prompt is predicted as planted."""
    n, pol = 200, ContinuousPolicy(max_num_seqs=16, max_num_batched_tokens=2048)
    truth, _, measured, spans = _span_load((0.004, 8e-5, 5e-4), 3, n, 0.01, (64, 160), (3, 12), pol)
    shared = sum(1 for r in measured if sum(1 for p in measured if p.admitted_s == r.admitted_s) > 1)
    assert shared > n // 2  # the premise: most prompts were computed beside others
    fitted = fit_phases(spans, VLLM)
    lone = (100, 100 * 101 / 2)  # one 100-token prompt, its attention pairs
    assert fitted.prefill_s(*lone) == pytest.approx(truth.prefill_s(*lone), rel=0.2)
    assert fitted.prefill.coef[0] < 2 * 0.004


def test_phase_fit_delivers_the_first_token_by_the_streams_in_flight_and_the_rest_by_the_stream_lag() -> None:
    """vLLM-CPU's API server sent a lone stream's first token 5 ms after its server stamp and one beside 15
    others' 25 ms after, while each stream's last token lagged 2 ms: one median lag for every token put 20 ms
    on a lone TTFT and on every E2E. Planted 3 ms + 1.5 ms a stream (the rest 1 ms), the fit finds both and
    a replay at another load predicts TTFT and E2E."""
    pol = ContinuousPolicy(max_num_seqs=16, max_num_batched_tokens=2048)
    planted = Overheads(deliver_s=0.001, first_deliver_s=0.003, first_per_stream_s=0.0015)
    truth, _, measured, spans = _span_load((0.004, 4e-5, 5e-4), 4, 240, 0.02, (16, 120), (4, 40), pol, planted)
    assert len({r.client_token_s[0] - r.prefill_end_s for r in measured}) > 10  # the lag varied with the load
    fitted = fit_phases(spans, VLLM)
    o = fitted.overheads
    assert o.deliver_s == pytest.approx(0.001, rel=0.05)
    assert o.first_per_stream_s == pytest.approx(0.0015, rel=0.25)
    assert o.first_deliver_s + 8 * o.first_per_stream_s == pytest.approx(0.003 + 8 * 0.0015, rel=0.15)
    _, table, other, _ = _span_load((0.004, 4e-5, 5e-4), 9, 120, 0.06, (16, 120), (4, 40), pol, planted)
    replay, real = phase_table(simulate(table, pol, fitted, timeout_s=1e9)), phase_table(other)
    for col, rel in (("ttft_ms", 0.1), ("e2e_ms", 0.15)):  # E2E: mostly decode, fitted to 15 % (above)
        assert replay[col].median() == pytest.approx(real[col].median(), rel=rel), col
    alike = dataclasses.replace(fitted, overheads=dataclasses.replace(o, first_deliver_s=None))
    ttft = phase_table(simulate(table, pol, alike, timeout_s=1e9))["ttft_ms"].median()
    assert ttft < 0.8 * real["ttft_ms"].median()  # the first token delivered like the rest: TTFT 20 %+ short


def test_sim_error_plot_draws_both_panels() -> None:
    table = pd.DataFrame(
        {
            "metric": ["ttft_ms_p50", "ttft_ms_p50", "achieved_req_per_s"],
            "split": ["fit", "held_back", "held_back"],
            "measured": [100.0, 200.0, 2.0],
            "predicted": [110.0, 150.0, 2.2],
        }
    )
    fig = plots.sim_error(table, 0.15)
    assert len(fig.axes) == 2 and fig.axes[0].get_xscale() == "log" and len(fig.axes[1].lines) >= 2


def test_static_prefix_cache_hits_after_the_first_batch_of_a_group() -> None:
    system = _hf(batch=1)
    cost = _model(system)
    table = _table([0.0, 0.0, 0.0], 64, 2, prefix_group=np.array([0, 0, -1]), prefix_len=40)
    recs = simulate(table, StaticPolicy(system.batching, prefix_block_tokens=16), cost)
    assert [r.cached_tokens for r in recs] == [0, 32, 0]  # stored once the first batch ended; whole blocks
    no_cache = simulate(table, StaticPolicy(system.batching), cost)
    assert recs[1].prefill_end_s - recs[1].prefill_start_s < no_cache[1].prefill_end_s - no_cache[1].prefill_start_s
