"""The search pruned by the calibrated simulator (issue 18 item 4): the baseline's own probes calibrate it, it
predicts the whole grid, only what it keeps is measured, the decision uses measurements only, an unusable
calibration prunes nothing, a system it cannot predict (another engine, another dtype) is measured with the
refusal said, and every point of the grid is reported, predicted or measured.

Capacity searches run on the simulator with a planted truth (records written as a measured search leaves them),
so the whole search takes seconds; the fake engine runs only the baseline's measure step."""

from __future__ import annotations

import dataclasses
import json
import math

import pandas as pd
import pytest
from test_tune import HW  # fixed roofs: no run-time micro-benchmark

from inferopt.choose import duels, points
from inferopt.choose.pruning import PrunePlan, candidate_space, plan_pruning
from inferopt.choose.search import TuneBudget, custom_space, tune
from inferopt.config import ConstantArrivals, FakeSystem, LengthConfig, SLOConfig, WorkloadConfig
from inferopt.config.systems import BatchingKnobs
from inferopt.records import RecordSink
from inferopt.simulate.calibrate import Calibration, calibrate_baseline, simulated_capacity, simulated_run
from inferopt.simulate.costs import DECODE_FEATURES, PREFILL_FEATURES, CostModel, Fit, cost_fields, system_fingerprint
from inferopt.simulate.observe import fit_static
from inferopt.simulate.prune import prune, tie_share
from inferopt.validate.capacity import CapacityBudget

SLO = SLOConfig(name="test", ttft_p99_ms=200, tpot_p95_ms=50)
CAPACITY = CapacityBudget(max_probes=5, rel_tol=0.1, requests_per_probe=24)
WL = WorkloadConfig(
    name="prune",
    seed=3,
    num_requests=24,
    arrival=ConstantArrivals(rate_per_s=200.0),
    lengths=LengthConfig(input_median=16, input_sigma=0, output_median=4, output_sigma=0),
)


def fake(batch: int = 1, **kw) -> FakeSystem:
    return FakeSystem(
        name="fake-prune",
        context_ms=0.0,
        prefill_base_ms=5.0,
        prefill_ms_per_token=0.0,
        decode_step_ms=1.0,
        decode_ms_per_seq=0.0,
        jitter_cv=0.0,
        batching=BatchingKnobs(max_batch_size=batch, batch_wait_ms=0.0),
        **kw,
    )


def truth(system, scale: float = 1.0) -> CostModel:
    """The planted step costs (what the fake above scripts): 5 ms a batch's prefill, 1 ms a decode step."""
    return CostModel(
        engine=system.engine,
        fingerprint=system_fingerprint(system),
        system_name=system.name,
        prefill=Fit(PREFILL_FEATURES, (0.005 * scale, 0.0, 0.0), (), 1.0, 0),
        decode=Fit(DECODE_FEATURES, (0.001 * scale, 0.0, 0.0), (), 1.0, 0),
        fields_json=json.dumps(cost_fields(system), sort_keys=True),
    )


def measured_capacity(system, workload, slo, out_dir, *, budget, arm="capacity", **_):
    """A capacity search 'measured' on the planted truth: its probes' records on disk, as a real search's are."""
    result = simulated_capacity(truth(system), system, workload, slo, budget)
    probes = []
    for p in result.probes:
        run, _ = simulated_run(truth(system), system, workload, p.offered_req_per_s, budget.requests_per_probe, 3)
        path = out_dir / f"probe-{p.index}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with RecordSink(path, fsync=False) as sink:
            for r in run.records:
                sink.write(dataclasses.replace(r, trial=p.index, scenario=arm))
        probes.append(dataclasses.replace(p, records_path=str(path)))
    return dataclasses.replace(result, probes=tuple(probes))


@pytest.fixture
def simulated_engine(monkeypatch):
    monkeypatch.setattr(points, "capacity", measured_capacity)
    monkeypatch.setattr(duels, "capacity", measured_capacity)


@pytest.fixture(scope="module")
def pruned(tmp_path_factory):
    """One pruned search of the planted queue-bound fake (shared: the search and its logging are read twice)."""
    out = tmp_path_factory.mktemp("pruned")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(points, "capacity", measured_capacity)
        mp.setattr(duels, "capacity", measured_capacity)
        return out, _tune(out, True)


def _tune(tmp_path, prune_on: bool, batches=(2, 4, 8), queues=(4,)):
    budget = TuneBudget(max_trials=30, capacity=CAPACITY, confirm_repeats=1, prune=prune_on)
    base = fake()
    spaces = [custom_space(base, "batching.max_batch_size", batches), custom_space(base, "batching.max_queue", queues)]
    return tune(base, WL, SLO, HW, tmp_path, budget=budget, spaces=spaces, warmup_requests=0)


def test_the_pruned_search_measures_fewer_points_and_decides_on_measurements(pruned):
    tmp_path, pruned = pruned
    assert pruned.cause == "queueing"
    p = pruned.pruning
    assert p is not None and p.usable, p.message
    grid = ["baseline", *(f"batching.max_batch_size={b}" for b in (2, 4, 8)), "batching.max_queue=4"]
    assert p.trials_full_grid == len(grid) and p.trials_real == len(pruned.points) < len(grid)
    assert p.trials_saved == p.trials_full_grid - p.trials_real > 0
    # every grid point reported: the measured ones as measured, the rest as predictions
    kinds = p.table.set_index("label")["kind"]
    assert list(kinds.index) == grid
    assert {lab for lab, k in kinds.items() if k == "measured"} == {pt.label for pt in pruned.points}
    assert (kinds == "predicted").sum() == p.trials_saved
    assert p.table.loc[p.table["kind"] == "predicted", "measured_capacity_req_per_s"].isna().all()
    # the decision is the measured one: a recommendation is a measured point, the simulator's top pick is measured
    assert pruned.recommended is not None and pruned.recommended.label in {pt.label for pt in pruned.points}
    assert p.sim_top == "batching.max_batch_size=8" and p.same_top is True  # the simulator picked the truth too
    assert p.measured_top_predicted is True
    assert pruned.recommended.label == "batching.max_batch_size=8"  # the planted truth: one prefill a batch
    assert all(pt.chosen_by == "simulator" for pt in pruned.points[1:])
    # reported: tune.json, the metrics, the predictions file (one line per grid point)
    saved = json.loads((tmp_path / "tune.json").read_text())["pruning"]
    assert saved["trials_saved"] == p.trials_saved and saved["sim_top_is_measured_top"] == p.same_top
    assert pruned.metrics()["tune.prune.trials_saved"] == p.trials_saved
    lines = (tmp_path / "points_predicted.jsonl").read_text().splitlines()
    assert len(lines) == p.trials_full_grid and "saved" in pruned.message


def test_an_unusable_calibration_prunes_nothing_and_says_so(tmp_path, simulated_engine, monkeypatch):
    def slow_fitter(records, system):  # fitted three times too slow: held-back errors far above the bound
        m = fit_static(records, system)
        return dataclasses.replace(m, decode=truth(system, 3.0).decode, prefill=truth(system, 3.0).prefill)

    monkeypatch.setattr("inferopt.choose.pruning.fitter_for", lambda system: slow_fitter)
    r = _tune(tmp_path, True, batches=(4,))
    p = r.pruning
    assert p is not None and not p.usable and "nothing pruned" in p.message and "unusable" in p.message
    assert p.trials_real == p.trials_full_grid and (p.table["kind"] == "measured").all()
    assert p.table["predictable"].all()  # still predicted and reported, only not used to prune


def test_calibration_on_the_baseline_holds_back_its_other_rates(tmp_path):
    system = fake(batch=2)
    result = measured_capacity(system, WL, SLO, tmp_path, budget=CAPACITY, arm="base")
    out = calibrate_baseline("baseline", system, result, WL, SLO, CAPACITY, fit_static)
    cal = out.calibration
    assert cal is not None and cal.usable, out.message
    assert cal.probes_fit + cal.probes_held_back == len(result.probes) and cal.probes_held_back >= 1
    assert "other rates" in out.message and math.isfinite(cal.capacity_rel_err)
    one = dataclasses.replace(result, probes=result.probes[:1])
    assert calibrate_baseline("baseline", system, one, WL, SLO, CAPACITY, fit_static).calibration is None


def _cal(usable: bool = True) -> Calibration:
    return Calibration(truth(fake()), pd.DataFrame(), pd.DataFrame(), {}, {}, 0.05, 3, 3, 0.15, usable, "planted")


def test_points_the_simulator_refuses_are_measured_with_the_refusal_said():
    base = fake()
    slower = fake(transport_delay_ms=3.0)  # a cost-relevant field no prior carries: the model refuses it
    space = [base, fake(batch=2), fake(batch=4), fake(batch=8), slower]
    cost = truth(base)
    decision = prune(space, lambda s: simulated_capacity(cost, s, WL, SLO, CAPACITY), _cal(), top_k=1, frontier=False)
    row = decision.predicted.iloc[4]
    assert not row["predictable"] and "cost-relevant field" in row["refusal"] and "cannot predict" in row["why"]
    assert 4 in decision.measure and 0 in decision.measure and decision.skipped
    assert decision.predicted.loc[list(decision.skipped), "why"].str.startswith("pruned").all()


def test_a_model_of_one_engine_refuses_another_engines_system_in_the_search():
    hf_cost = dataclasses.replace(truth(fake()), engine="hf", system_name="hf-tiny")
    space = [fake(), fake(batch=2)]
    decision = prune(space, lambda s: simulated_capacity(hf_cost, s, WL, SLO, CAPACITY), _cal())
    assert not decision.predicted["predictable"].any() and decision.measure == (0, 1)
    assert decision.predicted["refusal"].str.contains("fitted on the 'hf' engine.*cannot predict", regex=True).all()


def test_control_arms_are_always_measured_and_the_frontier_can_be_left_out():
    space = [fake(batch=b) for b in (1, 2, 8, 16)]
    cost = truth(space[0])
    cache = {}

    def predict(s):  # each point simulated once for the three decisions below
        b = s.batching.max_batch_size
        return cache[b] if b in cache else cache.setdefault(b, simulated_capacity(cost, s, WL, SLO, CAPACITY))

    lean = prune(space, predict, _cal(), top_k=1, frontier=False, always=(1,))
    assert 1 in lean.measure and lean.predicted.loc[1, "why"] == "declared control arm"
    wide = prune(space, predict, _cal(), top_k=1, frontier=True)
    assert set(lean.measure) - {1} <= set(wide.measure)
    assert prune(space, predict, _cal(usable=False)).measure == tuple(range(len(space)))


def test_the_candidate_space_is_the_full_grid_with_labels():
    class P:  # the two fields a candidate reads of a proposal
        field, values, systems, control = "batching.max_batch_size", (2, 4), (fake(2), fake(4)), False

    cands = candidate_space([P()])
    assert [c.label for c in cands] == ["baseline", "batching.max_batch_size=2", "batching.max_batch_size=4"]
    assert cands[0].system is None and cands[2].system.batching.max_batch_size == 4


def test_no_simulator_for_the_engine_prunes_nothing(monkeypatch):
    monkeypatch.setattr("inferopt.choose.pruning.fitter_for", lambda system: None)

    class Base:
        label, system = "baseline", fake()

    plan = plan_pruning(Base(), [], WL, SLO, CAPACITY)
    assert not plan.usable and "no simulator reads the fake engine" in plan.message and plan.to_measure() == []


def test_the_flow_logs_every_point_predicted_or_measured(pruned):
    from tasks.tune import log_pruning  # the MLflow wiring (tasks/), with a stub tracker

    class Stub:
        def __init__(self):
            self.tags_, self.jsons, self.tables = {}, {}, {}

        def tags(self, tags, name=None):
            self.tags_.update(tags)

        def json(self, data, filename, name=None):
            self.jsons[filename] = data

        def table(self, df, filename, name=None):
            self.tables[filename] = df

    r = pruned[1]
    tracker = Stub()
    log_pruning(tracker, r)
    table = tracker.tables["points_predicted.parquet"]
    assert len(table) == r.pruning.trials_full_grid and set(table["kind"]) == {"measured", "predicted"}
    assert tracker.jsons["pruning.json"]["trials_saved"] == r.pruning.trials_saved
    assert tracker.tags_["inferopt.tune.sim_top_is_measured_top"] in ("true", "false")
    log_pruning(Stub(), dataclasses.replace(r, pruning=None))  # an unpruned search logs nothing of it


def test_a_point_may_still_be_the_best_within_the_error_and_one_bracket():
    assert tie_share(0.0, 0.0) == 0.0 and tie_share(0.0, 0.15) == pytest.approx(1 - 1 / 1.15)
    assert tie_share(0.05, 0.0) == pytest.approx(1 - 0.95 / 1.05) and tie_share(0.05, 0.15) > tie_share(0.05, 0.0)
    # one bisection step below the best (5.5 vs 6.5 req/s at rel_tol 0.15, an exact model): told apart
    assert 5.5 < 6.5 * (1 - tie_share(0.0, 0.15)) < 5.7


def test_a_point_predicted_to_be_the_baseline_again_is_not_measured_for_the_frontier():
    waits = fake().model_copy(update={"batching": BatchingKnobs(max_batch_size=1, batch_wait_ms=5.0)})
    space = [fake(), waits, fake(batch=2), fake(batch=8)]  # a wait window at batch size 1 changes nothing
    cost = truth(space[0])
    d = prune(space, lambda s: simulated_capacity(cost, s, WL, SLO, CAPACITY), _cal(), top_k=2, frontier=True)
    t = d.predicted
    assert t.loc[1, "predicted_capacity_req_per_s"] == t.loc[0, "predicted_capacity_req_per_s"]
    assert not t.loc[1, "frontier"] and 1 in d.skipped and t.loc[1, "why"].startswith("pruned")
    assert {0, 2, 3} <= set(d.measure)


def test_a_batch_one_baseline_extrapolates_so_the_search_refits_on_what_it_measures(pruned):
    """The baseline ran batches of one: its fit cannot split a batch's constant from its per-token cost, so
    every larger batch is an extrapolation and measured until a refit on a measured batch size can say."""
    _, result = pruned
    p = result.pruning
    assert "refitted" in p.message, p.message
    t = p.table.set_index("label")
    assert not t["extrapolated"].fillna("").astype(bool).any()  # after the refit, nothing left extrapolated
    assert t.loc["batching.max_queue=4", "kind"] == "predicted"  # predicted at the baseline's batch: not measured
    assert "measured before this refit" in set(t["why"])


def _planted_frontier(frontier: bool):
    """Batch sizes 1 (baseline), 2, 4, 8 with planted capacities 1, 1.5, 3, 4 req/s and a decode step that grows
    with the batch (1 ms + 2 ms a sequence): the smaller batches are faster per user, so 2 and 4 are on the
    predicted frontier, but far below the best beyond a 5 % error."""
    space = [fake(batch=b) for b in (1, 2, 4, 8)]
    cost = dataclasses.replace(truth(space[0]), decode=Fit(DECODE_FEATURES, (0.001, 0.002, 0.0), (), 1.0, 0))
    caps = {1: 1.0, 2: 1.5, 4: 3.0, 8: 4.0}

    def predict(s):
        return dataclasses.replace(
            simulated_capacity(cost, s, WL, SLO, CAPACITY), req_per_s=caps[s.batching.max_batch_size]
        )

    return prune(space, predict, _cal(), top_k=1, frontier=frontier)


def test_the_frontier_is_reported_always_and_measured_only_when_asked():
    lean, wide = _planted_frontier(False), _planted_frontier(True)
    assert lean.predicted["frontier"].tolist() == wide.predicted["frontier"].tolist()
    assert lean.predicted.loc[[1, 2], "frontier"].all()  # faster per user than the best: on the frontier
    assert lean.measure == (0, 3)  # the baseline and the top pick: 1.5 and 3 req/s cannot be the pick
    assert lean.predicted.loc[2, "why"].startswith("pruned") and "cannot be the pick" in lean.predicted.loc[2, "why"]
    assert f"frontier ({int(lean.predicted['frontier'].sum())} points) reported, not measured" in lean.message
    assert wide.measure == (0, 1, 2, 3) and "on the predicted frontier" in wide.predicted.loc[2, "why"]


def test_the_kept_points_are_measured_in_the_full_searchs_order_the_top_pick_among_them():
    """A tie on capacity breaks by the order points were measured in, so the pruned search keeps the full
    search's order (not the simulator's ranking): 8 is the simulator's top pick but is measured after 2."""

    class P:  # the fields a candidate reads of a proposal
        field, values, systems, control = "batching.max_batch_size", (2, 4, 8), (fake(2), fake(4), fake(8)), False

    cands = candidate_space([P()])
    caps = {1: 1.0, 2: 3.9, 4: 2.0, 8: 4.0}  # 8 is the top pick; 2 is within the error of it; 4 is not

    def predict(s):
        return dataclasses.replace(_result_of(s), req_per_s=caps[s.batching.max_batch_size])

    plan = PrunePlan(cands, prune([fake(), *P.systems], predict, _cal(), top_k=1), None, "planted")
    assert [c.label for c in plan.to_measure()] == ["batching.max_batch_size=2", "batching.max_batch_size=8"]


def _result_of(s):
    return simulated_capacity(truth(s), s, WL, SLO, CAPACITY)
