"""Head-to-head confirmation of a capacity gain (issue 14): two points at one offered rate, between their
brackets (`choose.ranking.between`), each on the same fresh seeds of the workload, run in two stages
(`sequential_duel`): one tail on a noisy box need not sink a real gain, and the rule's false-positive rate
is stated (`choose.ranking.duel_false_positive_rate`).

Deliberately not here: which pairs duel and what a duel decides (`choose.ranking.decide`), and the search loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from inferopt.choose.ranking import Duel, Point
from inferopt.config import SLOConfig
from inferopt.validate.capacity import CapacityBudget, Load, capacity, reseeded

SEED_OFFSET = 1000  # duel seeds: the workload's seed + this + k, never the seeds the capacity searches used

SeedJudge = Callable[[int], tuple[bool, bool]]  # seed k -> (leader passed, rival passed)


def sequential_duel(judge: SeedJudge, repeats: int, extra: int) -> tuple[list[bool], list[bool]]:
    """Seeds 0..repeats-1, then, only after exactly one miss (the leader failed or the rival passed one),
    `extra` more; each stage stops at the miss that settles it (a second one, or any in the extra stage)."""
    lead: list[bool] = []
    rival: list[bool] = []

    def run(seeds: range, allowed: int) -> int:
        missed = 0
        for k in seeds:
            a, b = judge(k)
            lead.append(a)
            rival.append(b)
            missed += (not a) + b
            if missed > allowed:
                break
        return missed

    if run(range(repeats), 1) == 1 and extra:
        run(range(repeats, repeats + extra), 0)
    return lead, rival


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
    extra: int | None = None,
    **run_kw: Any,
) -> Duel:
    """Both at `rate_req_per_s` on fresh seeds (one probe per seed, of `budget`'s probe size): `repeats`, then
    `extra` (default: as many again) after exactly one miss; each probe's records under
    `out/duels/LL-vs-RR/`. `run_kw` goes to `capacity` (engine factory, warm-up)."""
    one = replace(budget, start_req_per_s=rate_req_per_s, max_probes=1, max_req_per_s=None, boundary_repeats=0)
    m = repeats if extra is None else extra

    def judge(k: int) -> tuple[bool, bool]:
        wl = reseeded(workload, workload.seed + SEED_OFFSET + k)
        passed = []
        for p in (leader, rival):
            where = out / "duels" / f"{leader.index:02d}-vs-{rival.index:02d}" / f"{p.index:02d}-seed{k}"
            r = capacity(p.system, wl, slo, where, budget=one, arm=f"duel-{p.index:02d}", **run_kw)
            passed.append(bool(r.probes and r.probes[0].passed))
        return passed[0], passed[1]

    lead, riv = sequential_duel(judge, repeats, m)
    return Duel(leader.label, rival.label, rate_req_per_s, tuple(lead), tuple(riv), first_stage=repeats, extra=m)
