"""Which points of a lever's declared values a search tries (issue 14): the budget split over the levers and,
within one lever, all values on a grid or an Optuna TPE study over the value index when the budget is smaller.

Deliberately not here: running a point (passed in as `evaluate`) and ranking the results (`choose.ranking`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import optuna

from inferopt.choose.ranking import ChosenBy, Point


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
    return select_points_batched(values, k, lambda jobs: [evaluate(i, how) for i, how in jobs], seed, width=1)


def select_points_batched(
    values: Sequence[Any],
    k: int,
    evaluate_many: Callable[[list[tuple[int, ChosenBy]]], list[Point]],
    seed: int,
    width: int = 1,
) -> list[Point]:
    """`select_points` in waves of up to `width` points run together (`evaluate_many([(value_index, how), ...])`
    returns their points in order); `width` 1 is the sequential ask-and-tell."""
    sampler = PointSampler(values, k, seed, parallel=width > 1)
    while todo := sampler.ask(width):
        for (i, _), p in zip(todo, evaluate_many(todo), strict=True):
            sampler.tell(i, p)
    return sampler.points()


class PointSampler:
    """One lever's choice of points as ask-and-tell, so that a dispatcher can run several levers' points in one
    wave (`choose.search`, workers). A grid asks its values in order; otherwise a seeded TPE study over the value
    index (see `select_points`), with Optuna's constant liar when `parallel` (a point still running counts as a
    poor result, so the points asked together spread out); a value asked again costs no trial; when TPE keeps
    repeating itself, the untried values follow in order."""

    def __init__(self, values: Sequence[Any], k: int, seed: int, parallel: bool = False) -> None:
        self.n, self.k = len(values), max(0, min(k, len(values)))
        self.tried: dict[int, Point] = {}
        self.pending: dict[int, list[optuna.trial.Trial]] = {}
        self.asks = 0
        self.study = None
        ordered = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        self.ordered = ordered and list(values) == sorted(values)
        if 0 < self.k < self.n:
            optuna.logging.set_verbosity(optuna.logging.WARNING)
            tpe = optuna.samplers.TPESampler(seed=seed, n_startup_trials=1, constant_liar=parallel)
            self.study = optuna.create_study(direction="maximize", sampler=tpe)

    def _room(self) -> int:
        return self.k - len(self.tried) - len(self.pending)

    def ask(self, m: int) -> list[tuple[int, ChosenBy]]:
        """Up to `m` new points to run now: (value index, how it was chosen)."""
        out: list[tuple[int, ChosenBy]] = []
        while self.study is not None and len(out) < m and self._room() > 0 and self.asks < 20 * self.n:
            trial, self.asks = self.study.ask(), self.asks + 1
            i = (
                trial.suggest_int("index", 0, self.n - 1)
                if self.ordered
                else int(trial.suggest_categorical("index", list(range(self.n))))
            )
            if i in self.tried:  # a value proposed again costs no trial
                _tell(self.study, trial, self.tried[i])
            elif i in self.pending:
                self.pending[i].append(trial)
            else:
                self.pending[i] = [trial]
                out.append((i, "tpe"))
        if self.study is None or self.asks >= 20 * self.n:  # a grid, or TPE repeating itself: in order
            for i in range(self.n):
                if len(out) < m and self._room() > 0 and i not in self.tried and i not in self.pending:
                    self.pending[i] = []
                    out.append((i, "grid"))
        return out

    def tell(self, i: int, p: Point) -> None:
        self.tried[i] = p
        for trial in self.pending.pop(i, []):
            _tell(self.study, trial, p)

    def points(self) -> list[Point]:
        return list(self.tried.values())


def _tell(study: optuna.Study, trial: optuna.trial.Trial, p: Point) -> None:
    if p.capacity.status == "failed":
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
    else:
        study.tell(trial, _objective(p))
