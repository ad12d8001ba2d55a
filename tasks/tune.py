"""Prefect task for the search (issue 14): `inferopt.choose.search.tune`, logged as it goes — a child run per point
as its capacity search finishes (`point-NN`: its probes, rate/latency curve and bracket) — then the baseline's
measure, located cause and proposals (`1-measure`, `2-locate`, `3-propose`) and on the parent run the points table
sorted by capacity, the frontier figure, `tune.json` and the recommendation YAML; then the simulator calibrated on
the points (`sim_*`: predicted vs measured per held-back probe, its plot, and the replica plan, labelled predicted)
and, when the search was pruned, every point of the grid predicted beside measured (`points_predicted.parquet`).

After the chain (`log_chain`): its outcome (`chain.json`, the verdict tags, each judged run tagged with this
run's id) and the search's report.html. Deliberately not here: any decision or measurement (the core's).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from prefect import task

from inferopt.choose.ranking import Point
from inferopt.choose.search import PointRunner, TuneBudget, TuneResult, tune
from inferopt.config import AnySystem, HardwareConfig, SLOConfig, WorkloadConfig
from inferopt.config.knob_spaces import KnobSpace
from inferopt.locate import profile_enabled
from inferopt.report import plots
from inferopt.report.rundir import load_run_dir
from inferopt.report.tune_report import build_tune_report
from inferopt.simulate.calibrate import calibrate_search
from inferopt.simulate.observe import fitter_for
from inferopt.simulate.plan import replica_plan
from inferopt.validate.capacity import CapacityBudget
from inferopt.verdict.tuned import ChainOutcome
from tasks.log_steps import log_locate, log_measure
from tasks.report import NOTE, REPORT
from tasks.tracking import Tracker

MEASURE, LOCATE, PROPOSE = "1-measure", "2-locate", "3-propose"


@task(name="tune", task_run_name="tune: measure, locate, propose, capacity per point")
def tune_task(
    configs: tuple[AnySystem, WorkloadConfig, SLOConfig, HardwareConfig],
    budget: TuneBudget,
    tracker: Tracker,
    spaces: Sequence[KnobSpace] | None = None,
    run_points: PointRunner | None = None,
    parallel: int = 1,
) -> TuneResult:
    system, workload, slo, hardware = configs
    result = tune(
        system,
        workload,
        slo,
        hardware,
        tracker.dir_for("tune"),
        budget=budget,
        spaces=spaces,
        on_point=lambda p: log_point(tracker, p),
        profile=profile_enabled(),
        run_tag=tracker.parent_run_id,
        run_points=run_points,
        parallel=parallel,
    )
    log_baseline(tracker, result)
    log_result(tracker, result)
    log_pruning(tracker, result)
    log_simulator(tracker, result, workload, slo, budget.capacity)
    return result


def log_point(tracker: Tracker, p: Point) -> None:
    """One child run per point: what it changes, its capacity and bracket, its probes and curve."""
    name = f"point-{p.index:02d}"
    tags = {"inferopt.step": "tune", "inferopt.point": p.label, "inferopt.proposal": p.remedy or "baseline"}
    tracker.child(name, tags={**tags, "inferopt.chosen_by": p.chosen_by, "inferopt.capacity": p.capacity.status})
    row = p.row()
    tracker.params({k: row[k] for k in ("field", "value", "baseline_value", "cause", "control", "chosen_by")}, name)
    tracker.metrics({**p.capacity.metrics(), **{k: v for k, v in row.items() if isinstance(v, float)}}, name)
    tracker.tags({"inferopt.capacity_message": p.capacity.message[:4000]}, name)
    c = p.capacity
    if len(c.table()):
        tracker.table(c.table(), "probes.parquet", name)
        curve = plots.capacity_curve(c.table(), c.slo_bounds_ms, (c.lo_req_per_s, c.hi_req_per_s))
        tracker.figure(curve, "capacity_curve.png", name)
    tracker.finish(name)


def log_baseline(tracker: Tracker, r: TuneResult) -> None:
    """The baseline at the production rate as the optimize flow logs it (`1-measure`, `2-locate`), and what was
    proposed for its cause and what not, with why (`3-propose`)."""
    for name, step, log, result in (
        (MEASURE, "measure", log_measure, r.measured),
        (LOCATE, "locate", log_locate, r.located),
    ):
        tracker.child(name, tags={"inferopt.step": step, "inferopt.arm": "baseline"})
        log(tracker, result, name)
        tracker.finish(name)
    tracker.child(PROPOSE, tags={"inferopt.step": "propose", "inferopt.cause": r.cause})
    if len(r.proposals.table()):
        tracker.table(r.proposals.table(), "proposals.parquet", PROPOSE)
    tracker.json({"message": r.proposals.message, "not_proposed": r.proposals.not_proposed}, "proposals.json", PROPOSE)
    tracker.finish(PROPOSE)


def log_result(tracker: Tracker, r: TuneResult) -> None:
    """On the parent run: every point (sorted by capacity), the frontier, the summary and the recommendation."""
    tracker.tags({"inferopt.tune.decision": r.decision, "inferopt.tune.message": r.message[:4000]})
    if r.recommended is not None:
        tracker.tags({"inferopt.tune.recommended": r.recommended.label})
    tracker.metrics(r.metrics())
    tracker.json(r.summary(), "tune.json")
    if r.points:
        table = r.table()
        tracker.table(table, "points.parquet")
        tracker.figure(plots.frontier(table, r.slo_bounds_ms), "frontier.png")
    if r.recommendation_path:
        tracker.file(r.recommendation_path)


def log_pruning(tracker: Tracker, r: TuneResult) -> None:
    """With pruning: every point of the grid (measured beside predicted; simulated-only ones `kind=predicted`),
    the trials saved and whether the simulator's top pick was the measured top pick (metrics: `r.metrics()`)."""
    p = r.pruning
    if p is None:
        return
    same = "unknown" if p.same_top is None else str(p.same_top).lower()
    tags = {"inferopt.tune.prune_message": p.message[:4000], "inferopt.tune.sim_top_is_measured_top": same}
    tracker.tags({**tags, "inferopt.tune.sim_top": str(p.sim_top), "inferopt.tune.measured_top": str(p.measured_top)})
    tracker.json(p.summary(), "pruning.json")
    if len(p.table):
        tracker.table(p.table, "points_predicted.parquet")


def log_simulator(
    tracker: Tracker, r: TuneResult, workload: WorkloadConfig, slo: SLOConfig, budget: CapacityBudget
) -> None:
    """The simulator fitted on the baseline's probes and judged on the other points' (`inferopt.simulate`)."""
    base = r.baseline
    fitter = fitter_for(base.system) if base is not None else None
    if fitter is None:
        tracker.tags({"inferopt.sim.message": "no simulator fit for this engine's records (per-step timings needed)"})
        return
    points = [(p.label, p.system, p.capacity) for p in r.points]
    out = calibrate_search(points, workload, slo, budget, fitter)
    tracker.tags({"inferopt.sim.message": out.message[:4000]})
    cal = out.calibration
    if cal is None:
        return
    tracker.tags({"inferopt.sim.usable": str(cal.usable).lower()})
    tracker.metrics(cal.metrics())
    tracker.json(cal.cost.summary(), "sim_cost_model.json")
    tracker.table(cal.table, "sim_error.parquet")
    if len(cal.capacity):
        tracker.table(cal.capacity, "sim_capacity_error.parquet")
    tracker.figure(plots.sim_error(cal.table, cal.bound), "sim_error.png")
    plan = replica_plan(cal.cost, base.system, workload, slo, budget, (1, 2, 4), calibration=cal)
    tracker.table(plan, "sim_replica_plan.parquet")


def log_chain(tracker: Tracker, r: TuneResult, outcome: ChainOutcome) -> None:
    """On the parent run: the final word (`chain.json`; tags `inferopt.verdict` — the first judged point's
    verdict, or "none" — `inferopt.tune.chain`, the proven point and its run), each judged optimize run tagged
    back with this run's id, then the report and the run's description."""
    tracker.json(outcome.to_dict(), "chain.json")
    first = outcome.judged[0].decision if outcome.judged else "none"
    tags = {
        "inferopt.verdict": first,
        "inferopt.tune.chain": outcome.decision,
        "inferopt.tune.chain_message": outcome.message[:4000],
    }
    if outcome.proven is not None:
        tags |= {
            "inferopt.tune.proven": outcome.proven.label,
            "inferopt.tune.verdict_run_id": str(outcome.proven.run_id),
        }
    tracker.tags(tags)
    for j in outcome.judged:
        if j.run_id:
            tracker.client.set_tag(j.run_id, "inferopt.tune_run_id", tracker.parent_run_id)
    try:
        path = tracker.results_dir / REPORT
        path.write_text(build_tune_report(load_run_dir(tracker.results_dir)), encoding="utf-8")
        tracker.file(path, copy=False)
    except Exception as err:  # noqa: BLE001 - a broken report must not turn a decided search into an error
        print(f"[tune] FAILED to build the report: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
        tracker.tags({"inferopt.report": f"failed: {type(err).__name__}: {err}"})
        return
    href = f"#/experiments/{tracker.experiment_id}/runs/{tracker.parent_run_id}/artifacts/{REPORT}"
    head = f"**SEARCH: {r.decision.upper()} · CHAIN: {outcome.decision.upper()}** — [open the report]({href})"
    tracker.tags({"inferopt.report": REPORT, NOTE: f"{head}\n\n{outcome.message}\n\n{r.message}"[:4800]})
