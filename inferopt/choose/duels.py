"""Head-to-head confirmation of a capacity gain (issue 14): two points of a search at one offered rate, between
their brackets (`choose.ranking.between`), each on the same fresh seeds of the workload; the gain holds beyond
noise when the leader passes every repeat and the rival fails every one (`choose.ranking.Duel`).

Deliberately not here: which pairs duel and what a duel decides (`choose.ranking.decide`), and the search loop.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from inferopt.choose.ranking import Duel, Point
from inferopt.config import SLOConfig
from inferopt.validate.capacity import CapacityBudget, Load, capacity, reseeded

SEED_OFFSET = 1000  # duel seeds: the workload's seed + this + k, never the seeds the capacity searches used


def run_duel(
    leader: Point,
    rival: Point,
    rate_req_per_s: float,
    *,
    workload: Load,
    slo: SLOConfig,
    out: Path,
    budget: CapacityBudget,
    repeats: int,
    **run_kw: Any,
) -> Duel:
    """Both at `rate_req_per_s`, `repeats` fresh seeds each (one probe per seed, of `budget`'s probe size);
    each probe's records under `out/duels/LL-vs-RR/`. `run_kw` goes to `capacity` (engine factory, warm-up)."""
    one = replace(budget, start_req_per_s=rate_req_per_s, max_probes=1, max_req_per_s=None, boundary_repeats=0)
    passed: dict[int, list[bool]] = {leader.index: [], rival.index: []}
    for k in range(repeats):
        wl = reseeded(workload, workload.seed + SEED_OFFSET + k)
        for p in (leader, rival):
            where = out / "duels" / f"{leader.index:02d}-vs-{rival.index:02d}" / f"{p.index:02d}-seed{k}"
            r = capacity(p.system, wl, slo, where, budget=one, arm=f"duel-{p.index:02d}", **run_kw)
            passed[p.index].append(bool(r.probes and r.probes[0].passed))
    return Duel(leader.label, rival.label, rate_req_per_s, tuple(passed[leader.index]), tuple(passed[rival.index]))
