"""The search pruned by the calibrated simulator (issue 18 item 4): predict the whole space, measure only what
the simulator cannot rule out, decide on measurements only.

After the baseline's capacity search, `plan_pruning` fits the simulator on the baseline's probes and judges it on
the baseline's held-back probes (`simulate.calibrate.calibrate_baseline`), predicts every candidate's capacity
under the SLO (`calibrate.simulated_capacity`) and asks `simulate.prune.prune` which to measure: the top few
(its top pick always), those that could still be the best given the simulator's error and the capacity search's
`rel_tol` (a simulated capacity is bracketed no finer), those it refuses to predict (another dtype, engine,
model) and any control arm; the predicted frontier is reported, measured only with `frontier`. An unusable
calibration prunes nothing (the plain search runs) and says so. `pruning_report` then sets every point's
prediction beside its measurement (simulated-only points marked `kind="predicted"`), the real trials against
the full grid, and whether the simulator's top pick was the measured one. Deliberately not here: running
anything (the search measures), the decision (`choose.ranking`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from inferopt.choose.propose import Proposal
from inferopt.choose.ranking import Point, ranked, show_value
from inferopt.config import SLOConfig, WorkloadConfig
from inferopt.simulate.calibrate import (
    DEFAULT_BOUND,
    Calibration,
    calibrate_baseline,
    capacity_range,
    extrapolation,
    measured_probes,
    simulated_capacity,
)
from inferopt.simulate.costs import system_fingerprint
from inferopt.simulate.observe import fitter_for
from inferopt.simulate.prune import PruneDecision, prune
from inferopt.validate.capacity import CapacityBudget, probe_requests


@dataclass(frozen=True)
class Candidate:
    """One point of the whole search space: the baseline (`proposal` None) or one value of one proposal."""

    proposal: Proposal | None
    value_index: int = 0

    @property
    def label(self) -> str:
        p = self.proposal
        return "baseline" if p is None else f"{p.field}={show_value(p.values[self.value_index])}"

    @property
    def system(self) -> Any:
        return None if self.proposal is None else self.proposal.systems[self.value_index]


def candidate_space(order: Sequence[Proposal]) -> tuple[Candidate, ...]:
    """The baseline, then every value of every proposal in the search's order: the full grid."""
    return (Candidate(None), *(Candidate(p, i) for p in order for i in range(len(p.values))))


@dataclass(frozen=True)
class PrunePlan:
    """What the simulator said before anything but the baseline was measured (`refits`: how often it was
    refitted on the points measured since, `replan`)."""

    candidates: tuple[Candidate, ...]
    decision: PruneDecision
    calibration: Calibration | None
    message: str
    refits: int = 0

    @property
    def usable(self) -> bool:
        return self.decision.usable

    def to_measure(self) -> list[Candidate]:
        """The kept points other than the baseline, in the search's order (the located cause's levers first): the
        full search's order, so that points measured by both get the same indices and a tie on capacity, broken
        by index, breaks the same way."""
        return [self.candidates[i] for i in self.decision.measure if i != 0]

    @property
    def extrapolated(self) -> bool:
        """Whether a kept point's prediction leaves what the fit measured (a refit on new points may help)."""
        t = self.decision.predicted
        return "extrapolated" in t and bool((t["extrapolated"].fillna("") != "").any())


def plan_pruning(
    base: Point,
    order: Sequence[Proposal],
    workload: WorkloadConfig,
    slo: SLOConfig,
    capacity_budget: CapacityBudget,
    *,
    top_k: int = 2,
    frontier: bool = False,
    bound: float = DEFAULT_BOUND,
) -> PrunePlan:
    """Calibrate on the measured baseline, predict every candidate, decide which to measure (module docstring)."""
    cands = candidate_space(order)
    systems = [base.system, *(c.system for c in cands[1:])]
    fitter = fitter_for(base.system)
    if fitter is None:
        why = f"no simulator reads the {base.system.engine} engine's records (per-step or per-request timings)"
        return PrunePlan(cands, prune(systems, _never, None), None, f"nothing pruned: {why}")
    sc = calibrate_baseline(base.label, base.system, base.capacity, workload, slo, capacity_budget, fitter, bound)
    cal = sc.calibration
    if cal is None:
        return PrunePlan(cands, prune(systems, _never, None), None, f"nothing pruned: {sc.message}")
    always = [i for i, c in enumerate(cands) if c.proposal is not None and c.proposal.control]
    decision = _decide(cands, systems, cal, base, workload, slo, capacity_budget, always, top_k, frontier)
    message = f"{decision.message} ({sc.message})" if decision.usable else f"nothing pruned: {sc.message}"
    return PrunePlan(cands, decision, cal, message)


def _decide(
    cands: Sequence[Candidate],
    systems: Sequence[Any],
    cal: Calibration,
    base: Point,
    workload: WorkloadConfig,
    slo: SLOConfig,
    budget: CapacityBudget,
    always: Sequence[int],
    top_k: int,
    frontier: bool,
) -> PruneDecision:
    """`prune` with this calibration's model: capacity, its range for the latency error, extrapolation."""

    def predict(system: Any) -> Any:
        return simulated_capacity(cal.cost, system, workload, slo, budget)

    def band(system: Any, err: float) -> tuple[float, float]:
        return capacity_range(cal.cost, system, workload, slo, budget, err)

    def beyond(system: Any, cap: float) -> str:
        rate = max(cap, base.capacity.req_per_s if math.isfinite(base.capacity.req_per_s) else 0.0)
        return extrapolation(cal.cost, system, workload, rate, probe_requests(budget, rate, workload.num_requests))

    kw = {"top_k": top_k, "frontier": frontier, "always": always, "resolution": budget.rel_tol}
    return prune(systems, predict, cal, band=band, extrapolation=beyond, **kw)


def replan(
    plan: PrunePlan,
    points: Sequence[Point],
    workload: WorkloadConfig,
    slo: SLOConfig,
    budget: CapacityBudget,
    *,
    top_k: int = 2,
    frontier: bool = False,
) -> PrunePlan:
    """The simulator refitted on every point measured so far whose costs it models (the baseline's fingerprint:
    other batch sizes, windows, queues; not another dtype) and the unmeasured points predicted again: the
    measured ones stay kept, the rest as `prune` now says. The calibration's errors stay those judged on the
    baseline's held-back probes. Unchanged when it cannot be refitted."""
    cal, base = plan.calibration, points[0]
    fitter = fitter_for(base.system)
    if cal is None or fitter is None or not plan.usable:
        return plan
    mine = [p for p in points if system_fingerprint(p.system) == system_fingerprint(base.system)]
    records = [r for p in mine for mp in measured_probes(p.label, p.system, p.capacity) for r in mp.records()]
    try:
        cost = fitter(records, base.system)
    except ValueError:
        return plan
    labels = {p.label for p in points}
    done = [i for i, c in enumerate(plan.candidates) if c.label in labels]
    control = [i for i, c in enumerate(plan.candidates) if c.proposal is not None and c.proposal.control]
    systems = [base.system, *(c.system for c in plan.candidates[1:])]
    refit = replace(cal, cost=cost)
    decision = _decide(plan.candidates, systems, refit, base, workload, slo, budget, done + control, top_k, frontier)
    decision.predicted.loc[[i for i in done if i], "why"] = "measured before this refit"
    n = plan.refits + 1
    message = f"{decision.message} (refitted {n}x, on the {len(mine)} measured points the model's costs cover)"
    return PrunePlan(plan.candidates, decision, refit, message, n)


def _never(system: Any) -> Any:
    raise AssertionError("no calibration: nothing is predicted")  # prune() never calls it without one


@dataclass(frozen=True)
class PruneReport:
    """The pruned search's account: `table` has one row per point of the full grid (kind measured | predicted)."""

    usable: bool
    message: str
    trials_full_grid: int
    trials_real: int
    sim_top: str | None  # the top pick among the points the simulator could predict
    measured_top: str | None
    table: pd.DataFrame

    @property
    def measured_top_predicted(self) -> bool | None:
        """Whether the simulator could predict the measured top pick at all (False: a point it refused)."""
        t = self.table
        if self.measured_top is None or "predictable" not in t:
            return None
        return bool(t.loc[t["label"] == self.measured_top, "predictable"].fillna(False).any())

    @property
    def trials_saved(self) -> int:
        return self.trials_full_grid - self.trials_real

    @property
    def same_top(self) -> bool | None:
        """Whether the simulator's top pick was the measured top pick (None when either is missing)."""
        return None if self.sim_top is None or self.measured_top is None else self.sim_top == self.measured_top

    def summary(self) -> dict[str, Any]:
        return {
            "usable": self.usable,
            "message": self.message,
            "trials_full_grid": self.trials_full_grid,
            "trials_real": self.trials_real,
            "trials_saved": self.trials_saved,
            "sim_top": self.sim_top,
            "measured_top": self.measured_top,
            "sim_top_is_measured_top": self.same_top,
            "measured_top_predicted": self.measured_top_predicted,
        }

    def metrics(self) -> dict[str, float]:
        out = {
            "tune.prune.usable": float(self.usable),
            "tune.prune.trials_full_grid": float(self.trials_full_grid),
            "tune.prune.trials_real": float(self.trials_real),
            "tune.prune.trials_saved": float(self.trials_saved),
        }
        if self.same_top is not None:
            out["tune.prune.sim_top_is_measured_top"] = float(self.same_top)
        return out


def _sim_top(plan: PrunePlan) -> str | None:
    t = plan.decision.predicted
    if "predictable" not in t:
        return None
    rivals = [
        i
        for i, c in enumerate(plan.candidates)
        if i and t["predictable"][i] and not (c.proposal and c.proposal.control)
    ]
    cap = t["predicted_capacity_req_per_s"]
    return plan.candidates[min(rivals, key=lambda i: (-cap[i], i))].label if rivals else None


def pruning_report(plan: PrunePlan, points: Sequence[Point]) -> PruneReport:
    """Every point of the grid, predicted beside measured; the trials it took; the top picks compared."""
    measured = {p.label: p for p in points}
    rows = []
    for i, c in enumerate(plan.candidates):
        pred = plan.decision.predicted.iloc[i].to_dict() if i < len(plan.decision.predicted) else {}
        p = measured.get(c.label)
        rows.append(
            {
                **pred,
                "point": i,
                "label": c.label,
                "kind": "measured" if p is not None else "predicted",
                "measured_capacity_req_per_s": p.capacity.req_per_s if p is not None else math.nan,
                "measured_status": p.capacity.status if p is not None else "",
            }
        )
    order = ranked(points)
    return PruneReport(
        usable=plan.usable,
        message=plan.message,
        trials_full_grid=len(plan.candidates),
        trials_real=len(points),
        sim_top=_sim_top(plan),
        measured_top=order[0].label if order and math.isfinite(order[0].capacity.req_per_s) else None,
        table=pd.DataFrame(rows),
    )
