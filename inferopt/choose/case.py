"""The seed's case decided beyond noise (issue 14 item 5): each strategy's capacity under the interactive SLO.

One run at the case's offered load cannot rank strategies that both serve what arrives (two runs once chose
differently on 111.9 vs 108.1 tok/s). Here every strategy gets a capacity search on the case's mixed load
(`case_study.case_load`: every tenant's rate times one factor, the SLO judging the interactive requests,
`validate.capacity`), and `decide_by_capacity` ranks them: the leader wins only when its bracket lies above
the runner-up's and a head-to-head at a rate between them (fresh seeds, `choose.duels`) confirms it; else it
is a tie, broken by cost per successful request at capacity (the deployment's price per hour over its
goodput there), and the message says so. No strategy meeting the SLO at any rate chooses nothing.

Deliberately not here: the seed's one-run table (`case_study`), printing (`benchmarks/case_table.py`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from inferopt.choose.duels import run_duel
from inferopt.choose.ranking import Duel, Point, between_rates, beyond_brackets
from inferopt.config.case import CaseConfig
from inferopt.engines import EngineFactory, make_engine
from inferopt.validate.capacity import CapacityBudget, CapacityResult, capacity
from inferopt.validate.case_study import case_load, strategy_slug

CaseDecisionKind = Literal["winner", "tie", "none_meets"]
DuelFn = Callable[[str, str, float], Duel]  # (leader, rival, rate) -> their head-to-head


@dataclass(frozen=True)
class CaseCapacity:
    """One strategy's capacity under the SLO on the case's load, and its cost per successful request there."""

    strategy: str
    capacity: CapacityResult
    price_per_hour_usd: float

    @property
    def cost_per_1k_ok_usd(self) -> float:
        """The price of 1000 requests meeting the SLO at capacity (the interactive goodput there); NaN if none."""
        p = self.capacity.at_capacity()
        good = p.goodput_req_per_s if p is not None else math.nan
        return 1000.0 * self.price_per_hour_usd / 3600.0 / good if good > 0 else math.nan

    def text(self) -> str:
        return f"{self.strategy} {self.capacity.text()}"


@dataclass(frozen=True)
class CaseCapacityDecision:
    decision: CaseDecisionKind
    chosen: str | None
    tied: tuple[str, ...]
    duels: tuple[Duel, ...]
    message: str


def _key(c: CaseCapacity) -> float:
    x = c.capacity.req_per_s
    return x if math.isfinite(x) else -math.inf


def _cost_key(c: CaseCapacity) -> tuple[float, float]:
    cost = c.cost_per_1k_ok_usd
    return (cost if math.isfinite(cost) else math.inf, -_key(c))


def decide_by_capacity(caps: Sequence[CaseCapacity], duel: DuelFn) -> CaseCapacityDecision:
    """Rank by capacity; a winner clears the runner-up's bracket and wins their head-to-head, else a tie among
    the leader and every strategy it does not clear, broken by cost per successful request (said so)."""
    order = sorted(caps, key=lambda c: -_key(c))
    if not order or order[0].capacity.lo_req_per_s is None:
        why = "; ".join(f"{c.strategy}: {c.capacity.message}" for c in order)
        return CaseCapacityDecision("none_meets", None, (), (), f"no strategy meets the SLO at any rate probed: {why}")
    leader, rivals = order[0], order[1:]
    if not rivals:
        return CaseCapacityDecision("winner", leader.strategy, (), (), f"{leader.text()}: the only strategy")
    runner, duels = rivals[0], []
    if beyond_brackets(leader.capacity, runner.capacity):
        duels.append(duel(leader.strategy, runner.strategy, between_rates(runner.capacity, leader.capacity)))
        if duels[0].confirmed:
            msg = f"{leader.text()} beats the runner-up {runner.text()} beyond noise: {duels[0].sentence()}"
            return CaseCapacityDecision("winner", leader.strategy, (), tuple(duels), msg)
    tied = [leader, runner, *(r for r in rivals[1:] if not beyond_brackets(leader.capacity, r.capacity))]
    chosen = min(tied, key=_cost_key)
    why = duels[0].sentence() if duels else _not_apart(leader.capacity, runner.capacity)
    costs = ", ".join(f"{c.strategy} ${c.cost_per_1k_ok_usd:.4g}" for c in tied)
    msg = (
        f"tie: {'; '.join(c.text() for c in tied)} are not apart beyond noise ({why}); broken by cost per 1000 "
        f"requests meeting the SLO at capacity ({costs}): {chosen.strategy}"
    )
    return CaseCapacityDecision("tie", chosen.strategy, tuple(c.strategy for c in tied), tuple(duels), msg)


def _not_apart(leader: CapacityResult, runner: CapacityResult) -> str:
    """Why the leader's bracket does not clear the runner-up's, in words."""
    sure = leader.sure_lo_req_per_s
    if sure == leader.lo_req_per_s:
        return "their capacity brackets overlap"
    held = f"{sure:.4g} req/s" if sure is not None else "no rate"
    return f"the leader's boundary repeat failed and what it held every time ({held}) does not clear the runner-up"


def case_capacity(
    case: CaseConfig,
    out_dir: str | Path,
    *,
    budget: CapacityBudget,
    duel_repeats: int = 2,
    price_per_hour_usd: float | Mapping[str, float] = 0.10,
    only: tuple[str, ...] = (),
    engine_factory: EngineFactory = make_engine,
) -> tuple[list[CaseCapacity], CaseCapacityDecision]:
    """Every strategy's (or `only` those's) capacity search on the case's load, then the decision with its
    duels; records under `out_dir/<strategy>/capacity/` and `out_dir/duels/`. A strategy that does not start
    is a failed search (no capacity) and the others still run."""
    load, out = case_load(case), Path(out_dir)
    names = [n for n in case.strategies if not only or n in only]
    systems = {n: case.strategies[n].system(strategy_slug(n)) for n in names}
    common: dict[str, Any] = {"warmup_requests": case.warmup_requests, "engine_factory": engine_factory}
    caps = []
    for name in names:
        price = price_per_hour_usd if isinstance(price_per_hour_usd, float | int) else price_per_hour_usd[name]
        where = out / strategy_slug(name) / "capacity"
        res = capacity(systems[name], load, case.slo, where, budget=budget, arm=name, run_tag=case.name, **common)
        caps.append(CaseCapacity(name, res, float(price)))
    by_name = {c.strategy: c for c in caps}

    def duel(leader: str, rival: str, rate: float) -> Duel:
        pts = [_point(names.index(n) + 1, n, systems[n], by_name[n].capacity) for n in (leader, rival)]
        d = run_duel(*pts, rate, workload=load, slo=case.slo, out=out, budget=budget, repeats=duel_repeats, **common)
        return replace(d, leader=leader, rival=rival)

    return caps, decide_by_capacity(caps, duel)


def _point(index: int, name: str, system: Any, cap: CapacityResult) -> Point:
    return Point(index, "", "strategy", name, "", "", False, "grid", system, cap)


def capacity_rows(caps: Sequence[CaseCapacity]) -> list[dict[str, Any]]:
    """One row per strategy (JSON values): its capacity bracket, status, goodput and cost at capacity."""
    rows = []
    for c in caps:
        p, r = c.capacity.at_capacity(), c.capacity
        rows.append(
            {
                "strategy": c.strategy,
                "capacity_req_per_s": r.req_per_s if math.isfinite(r.req_per_s) else None,
                "capacity_lo": r.lo_req_per_s,
                "capacity_hi": r.hi_req_per_s,
                "status": r.status,
                "probes": len(r.probes) + len(r.repeats),
                "goodput_req_per_s": p.goodput_req_per_s if p is not None else None,
                "cost_per_1k_ok_usd": c.cost_per_1k_ok_usd if math.isfinite(c.cost_per_1k_ok_usd) else None,
                "message": r.message,
            }
        )
    return rows
