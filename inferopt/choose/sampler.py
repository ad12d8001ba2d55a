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
