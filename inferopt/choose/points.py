"""The search's points (issue 14): what one tune's capacity searches share, and how its points are run.

`PointSearch` evaluates the baseline or one proposal's value by its capacity under the SLO (`validate.capacity`),
keeps each point as it finishes (`points.jsonl`) and runs the head-to-head duels; `search_points` spends the
budget over every proposal (one by one here, or in waves of parallel points through a `PointRunner`, e.g.
Prefect workers); `search_kept` measures only what the simulator kept (`choose.pruning`).

Deliberately not here: proposing (`choose.propose`), deciding (`choose.ranking`), the result and the
recommendation YAML (`choose.search`), and anything Prefect (tasks/dispatch_points.py is the runner).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferopt.choose.duels import run_duel
from inferopt.choose.propose import Proposal, Proposals
from inferopt.choose.pruning import PrunePlan, plan_pruning, replan
from inferopt.choose.ranking import ChosenBy, Duel, Point, show_value
from inferopt.choose.sampler import PointSampler, allocate, select_points_batched
from inferopt.config import AnySystem
from inferopt.validate.capacity import CapacityResult, capacity


@dataclass(frozen=True)
class PointJob:
    """One point's capacity search to run: its index and label, the change it makes to the baseline (None: the
    baseline itself), the system that makes, and the directory its files go to."""

    index: int
    label: str
    change: dict[str, Any] | None
    system: AnySystem
    out_dir: Path


# runs the jobs (on Prefect workers: all at once, in parallel) and returns their results in the jobs' order
PointRunner = Callable[[Sequence[PointJob]], list[CapacityResult]]
ToRun = tuple[Proposal | None, int, ChosenBy]


class PointSearch:
    """What every capacity search of one tune shares, and the points so far (kept as each finishes). With
    `run_points` (dispatch to workers) points run in waves of up to `width`; without, one by one, here."""

    def __init__(self, system, workload, slo, out, budget, engine_factory, warmup_requests, run_tag, on_point):
        self.system, self.workload, self.slo, self.out, self.budget = system, workload, slo, out, budget
        self.kw = {"engine_factory": engine_factory, "warmup_requests": warmup_requests, "run_tag": run_tag}
        self.on_point = on_point
        self.points: list[Point] = []
        self.run_points: PointRunner | None = None
        self.width = 1

    def _job(self, proposal: Proposal | None, i: int, ahead: int = 0) -> PointJob:
        idx = len(self.points) + ahead
        system = self.system if proposal is None else proposal.systems[i]
        label = "baseline" if proposal is None else f"{proposal.field}-{show_value(proposal.values[i])}"
        change = None if proposal is None else {proposal.field: proposal.values[i]}
        return PointJob(idx, label, change, system, self.out / "points" / f"{idx:02d}-{slug(label)}")

    def evaluate(self, proposal: Proposal | None, i: int, how: ChosenBy) -> Point:
        """The capacity of the baseline (`proposal` None) or of the proposal's `i`-th value, kept and reported."""
        if self.run_points is not None:
            return self.evaluate_many([(proposal, i, how)])[0]
        job, b = self._job(proposal, i), self.budget.capacity
        cap = capacity(job.system, self.workload, self.slo, job.out_dir, budget=b, arm=job.label, **self.kw)
        return self._keep(job, proposal, i, how, cap)

    def evaluate_many(self, todo: Sequence[ToRun]) -> list[Point]:
        """`evaluate` for each of `todo`: through `run_points` as one wave when dispatching, else one by one."""
        if self.run_points is None or not todo:
            return [self.evaluate(p, i, how) for p, i, how in todo]
        jobs = [self._job(p, i, ahead=k) for k, (p, i, _) in enumerate(todo)]
        caps = self.run_points(jobs)
        if len(caps) != len(jobs):
            raise RuntimeError(f"tune: the point runner returned {len(caps)} results for {len(jobs)} points")
        return [self._keep(j, p, i, how, c) for j, (p, i, how), c in zip(jobs, todo, caps, strict=True)]

    def _keep(self, job: PointJob, proposal: Proposal | None, i: int, how: ChosenBy, cap: CapacityResult) -> Point:
        p = Point(
            job.index,
            proposal.remedy if proposal else "",
            proposal.field if proposal else "",
            proposal.values[i] if proposal else None,
            proposal.baseline_value if proposal else None,
            proposal.cause if proposal else "",
            bool(proposal and proposal.control),
            how if proposal else "baseline",
            job.system,
            cap,
        )
        self.points.append(p)
        with (self.out / "points.jsonl").open("a") as fh:
            fh.write(json.dumps(p.row(), default=str) + "\n")
        if self.on_point is not None:
            self.on_point(p)
        return p

    def duel(self, leader: Point, rival: Point, rate_req_per_s: float) -> Duel:
        """Both at `rate_req_per_s`, `confirm_repeats` fresh seeds each (`choose.duels.run_duel`)."""
        b = self.budget
        kw = {"workload": self.workload, "slo": self.slo, "out": self.out, "budget": b.capacity}
        return run_duel(leader, rival, rate_req_per_s, **kw, repeats=b.confirm_repeats, **self.kw)


def run_waves(s: PointSearch, order: Sequence[Proposal], shares: Sequence[int]) -> list[list[Point]]:
    """Each proposal's points, run in waves of up to `s.width`: a wave takes one new point from each lever's
    sampler in turn (TPE with the constant liar, or its grid) until it is full; the samplers are told the
    wave's results when it ends."""
    seeds = range(s.budget.seed, s.budget.seed + len(order))
    samplers = [PointSampler(p.values, k, seed, parallel=True) for p, k, seed in zip(order, shares, seeds, strict=True)]
    while True:
        wave: list[tuple[int, int, ChosenBy]] = []
        grew = True
        while grew and len(wave) < s.width:
            grew = False
            for n, sampler in enumerate(samplers):
                if len(wave) < s.width and (got := sampler.ask(1)):
                    wave.append((n, *got[0]))
                    grew = True
        if not wave:
            return [sampler.points() for sampler in samplers]
        points = s.evaluate_many([(order[n], i, how) for n, i, how in wave])
        for (n, i, _), p in zip(wave, points, strict=True):
            samplers[n].tell(i, p)


def slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)[:60]


def in_order(proposals: Proposals) -> list[Proposal]:
    """The located cause's levers first, then the slices' causes', then a control arm."""
    return sorted(proposals.proposals, key=lambda p: (p.control, p.cause != proposals.cause))


def search_points(s: PointSearch, order: Sequence[Proposal]) -> tuple[str, ...]:
    """Every proposal's points within the budget (the baseline already spent one); returns what was left out.
    Here, one proposal after another; dispatching (`s.run_points`), in waves of `s.width` points that take one
    point from each lever in turn (`_waves`), so levers are searched side by side."""
    shares = allocate([len(p.values) for p in order], s.budget.max_trials - 1)
    if s.run_points is not None:
        done = run_waves(s, order, shares)
    else:
        done = [
            select_points_batched(
                p.values, k, lambda todo, p=p: s.evaluate_many([(p, i, how) for i, how in todo]), s.budget.seed + n
            )
            for n, (p, k) in enumerate(zip(order, shares, strict=True))
        ]
    untried = []
    for proposal, k, chosen in zip(order, shares, done, strict=True):
        left = [show_value(v) for v in proposal.values if all(c.value != v for c in chosen)]
        if left:
            untried.append(
                f"{proposal.field} ({proposal.remedy}): {'every value' if k == 0 else ', '.join(left)} — the budget "
                f"of {s.budget.max_trials} trials ran out; fix: --budget {1 + sum(len(p.values) for p in order)} "
                "tries every point"
            )
    return tuple(untried)


def plan_points(s: PointSearch, base: Point, order: Sequence[Proposal]) -> PrunePlan:
    b = s.budget
    kw = {"top_k": b.prune_top_k, "frontier": b.prune_frontier, "bound": b.sim_bound}
    return plan_pruning(base, order, s.workload, s.slo, b.capacity, **kw)


def search_kept(s: PointSearch, plan: PrunePlan) -> tuple[tuple[str, ...], PrunePlan]:
    """Measure the points the simulator kept, in the search's order, within the budget; the rest are predictions
    (`PruneReport.table`), not untried points. While a kept point's prediction is an extrapolation, the model is
    refitted after each measurement (`replan`) and what it no longer keeps is not measured. Returns the kept
    points the budget left out and the last plan."""
    room = s.budget.max_trials - 1
    while (todo := [c for c in plan.to_measure() if c.label not in {p.label for p in s.points}]) and room > 0:
        wave = todo[: min(s.width, room)]  # one by one unless dispatching to workers
        s.evaluate_many([(c.proposal, c.value_index, "simulator") for c in wave])
        room -= len(wave)
        if plan.extrapolated:
            b = s.budget
            plan = replan(plan, s.points, s.workload, s.slo, b.capacity, top_k=b.prune_top_k, frontier=b.prune_frontier)
    left = [c.label for c in plan.to_measure() if c.label not in {p.label for p in s.points}]
    if not left:
        return (), plan
    fix = f"fix: --budget {s.budget.max_trials + len(left)} measures every point the simulator kept"
    why = f"{', '.join(left)} (kept by the simulator) — the budget of {s.budget.max_trials} trials ran out; {fix}"
    return (why,), plan
