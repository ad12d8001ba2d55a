"""The search's ranking (issue 14): the points tried, their order by capacity under the SLO, and the decision.

A point wins only beyond noise: its capacity bracket lies above the rival's, and head to head at a rate between
the two brackets (fresh seeds, `choose.duels`) it passes where the rival fails (sequential: `Duel`). Beating
the baseline but not the runner-up is a "tie": of the tied points that clear the baseline, one whose lever
leaves the outputs unchanged is preferred (no quality risk for no gain shown), then the smallest change; no point
above the baseline's bracket, or a head-to-head that does not confirm it, is "no change helps". A control arm
never wins. Also the Pareto rule of the frontier and each point's row of the points table.

Deliberately not here: running anything (the duels are passed in as a function), choosing the points to try
(`choose.sampler`), and the search loop (`choose.search`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import pandas as pd

from inferopt.choose.remedies import CATALOGUE
from inferopt.config import AnySystem
from inferopt.validate.capacity import CapacityResult, Probe

Decision = Literal["winner", "tie", "no_change_helps", "nothing_to_try"]
ChosenBy = Literal["baseline", "grid", "tpe", "simulator"]
_NAN = float("nan")


def show_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


@dataclass(frozen=True)
class Point:
    """One configuration tried — the baseline (index 0) or one value of one proposal — and its capacity."""

    index: int
    remedy: str  # "" for the baseline
    field: str
    value: Any
    baseline_value: Any
    cause: str
    control: bool
    chosen_by: ChosenBy
    system: AnySystem
    capacity: CapacityResult

    @property
    def label(self) -> str:
        return "baseline" if self.index == 0 else f"{self.field}={show_value(self.value)}"

    def at_capacity(self) -> Probe | None:
        """The probe at the highest passing rate (the capacity's own operating point), None when none passed."""
        return self.capacity.at_capacity()

    def row(self) -> dict[str, Any]:
        c, p = self.capacity, self.at_capacity()
        tpot = p.tpot_ms_p50 if p is not None else _NAN
        return {
            "point": self.index,
            "label": self.label,
            "proposal": self.remedy or "baseline",
            "field": self.field,
            "value": show_value(self.value) if self.index else "",
            "baseline_value": show_value(self.baseline_value) if self.index else "",
            "cause": self.cause,
            "control": self.control,
            "chosen_by": self.chosen_by,
            "capacity_req_per_s": c.req_per_s,
            "capacity_lo": c.lo_req_per_s if c.lo_req_per_s is not None else _NAN,
            "capacity_hi": c.hi_req_per_s if c.hi_req_per_s is not None else _NAN,
            "capacity_status": c.status,
            "probes": len(c.probes) + len(c.repeats),
            "goodput_req_per_s": p.goodput_req_per_s if p is not None else _NAN,
            "goodput_tok_per_s": p.goodput_tok_per_s if p is not None else _NAN,  # throughput per replica
            "ttft_ms_p99": p.ttft_ms_p99 if p is not None else _NAN,
            "tpot_ms_p50": tpot,
            "per_user_tok_per_s": 1000.0 / tpot if tpot > 0 else _NAN,
            "slo_attainment": p.slo_attainment if p is not None else _NAN,
            "message": c.message,
        }


@dataclass(frozen=True)
class Duel:
    """Two points at one offered rate (between their brackets, `between`), fresh seeds each. A seed "misses" when
    the leader fails it or the rival passes it. Sequential (`choose.duels.run_duel`): the gain holds beyond
    noise when the first `first_stage` seeds have no miss, or exactly one and the `extra` seeds run after it
    have none; `false_positive_rate` bounds how often two equal points would pass that rule."""

    leader: str
    rival: str
    rate_req_per_s: float
    leader_passed: tuple[bool, ...]
    rival_passed: tuple[bool, ...]
    first_stage: int = 0  # seeds in the first stage; 0: every seed run is the first stage
    extra: int = 0  # seeds the second stage has (run only after exactly one first-stage miss)

    def _stage(self) -> int:
        return self.first_stage or len(self.leader_passed)

    def misses(self, lo: int = 0, hi: int | None = None) -> int:
        lead, rival = self.leader_passed[lo:hi], self.rival_passed[lo:hi]
        return sum(not x for x in lead) + sum(rival)

    @property
    def confirmed(self) -> bool:
        n = self._stage()
        if len(self.leader_passed) <= n:
            return len(self.leader_passed) == n and self.misses(0, n) == 0
        complete = len(self.leader_passed) == n + self.extra
        return complete and self.misses(0, n) == 1 and self.misses(n) == 0

    @property
    def false_positive_rate(self) -> float:
        return duel_false_positive_rate(self._stage(), self.extra)

    def sentence(self) -> str:
        n, run = self._stage(), len(self.leader_passed)
        if not run and not n:
            return f"{self.leader} vs {self.rival}: brackets apart (no head-to-head repeats asked for)"
        more = f"; one miss in the first {n}, so {run - n} more" if run > n else ""
        return (
            f"head to head at {self.rate_req_per_s:.4g} req/s ({run} fresh seeds each{more}): {self.leader} passed "
            f"{sum(self.leader_passed)}/{run}, {self.rival} passed {sum(self.rival_passed)}/{run}"
            + ("" if self.confirmed else " — not confirmed")
            + f" (false-positive rate of the rule <= {self.false_positive_rate:.1%})"
        )


def duel_false_positive_rate(first_stage: int, extra: int) -> float:
    """The largest chance, over the pass probability p two equal points share at the duel's rate (seeds
    independent), that the sequential rule confirms one over the other: no miss in `first_stage` seeds
    ((pq)^n), or exactly one (n (pq)^(n-1) (p^2 + q^2)) and then none in `extra` ((pq)^m); q = 1 - p."""
    n, m = first_stage, extra

    def rate(p: float) -> float:
        pq = p * (1.0 - p)
        one_miss = n * pq ** (n - 1) * (p * p + (1.0 - p) ** 2) if n else 0.0
        return pq**n + (one_miss * pq**m if m else 0.0)

    return max(rate(k / 1000) for k in range(1001))


def beyond_brackets(a: CapacityResult, b: CapacityResult) -> bool:
    """`a` held, every time it ran, a rate above the lowest one `b` failed at (a failed boundary repeat of `a`
    moves it down to its next pass: `CapacityResult.sure_lo_req_per_s`)."""
    lo, hi = a.sure_lo_req_per_s, b.hi_req_per_s
    return lo is not None and hi is not None and lo > hi


def pareto(x: pd.Series, y: pd.Series, *, x_lower_is_better: bool) -> pd.Series:
    """Which rows no other row dominates (y higher is better; x lower or higher as said); NaN rows: never."""
    xs = -x.to_numpy(float) if x_lower_is_better else x.to_numpy(float)
    ys = y.to_numpy(float)
    ok = [math.isfinite(a) and math.isfinite(b) for a, b in zip(xs, ys, strict=True)]
    out = []
    for i in range(len(xs)):
        dominated = any(
            ok[j] and xs[j] >= xs[i] and ys[j] >= ys[i] and (xs[j] > xs[i] or ys[j] > ys[i]) for j in range(len(xs))
        )
        out.append(bool(ok[i] and not dominated))
    return pd.Series(out, index=x.index)


def _capacity_key(p: Point) -> float:
    x = p.capacity.req_per_s
    return x if math.isfinite(x) else -math.inf


def ranked(points: Sequence[Point]) -> list[Point]:
    """The points that may win (not the baseline, not control arms), highest capacity first."""
    return sorted((p for p in points if p.index and not p.control), key=lambda p: (-_capacity_key(p), p.index))


def _cap_text(p: Point) -> str:
    return p.capacity.text()


def compare_line(p: Point, base: Point) -> str:
    """One point against the baseline, in words."""
    if beyond_brackets(p.capacity, base.capacity):
        how = "above the baseline's bracket"
    elif p.capacity.status == "failed":
        how = "did not run"
    elif _capacity_key(p) > _capacity_key(base):
        how = "higher but within the baseline's bracket (within noise)"
    else:
        how = "no higher than the baseline"
    return f"{p.label}{' (control)' if p.control else ''}: capacity {_cap_text(p)} vs baseline {_cap_text(base)}: {how}"


@dataclass(frozen=True)
class Ranking:
    decision: Decision
    recommended: Point | None
    tied: tuple[Point, ...]
    duels: tuple[Duel, ...]
    message: str


DuelFn = Callable[[Point, Point, float], Duel]


def between(rival: Point, leader: Point) -> float:
    """The head-to-head rate: the geometric middle of the gap between the rival's lowest failing rate and the
    highest rate the leader held every time — near neither boundary, so only a gap within noise makes it a coin toss."""
    return between_rates(rival.capacity, leader.capacity)


def between_rates(rival: CapacityResult, leader: CapacityResult) -> float:
    """`between` on two capacity results (the leader's side: the rate it held every time)."""
    return math.sqrt(rival.hi_req_per_s * leader.sure_lo_req_per_s)


def decide(base: Point, points: Sequence[Point], duel: DuelFn) -> Ranking:
    """Rank by capacity; a winner beats the baseline and the runner-up beyond noise (brackets apart, then
    `duel` between them), a leader that beats only the baseline ties with the points it does not clear. A
    control arm never wins; one whose bracket clears the baseline's is a warning in the message."""
    r = _rank(base, points, duel)
    suspect = [p.label for p in points if p.control and beyond_brackets(p.capacity, base.capacity)]
    if suspect:
        warn = f"; WARNING: the control arm {', '.join(suspect)} clears the baseline's bracket although its lever "
        r = replace(r, message=r.message + warn + "serves no located cause: the cause or the measurement is suspect")
    return r


def _rank(base: Point, points: Sequence[Point], duel: DuelFn) -> Ranking:
    order = ranked(points)
    improvers = [p for p in order if beyond_brackets(p.capacity, base.capacity)]
    if not improvers:
        return Ranking("no_change_helps", None, (), (), _no_gain(base, order))
    leader = improvers[0]
    duels = [duel(leader, base, between(base, leader))]
    if not duels[0].confirmed:
        msg = f"{leader.label}'s bracket clears the baseline's, but {duels[0].sentence()}: within noise"
        return Ranking("no_change_helps", None, (), tuple(duels), _no_gain(base, order) + "; " + msg)
    gain = f"{leader.label} raises capacity under the SLO from {_cap_text(base)} to {_cap_text(leader)}"
    rivals = [p for p in order if p is not leader and math.isfinite(p.capacity.req_per_s)]
    runner = rivals[0] if rivals else None
    if runner is not None and beyond_brackets(leader.capacity, runner.capacity):
        duels.append(duel(leader, runner, between(runner, leader)))
    if runner is None or (beyond_brackets(leader.capacity, runner.capacity) and duels[-1].confirmed):
        vs = f" and the runner-up {runner.label} ({_cap_text(runner)})" if runner else ""
        return Ranking("winner", leader, (), tuple(duels), f"{gain}, beyond noise vs the baseline{vs}")
    others = [runner, *(p for p in rivals[1:] if not beyond_brackets(leader.capacity, p.capacity))]
    names = ", ".join(p.label for p in others)
    tied = (leader, *[p for p in others if beyond_brackets(p.capacity, base.capacity)])
    pick, how = _break_tie(base, leader, tied, duel, duels)
    return Ranking(
        "tie",
        pick,
        (leader, *others),
        tuple(duels),
        f"{gain}, beyond noise vs the baseline, but not beyond noise vs {names}: a tie, {how}; the ablation and "
        "gate of flows.optimize judge the recommendation",
    )


def _break_tie(base: Point, leader: Point, tied: Sequence[Point], duel: DuelFn, duels: list[Duel]) -> tuple[Point, str]:
    """The tied point to recommend: one whose lever leaves the outputs unchanged over one that can change them
    (no quality risk for a capacity gain not shown beyond noise), then the smallest change from the baseline
    (`change_size`: less memory reserved, less to roll out, for no gain shown), then the higher capacity — if
    its own gain over the baseline holds head to head (the duel is appended to `duels`); else the leader."""
    pick = min(tied, key=lambda p: (changes_outputs(p), change_size(p), -_capacity_key(p), p.index))
    if pick is leader:
        return leader, "broken for the leader: no tied point is a smaller change that leaves the outputs as they are"
    duels.append(duel(pick, base, between(base, pick)))
    if not duels[-1].confirmed:
        why = f"{pick.label} vs the baseline: {duels[-1].sentence()}"
        return leader, f"broken by the point estimate of capacity ({why})"
    if changes_outputs(leader) and not changes_outputs(pick):
        why = (
            f"whose lever leaves the model's outputs unchanged where {leader.label}'s can change them (a quality "
            "risk for no capacity gain shown beyond noise)"
        )
    else:
        why = f"a smaller change from the baseline's {show_value(pick.baseline_value)} than {leader.label}"
    return pick, f"broken for {pick.label} ({_cap_text(pick)}), {why}; {duels[-1].sentence()}"


def change_size(p: Point) -> float:
    """How far a point moves its knob from the baseline, in [0, 1]: |v - b| / max(|v|, |b|) for numbers (so
    384 from 192 tokens is 0.5, 768 is 0.75), 1 for any other change (a switch of kind has no size)."""
    v, b = p.value, p.baseline_value
    numbers = all(isinstance(x, int | float) and not isinstance(x, bool) for x in (v, b))
    if not numbers or v == b:
        return 0.0 if v == b else 1.0
    return abs(v - b) / max(abs(v), abs(b))


def changes_outputs(p: Point) -> bool:
    """Whether the point's lever can change the model's outputs (the catalogue's `changes_outputs`: the quality
    gate is mandatory for it, G1); an unknown lever counts as one that can."""
    return next((r.changes_outputs for r in CATALOGUE if r.name == p.remedy), True)


def _no_gain(base: Point, order: Sequence[Point]) -> str:
    if base.capacity.lo_req_per_s is None and all(p.capacity.lo_req_per_s is None for p in order):
        return (
            f"no change helps: no configuration tried ({len(order) + 1}, the baseline's included) meets the SLO at "
            f"any rate probed; the baseline: {base.capacity.message}"
        )
    if base.capacity.hi_req_per_s is None:
        return (
            f"no change can be shown to help: the baseline's capacity was not bracketed ({base.capacity.message}); "
            "fix: raise the capacity budget's max_probes or max_req_per_s"
        )
    return (
        f"no change helps: none of the {len(order)} points tried raised capacity under the SLO beyond the "
        f"baseline's {_cap_text(base)}"
    )
