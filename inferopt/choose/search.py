"""The search (issue 14): from a system and its production load to a recommended change, or "no change helps".

`tune` measures the baseline at the workload's own rate, locates the cause, `propose`s the levers that serve it
(and the causes of slices that miss the SLO), and evaluates points by their capacity under the SLO
(`validate.capacity`), the baseline's first, within `TuneBudget.max_trials` capacity searches. A point wins only
beyond noise: its capacity bracket lies above the rival's, and head to head at a rate between the two brackets
(fresh seeds) it passes every repeat where the rival fails every one. Beating the baseline but not the runner-up
is a "tie": the leader is recommended and the message says so. Every point tried is kept (`points.jsonl` as each
finishes, `TuneResult.table()`); a recommendation is a candidate YAML (the baseline plus the change) that
`flows.optimize` ablates, validates and gates. Bad budgets are refused before anything runs; an empty search
space, a budget that leaves levers untried and an SLO nothing meets are results that say so.

Sits above validate in the import layers (it composes steps 1, 2, 3 and validate's capacity). Deliberately
not here: tracking (tasks/tune.py), the frontier figure (`report.plots.frontier`), the ablation and gate.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import optuna
import pandas as pd
import yaml

from inferopt.choose.propose import Proposal, Proposals, propose
from inferopt.choose.remedies import remedies_for_changes
from inferopt.config import AnySystem, CandidateConfig, HardwareConfig, SLOConfig, WorkloadConfig
from inferopt.config.knob_spaces import KNOB_SPACES, KnobSpace, current_value
from inferopt.config.redact import REDACTED, redacted, redacted_paths
from inferopt.engines import EngineFactory, make_engine
from inferopt.locate.step import LocateResult, locate_system
from inferopt.measure.step import MeasureResult, measure_system
from inferopt.validate.capacity import CapacityBudget, CapacityResult, Probe, capacity

Decision = Literal["winner", "tie", "no_change_helps", "nothing_to_try"]
ChosenBy = Literal["baseline", "grid", "tpe"]
TARGET_METRICS = ("goodput_req_per_s", "ttft_ms_p99")  # what a capacity gain shows at the production rate
_NAN = float("nan")


@dataclass(frozen=True)
class TuneBudget:
    """How much the search may run. `max_trials`: capacity searches, the baseline's included (each up to
    `capacity.max_probes` probes); `confirm_repeats`: head-to-head probes per side with fresh seeds before a
    gain counts (0: the brackets alone); `seed`: the point sampler's; `control`: a lever added as a control arm."""

    max_trials: int = 12
    capacity: CapacityBudget = CapacityBudget(max_probes=8, rel_tol=0.1)
    confirm_repeats: int = 2
    seed: int = 0
    control: str | None = None

    def __post_init__(self) -> None:
        problems = tune_budget_problems(self)
        if problems:
            raise ValueError("tune budget: " + "; ".join(problems))


def tune_budget_problems(b: TuneBudget) -> list[str]:
    """Each bad field of a budget as a sentence with its fix (empty: usable)."""
    out = []
    if b.max_trials < 2:
        out.append(
            f"max_trials={b.max_trials}: the baseline's capacity takes one trial, so none is left for a change; "
            "fix: max_trials >= 2 (the baseline and one point), better 1 + one per lever"
        )
    if b.capacity.max_probes < 2:
        out.append(
            f"capacity.max_probes={b.capacity.max_probes}: too small to bracket a capacity (it needs a passing and "
            "a failing probe); fix: max_probes >= 4"
        )
    if b.confirm_repeats < 0:
        out.append(f"confirm_repeats={b.confirm_repeats}: must be >= 0 (0: the brackets alone decide)")
    return out


def _show(value: Any) -> str:
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
        return "baseline" if self.index == 0 else f"{self.field}={_show(self.value)}"

    def at_capacity(self) -> Probe | None:
        """The probe at the highest passing rate (the capacity's own operating point), None when none passed."""
        lo = self.capacity.lo_req_per_s
        at = [p for p in self.capacity.probes if p.passed and p.offered_req_per_s == lo]
        return at[-1] if at else None

    def row(self) -> dict[str, Any]:
        c, p = self.capacity, self.at_capacity()
        tpot = p.tpot_ms_p50 if p is not None else _NAN
        return {
            "point": self.index,
            "label": self.label,
            "proposal": self.remedy or "baseline",
            "field": self.field,
            "value": _show(self.value) if self.index else "",
            "baseline_value": _show(self.baseline_value) if self.index else "",
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
    """Two points at one offered rate (between their brackets, `between`), fresh seeds each: the leader's gain
    holds beyond noise when it passes every repeat and the rival fails every one."""

    leader: str
    rival: str
    rate_req_per_s: float
    leader_passed: tuple[bool, ...]
    rival_passed: tuple[bool, ...]

    @property
    def confirmed(self) -> bool:
        return all(self.leader_passed) and not any(self.rival_passed)

    def sentence(self) -> str:
        n = len(self.leader_passed)
        if not n:
            return f"{self.leader} vs {self.rival}: brackets apart (no head-to-head repeats asked for)"
        return (
            f"head to head at {self.rate_req_per_s:.4g} req/s ({n} fresh seeds each): {self.leader} passed "
            f"{sum(self.leader_passed)}/{n}, {self.rival} passed {sum(self.rival_passed)}/{n}"
            + ("" if self.confirmed else " — not confirmed")
        )


def beyond_brackets(a: CapacityResult, b: CapacityResult) -> bool:
    """`a` passed at a rate above the lowest one `b` failed at (and every boundary repeat of `a` passed)."""
    lo, hi = a.lo_req_per_s, b.hi_req_per_s
    return lo is not None and hi is not None and lo > hi and all(p.passed for p in a.repeats)


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
    c = p.capacity
    lo = f"{c.lo_req_per_s:.4g}" if c.lo_req_per_s is not None else "none passed"
    hi = f"{c.hi_req_per_s:.4g}" if c.hi_req_per_s is not None else "none failed"
    return f"{c.req_per_s:.4g} req/s [{lo}, {hi}] ({c.status})"


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
    leader's highest passing one — near neither boundary, so only a gap within noise makes it a coin toss."""
    return math.sqrt(rival.capacity.hi_req_per_s * leader.capacity.lo_req_per_s)


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
    return Ranking(
        "tie",
        leader,
        (leader, *others),
        tuple(duels),
        f"{gain}, beyond noise vs the baseline, but not beyond noise vs {names}: a tie, broken by the point "
        "estimate of capacity; the ablation and gate of flows.optimize judge the recommendation",
    )


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


# ---------------------------------------------------------------------------------------------- point selection


def allocate(sizes: Sequence[int], trials: int) -> list[int]:
    """Trials per proposal (in order: the located cause's levers first): round robin, one each while they
    last, over the proposals that still have values left."""
    out = [0] * len(sizes)
    while trials > 0 and any(o < s for o, s in zip(out, sizes, strict=True)):
        for i, size in enumerate(sizes):
            if trials > 0 and out[i] < size:
                out[i] += 1
                trials -= 1
    return out


def _objective(p: Point) -> float:
    return p.capacity.req_per_s if math.isfinite(p.capacity.req_per_s) else 0.0  # no rate meets: zero capacity


def select_points(values: Sequence[Any], k: int, evaluate: Callable[[int, ChosenBy], Point], seed: int) -> list[Point]:
    """Try `k` of a proposal's `values` (`evaluate(value_index, how)` runs one): all of them, in the declared
    order, when the budget covers the space (a grid: nothing to choose, no sampler).

    Fewer: an Optuna study (TPESampler, seeded, ask-and-tell) over the value index, maximising capacity — an
    ordered integer when the values are ascending numbers (batch sizes: TPE's density model then favours the
    neighbours of good values), else categorical. Why Optuna rather than a hand-written rule: a well-kept,
    seeded sampler with the trial bookkeeping (failed trials, repeats), which carries over unchanged to spaces
    of several knobs. Why not more of it: these spaces are one knob with <= 4 values (one variable at a time,
    SPEC A1) and budgets of 1-3 points per lever, where TPE's first point is a seeded random draw and it can
    model little after it; a value it proposes again costs no trial, and if it keeps repeating, the untried
    values follow in order."""
    n_values = len(values)
    if k <= 0:
        return []
    if k >= n_values:
        return [evaluate(i, "grid") for i in range(n_values)]
    ordered = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    ordered = ordered and list(values) == sorted(values)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=1))
    tried: dict[int, Point] = {}
    for _ in range(20 * n_values):
        if len(tried) >= k:
            break
        trial = study.ask()
        if ordered:
            i = trial.suggest_int("index", 0, n_values - 1)
        else:
            i = int(trial.suggest_categorical("index", list(range(n_values))))
        if i not in tried:
            tried[i] = evaluate(i, "tpe")
        if tried[i].capacity.status == "failed":
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            study.tell(trial, _objective(tried[i]))
    for i in range(n_values):
        if len(tried) < k and i not in tried:
            tried[i] = evaluate(i, "grid")
    return list(tried.values())


# ---------------------------------------------------------------------------------------------- the search space


def custom_space(system: AnySystem, field: str, values: Sequence[Any]) -> KnobSpace:
    """A user's own space for one knob of `system`: refused (ValueError with the fix) when it is empty, when the
    system has no such field or does not declare it a lever, or when no catalogue remedy expresses it."""
    if not values:
        raise ValueError(f"knob {field!r}: an empty search space (no values); fix: give values, e.g. {field}=2,4,8")
    current_value(system, field)  # raises naming the system's fields there
    knobs = system.capabilities.knobs
    if field.split(".")[0] not in knobs:
        raise ValueError(
            f"knob {field!r}: not a lever the {system.engine} system declares; its knobs: {', '.join(sorted(knobs))}"
        )
    declared = [s.remedy for s in KNOB_SPACES.get(system.engine, ()) if s.field == field]
    remedies, _ = remedies_for_changes({field: values[0]})
    if not declared and not remedies:
        raise ValueError(f"knob {field!r}: no remedy of the catalogue expresses it, so no cause can call for it")
    return KnobSpace(declared[0] if declared else remedies[0].name, field, values=tuple(values))


def search_space_problems(system: AnySystem, spaces: Sequence[KnobSpace] | None, control: str | None) -> list[str]:
    """What makes the search space empty or wrong before anything runs (empty: it can be searched)."""
    declared = KNOB_SPACES.get(system.engine, ()) if spaces is None else tuple(spaces)
    out = []
    if not declared:
        out.append(
            f"empty search space: the {system.engine} engine declares no knob space (an endpoint we do not "
            "launch has its server's knobs); fix: tune a vllm/hf system config of that server, or give --space"
        )
    levers = {s.remedy for s in declared}
    if control is not None and control not in levers:
        out.append(f"control arm {control!r}: not a lever of this search; its levers: {', '.join(sorted(levers))}")
    return out


def slice_causes(located: LocateResult, slo: SLOConfig) -> tuple[str, ...]:
    """The causes of the slices that miss the SLO's TTFT or E2E bound for another cause than the overall one."""
    per_slice = located.diagnosis.per_slice
    if per_slice.empty:
        return ()
    miss = pd.to_numeric(per_slice["ttft_ms_p99"], errors="coerce") > slo.ttft_p99_ms
    if slo.e2e_p99_ms is not None:
        miss |= pd.to_numeric(per_slice["e2e_ms_p99"], errors="coerce") > slo.e2e_p99_ms
    found = per_slice.loc[miss, "cause"].astype(str)
    return tuple(dict.fromkeys(c for c in found if c not in ("none", located.diagnosis.cause)))


# ---------------------------------------------------------------------------------------------- the run


@dataclass(frozen=True)
class TuneResult:
    """What the search found. `points`: every point tried, the baseline first (none when nothing was tried);
    `recommendation_path`: the candidate YAML (winner or tie); `untried`: what the budget left out."""

    decision: Decision
    message: str
    cause: str
    slice_causes: tuple[str, ...]
    proposals: Proposals
    points: tuple[Point, ...]
    recommended: Point | None
    tied: tuple[Point, ...]
    duels: tuple[Duel, ...]
    evidence: tuple[str, ...]
    untried: tuple[str, ...]
    recommendation_path: str | None
    slo_bounds_ms: dict[str, float]
    measured: MeasureResult
    located: LocateResult

    @property
    def baseline(self) -> Point | None:
        return self.points[0] if self.points else None

    def table(self) -> pd.DataFrame:
        """One row per point tried (the baseline too), highest capacity first."""
        base, rec, tied = self.baseline, self.recommended, {p.index for p in self.tied}
        rows = [
            {
                **p.row(),
                "beats_baseline": bool(p.index and base is not None and beyond_brackets(p.capacity, base.capacity)),
                "recommended": rec is not None and p.index == rec.index,
                "tied": p.index in tied,
            }
            for p in self.points
        ]
        if not rows:
            return pd.DataFrame()
        df = pd.DataFrame(rows)
        df["pareto_ttft"] = pareto(df["ttft_ms_p99"], df["goodput_tok_per_s"], x_lower_is_better=True)
        df["pareto_per_user"] = pareto(df["per_user_tok_per_s"], df["goodput_tok_per_s"], x_lower_is_better=False)
        return df.sort_values(["capacity_req_per_s", "point"], ascending=[False, True], ignore_index=True)

    def metrics(self) -> dict[str, float]:
        base, rec = self.baseline, self.recommended
        out = {
            "tune.points": float(len(self.points)),
            "tune.probes": float(sum(len(p.capacity.probes) for p in self.points)),
        }
        if base is not None:
            out["tune.baseline_capacity_req_per_s"] = base.capacity.req_per_s
        if rec is not None and base is not None:
            out["tune.recommended_capacity_req_per_s"] = rec.capacity.req_per_s
            if base.capacity.req_per_s > 0:  # NaN (no rate met the SLO) compares False
                out["tune.capacity_gain"] = rec.capacity.req_per_s / base.capacity.req_per_s
        return out

    def summary(self) -> dict[str, Any]:
        rec = self.recommended
        return {
            "decision": self.decision,
            "message": self.message,
            "cause": self.cause,
            "slice_causes": list(self.slice_causes),
            "recommended": rec.label if rec else None,
            "changes": {rec.field: rec.value} if rec else {},
            "recommendation_path": self.recommendation_path,
            "tied": [p.label for p in self.tied],
            "proposals": self.proposals.message,
            "not_proposed": [list(x) for x in self.proposals.not_proposed],
            "untried": list(self.untried),
            "evidence": list(self.evidence),
            "duels": [{**d.__dict__, "confirmed": d.confirmed} for d in self.duels],
            "metrics": self.metrics(),
        }


class _Search:
    """What every capacity search of one tune shares, and the points so far (kept as each finishes)."""

    def __init__(self, system, workload, slo, out, budget, engine_factory, warmup_requests, run_tag, on_point):
        self.system, self.workload, self.slo, self.out, self.budget = system, workload, slo, out, budget
        self.kw = {"engine_factory": engine_factory, "warmup_requests": warmup_requests, "run_tag": run_tag}
        self.on_point = on_point
        self.points: list[Point] = []

    def evaluate(self, proposal: Proposal | None, i: int, how: ChosenBy) -> Point:
        """The capacity of the baseline (`proposal` None) or of the proposal's `i`-th value, kept and reported."""
        idx = len(self.points)
        system = self.system if proposal is None else proposal.systems[i]
        label = "baseline" if proposal is None else f"{proposal.field}-{_show(proposal.values[i])}"
        where = self.out / "points" / f"{idx:02d}-{_slug(label)}"
        cap = capacity(system, self.workload, self.slo, where, budget=self.budget.capacity, arm=label, **self.kw)
        p = Point(
            idx,
            proposal.remedy if proposal else "",
            proposal.field if proposal else "",
            proposal.values[i] if proposal else None,
            proposal.baseline_value if proposal else None,
            proposal.cause if proposal else "",
            bool(proposal and proposal.control),
            how if proposal else "baseline",
            system,
            cap,
        )
        self.points.append(p)
        with (self.out / "points.jsonl").open("a") as fh:
            fh.write(json.dumps(p.row(), default=str) + "\n")
        if self.on_point is not None:
            self.on_point(p)
        return p

    def duel(self, leader: Point, rival: Point, rate_req_per_s: float) -> Duel:
        """Both at `rate_req_per_s`, `confirm_repeats` fresh seeds each (one probe per seed)."""
        one = replace(self.budget.capacity, start_req_per_s=rate_req_per_s, max_probes=1, max_req_per_s=None)
        one = replace(one, boundary_repeats=0)
        passed: dict[int, list[bool]] = {leader.index: [], rival.index: []}
        for k in range(self.budget.confirm_repeats):
            wl = self.workload.model_copy(update={"seed": self.workload.seed + 1000 + k})
            for p in (leader, rival):
                where = self.out / "duels" / f"{leader.index:02d}-vs-{rival.index:02d}" / f"{p.index:02d}-seed{k}"
                r = capacity(p.system, wl, self.slo, where, budget=one, arm=f"duel-{p.index:02d}", **self.kw)
                passed[p.index].append(bool(r.probes and r.probes[0].passed))
        return Duel(leader.label, rival.label, rate_req_per_s, tuple(passed[leader.index]), tuple(passed[rival.index]))


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)[:60]


def _in_order(proposals: Proposals) -> list[Proposal]:
    """The located cause's levers first, then the slices' causes', then a control arm."""
    return sorted(proposals.proposals, key=lambda p: (p.control, p.cause != proposals.cause))


def _search(s: _Search, order: Sequence[Proposal]) -> tuple[str, ...]:
    """Every proposal's points within the budget (the baseline already spent one); returns what was left out."""
    shares = allocate([len(p.values) for p in order], s.budget.max_trials - 1)
    untried = []
    for n, (proposal, k) in enumerate(zip(order, shares, strict=True)):
        chosen = select_points(proposal.values, k, lambda i, how, p=proposal: s.evaluate(p, i, how), s.budget.seed + n)
        left = [_show(v) for v in proposal.values if all(c.value != v for c in chosen)]
        if left:
            untried.append(
                f"{proposal.field} ({proposal.remedy}): {'every value' if k == 0 else ', '.join(left)} — the budget "
                f"of {s.budget.max_trials} trials ran out; fix: --budget {1 + sum(len(p.values) for p in order)} "
                "tries every point"
            )
    return tuple(untried)


def recommendation(
    system: AnySystem, workload: WorkloadConfig, slo: SLOConfig, hardware: HardwareConfig, point: Point, why: str
) -> dict[str, Any]:
    """The candidate YAML's content: the baseline plus the recommended change, on the workload, SLO and hardware
    searched with (inline, so the file stands alone), secrets (`config.redact`: headers, a server's environment,
    credential-named fields) replaced by ***; checked to load as a candidate."""
    data = {
        "name": _slug(f"{system.name}-tuned-{point.label}"),
        "description": f"recommended by inferopt tune: {why}",
        "baseline": system.model_dump(mode="json"),
        "changes": {point.field: point.value},
        "target_metrics": list(TARGET_METRICS),
        "workload": workload.model_dump(mode="json"),
        "slo": slo.model_dump(mode="json"),
        "hardware": hardware.model_dump(mode="json"),
    }
    data = redacted(data)  # results/ holds no secret: the file says where to put them back
    CandidateConfig.model_validate(data)  # a recommendation that does not load would be our bug
    return data


def recommendation_yaml(data: dict[str, Any]) -> str:
    """The YAML text, headed by what it is and, when secrets were redacted, where to put them back."""
    head = "# Recommended by inferopt tune (python -m flows.tune); judge it: python -m flows.optimize <this file>\n"
    hidden = redacted_paths(data)
    if hidden:
        head += f"# secrets redacted as {REDACTED}: set {', '.join(hidden)} before running\n"
    return head + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def tune(
    system: AnySystem,
    workload: WorkloadConfig,
    slo: SLOConfig,
    hardware: HardwareConfig,
    out_dir: str | Path,
    *,
    budget: TuneBudget = TuneBudget(),  # noqa: B008 - frozen
    spaces: Sequence[KnobSpace] | None = None,
    engine_factory: EngineFactory = make_engine,
    on_point: Callable[[Point], None] | None = None,
    profile: bool = False,
    warmup_requests: int = 2,
    run_tag: str = "",
) -> TuneResult:
    """Measure -> locate -> propose -> capacity per point -> decide (module docstring); files under `out_dir`:
    `measure/`, `points/NN-*/` (each capacity search's probes), `duels/`, `points.jsonl`, `tune.json` and,
    with a recommendation, `recommendation.yaml`. `spaces`: search these knob spaces instead of the engine's;
    `on_point(point)` is called as each point finishes (the flow logs it). A bad search space raises
    ValueError before anything runs; a baseline that cannot be measured raises RuntimeError."""
    problems = search_space_problems(system, spaces, budget.control)
    if problems:
        raise ValueError("tune: " + "; ".join(problems))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    measured = measure_system(
        system,
        workload,
        slo,
        out / "measure",
        warmup_requests=warmup_requests,
        run_tag=run_tag,
        engine_factory=engine_factory,
    )
    located = locate_system(
        system,
        hardware,
        measured.phases,
        profile=profile,
        server_metrics=measured.run.server_metrics,
        engine_info=measured.run.engine_info,
    )
    proposals = propose(
        system, located.diagnosis.cause, slice_causes(located, slo), control=budget.control, spaces=spaces
    )
    s = _Search(system, workload, slo, out, budget, engine_factory, warmup_requests, run_tag, on_point)
    untried: tuple[str, ...] = ()
    if not proposals.proposals:
        ranking = Ranking("nothing_to_try", None, (), (), _nothing_message(proposals))
    else:
        base = s.evaluate(None, 0, "baseline")
        if base.capacity.status == "failed":
            raise RuntimeError(f"tune: the baseline's capacity could not be measured: {base.capacity.message}")
        untried = _search(s, _in_order(proposals))
        ranking = decide(base, s.points, s.duel)
    return _conclude(s, hardware, measured, located, proposals, ranking, untried)


def _nothing_message(proposals: Proposals) -> str:
    why = "; ".join(f"{f}: {w}" for f, w in proposals.not_proposed)
    return f"nothing to try: {proposals.message}" + (f" (not proposed: {why})" if why else "")


def _conclude(
    s: _Search,
    hardware: HardwareConfig,
    measured: MeasureResult,
    located: LocateResult,
    proposals: Proposals,
    ranking: Ranking,
    untried: tuple[str, ...],
) -> TuneResult:
    """The result, with `tune.json` and (winner or tie) `recommendation.yaml` written."""
    message = ranking.message + (f"; untried: {'; '.join(untried)}" if untried else "")
    path = None
    if ranking.recommended is not None:
        data = recommendation(s.system, s.workload, s.slo, hardware, ranking.recommended, ranking.message)
        path = s.out / "recommendation.yaml"
        path.write_text(recommendation_yaml(data))
        message += f"; recommendation: {path}"
    base = s.points[0] if s.points else None
    evidence = tuple(compare_line(p, base) for p in s.points[1:]) if base is not None else ()
    result = TuneResult(
        decision=ranking.decision,
        message=message,
        cause=located.diagnosis.cause,
        slice_causes=proposals.slice_causes,
        proposals=proposals,
        points=tuple(s.points),
        recommended=ranking.recommended,
        tied=ranking.tied,
        duels=ranking.duels,
        evidence=(*(d.sentence() for d in ranking.duels), *evidence),
        untried=untried,
        recommendation_path=str(path) if path else None,
        slo_bounds_ms=base.capacity.slo_bounds_ms if base is not None else {},
        measured=measured,
        located=located,
    )
    (s.out / "tune.json").write_text(json.dumps(result.summary(), indent=2, default=str))
    return result
