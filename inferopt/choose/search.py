"""The search (issue 14): from a system and its production load to a recommended change, or "no change helps".

`tune` measures the baseline at the workload's own rate, locates the cause, `propose`s the levers that serve it
(and the causes of slices that miss the SLO), and evaluates points by their capacity under the SLO
(`validate.capacity`), the baseline's first, within `TuneBudget.max_trials` capacity searches; a point wins
only beyond noise (brackets apart, then head to head; else a "tie" or "no change helps"). Every point tried
is kept (`points.jsonl` as each finishes, `TuneResult.table()`); a recommendation is a candidate YAML (the
baseline plus the change; one more per tied point) that `flows.optimize` ablates, validates and gates. Bad
budgets are refused before anything runs; an empty search space, a budget that leaves levers untried and an SLO
nothing meets are results that say so.

Sits above validate in the import layers (it composes steps 1, 2, 3 and validate's capacity). Not here: running
the points (`choose.points`), deciding (`choose.ranking`), duels (`choose.duels`), sampling (`choose.sampler`),
tracking (tasks/tune.py), the frontier figure (`report.plots.frontier`), the ablation and gate (flows.tune).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from inferopt.choose.points import (
    PointRunner,
    PointSearch,
    in_order,
    plan_points,
    search_kept,
    search_points,
    slug,
)
from inferopt.choose.propose import Proposals, propose
from inferopt.choose.pruning import PruneReport, pruning_report
from inferopt.choose.ranking import (
    Decision,
    Duel,
    Point,
    Ranking,
    beyond_brackets,
    compare_line,
    decide,
    pareto,
)
from inferopt.choose.remedies import remedies_for_changes
from inferopt.config import AnySystem, CandidateConfig, HardwareConfig, SLOConfig, WorkloadConfig
from inferopt.config.knob_spaces import KNOB_SPACES, KnobSpace, current_value
from inferopt.config.redact import REDACTED, redacted, redacted_paths
from inferopt.engines import EngineFactory, make_engine
from inferopt.locate.step import LocateResult, locate_system
from inferopt.measure.step import MeasureResult, measure_system
from inferopt.simulate.calibrate import DEFAULT_BOUND
from inferopt.validate.capacity import CapacityBudget

TARGET_METRICS = ("goodput_req_per_s", "ttft_ms_p99")  # what a capacity gain shows at the production rate


@dataclass(frozen=True)
class TuneBudget:
    """How much the search may run. `max_trials`: capacity searches, the baseline's included (each up to
    `capacity.max_probes` probes); `confirm_repeats`: the head-to-head's first stage, probes per side with fresh
    seeds (as many again after exactly one miss, `choose.duels`; 0: the brackets alone); `seed`: the point
    sampler's; `control`: a lever added as a control arm."""

    max_trials: int = 12
    capacity: CapacityBudget = CapacityBudget(max_probes=8, rel_tol=0.1)
    confirm_repeats: int = 2
    seed: int = 0
    control: str | None = None
    prune: bool = False  # the calibrated simulator predicts the whole space; only what it keeps is measured
    prune_top_k: int = 2  # measured whatever else the simulator says: the top few by predicted capacity
    prune_frontier: bool = False  # also measure the predicted frontier (capacity vs per-user speed; always reported)
    sim_bound: float = DEFAULT_BOUND  # held-back error above this: the simulator prunes nothing

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
    if b.prune_top_k < 1:
        out.append(f"prune_top_k={b.prune_top_k}: the simulator's top pick is always measured; fix: >= 1")
    if not 0.0 < b.sim_bound < 1.0:
        out.append(f"sim_bound={b.sim_bound}: a relative error bound in (0, 1); fix: e.g. 0.15")
    return out


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
    candidates: tuple[tuple[str, str], ...]  # (label, candidate YAML): the recommendation, then the points it tied
    slo_bounds_ms: dict[str, float]
    measured: MeasureResult
    located: LocateResult
    pruning: PruneReport | None = None  # with `TuneBudget.prune`: every point predicted, the trials saved

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
        return out | (self.pruning.metrics() if self.pruning is not None else {})

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
            "candidates": [list(c) for c in self.candidates],
            "tied": [p.label for p in self.tied],
            "proposals": self.proposals.message,
            "not_proposed": [list(x) for x in self.proposals.not_proposed],
            "untried": list(self.untried),
            "evidence": list(self.evidence),
            "duels": [
                {**d.__dict__, "confirmed": d.confirmed, "false_positive_rate": d.false_positive_rate}
                for d in self.duels
            ],
            "metrics": self.metrics(),
            "pruning": self.pruning.summary() if self.pruning is not None else None,
        }


def recommendation(
    system: AnySystem, workload: WorkloadConfig, slo: SLOConfig, hardware: HardwareConfig, point: Point, why: str
) -> dict[str, Any]:
    """The candidate YAML's content: the baseline plus the recommended change, on the workload, SLO and hardware
    searched with (inline, so the file stands alone), secrets (`config.redact`: headers, a server's environment,
    credential-named fields) replaced by ***; checked to load as a candidate."""
    data = {
        "name": slug(f"{system.name}-tuned-{point.label}"),
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
    run_points: PointRunner | None = None,
    parallel: int = 1,
) -> TuneResult:
    """Measure -> locate -> propose -> capacity per point -> decide (module docstring); files under `out_dir`:
    `measure/`, `points/NN-*/` (each capacity search's probes), `duels/`, `points.jsonl`, `tune.json` and,
    with a recommendation, `recommendation.yaml`. `spaces`: search these knob spaces instead of the engine's;
    `on_point(point)` is called as each point finishes (the flow logs it); `run_points`: run the points' capacity
    searches elsewhere (Prefect workers, tasks/dispatch_points.py), in waves of up to `parallel`. A bad search space
    raises ValueError before anything runs; a baseline that cannot be measured raises RuntimeError."""
    problems = search_space_problems(system, spaces, budget.control)
    if parallel < 1:
        problems.append(f"parallel={parallel}: points run at once must be >= 1; fix: 1, or the number of workers")
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
    s = PointSearch(system, workload, slo, out, budget, engine_factory, warmup_requests, run_tag, on_point)
    s.run_points, s.width = run_points, parallel if run_points is not None else 1
    untried: tuple[str, ...] = ()
    pruned: PruneReport | None = None
    if not proposals.proposals:
        ranking = Ranking("nothing_to_try", None, (), (), _nothing_message(proposals))
    else:
        base = s.evaluate(None, 0, "baseline")
        if base.capacity.status == "failed":
            raise RuntimeError(f"tune: the baseline's capacity could not be measured: {base.capacity.message}")
        order = in_order(proposals)
        plan = plan_points(s, base, order) if budget.prune else None
        if plan is not None and plan.usable:
            untried, plan = search_kept(s, plan)
        else:
            untried = search_points(s, order)
        ranking = decide(base, s.points, s.duel)
        pruned = pruning_report(plan, s.points) if plan is not None else None
    return _conclude(s, hardware, measured, located, proposals, ranking, untried, pruned)


def _nothing_message(proposals: Proposals) -> str:
    why = "; ".join(f"{f}: {w}" for f, w in proposals.not_proposed)
    return f"nothing to try: {proposals.message}" + (f" (not proposed: {why})" if why else "")


def _conclude(
    s: PointSearch,
    hardware: HardwareConfig,
    measured: MeasureResult,
    located: LocateResult,
    proposals: Proposals,
    ranking: Ranking,
    untried: tuple[str, ...],
    pruned: PruneReport | None = None,
) -> TuneResult:
    """The result, with `tune.json`, `points_predicted.jsonl` (pruning: every point, predicted beside measured)
    and (winner or tie) `recommendation.yaml` written."""
    message = ranking.message + (f"; untried: {'; '.join(untried)}" if untried else "")
    if pruned is not None:
        message += f"; simulator: {pruned.message}; {pruned.trials_real} real trials of a {pruned.trials_full_grid}-"
        message += f"point grid (saved {pruned.trials_saved})"
        pruned.table.to_json(s.out / "points_predicted.jsonl", orient="records", lines=True, default_handler=str)
    path = None
    candidates: list[tuple[str, str]] = []
    if ranking.recommended is not None:
        rec = ranking.recommended
        for p in (rec, *(t for t in ranking.tied if t.index != rec.index)):  # the recommendation, then its ties
            why = ranking.message if p is rec else f"tied with the recommendation {rec.label}: {ranking.message}"
            where = s.out / ("recommendation.yaml" if p is rec else f"candidate-{p.index:02d}.yaml")
            where.write_text(recommendation_yaml(recommendation(s.system, s.workload, s.slo, hardware, p, why)))
            candidates.append((p.label, str(where)))
        path = s.out / "recommendation.yaml"
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
        candidates=tuple(candidates),
        slo_bounds_ms=base.capacity.slo_bounds_ms if base is not None else {},
        measured=measured,
        located=located,
        pruning=pruned,
    )
    (s.out / "tune.json").write_text(json.dumps(result.summary(), indent=2, default=str))
    return result
