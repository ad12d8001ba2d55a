"""The `tune` flow (issue 14): from a system and its production load to a recommended change, into one MLflow
parent run with a child run per point tried.

    python -m flows.tune configs/systems/fake.yaml --workload configs/workloads/fake-small.yaml \\
        --slo configs/slo/fake.yaml [--hardware configs/hardware/cpu.yaml] [--budget 12] [--prune]
    python -m flows.tune --serve      # deployment optimize/system (prefect deployment run optimize/system -p ...)

measure -> locate -> propose -> capacity under the SLO per point (`--prune`: only the points the simulator,
calibrated on the baseline, keeps) -> a recommendation (a candidate YAML) or "no change helps", with the evidence
(`inferopt.choose.search`); then the recommendation (and up to `--judge` N - 1 points it tied with) goes through
`flows.optimize` — ablation, validation, gate, verdict — and the tune's parent run holds the final word
(`inferopt.verdict.tuned`: proven or not, with each verdict's run). Prefect name `optimize`, deployment
`optimize/system` beside `optimize/candidate`. Bad input (a config, `--set`, the budget, the search space, a
cheat the recommendation would carry) is refused before Prefect or MLflow start (exit 2).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import fields
from typing import Any, Literal

os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("KINETO_LOG_LEVEL", "5")

from prefect import flow, task  # noqa: E402

from flows.optimize import optimize  # noqa: E402
from flows.reaper import start_reaper  # noqa: E402
from inferopt.choose.search import TuneBudget, custom_space, search_space_problems  # noqa: E402
from inferopt.config import ConfigError  # noqa: E402
from inferopt.config.precheck import check_tune, parse_set_items  # noqa: E402
from inferopt.config.redact import redacted  # noqa: E402
from inferopt.config.yaml_io import parse_yaml  # noqa: E402
from inferopt.validate.capacity import CapacityBudget  # noqa: E402
from inferopt.verdict.lint import refuse_cheats  # noqa: E402
from inferopt.verdict.tuned import Judged, chain_outcome  # noqa: E402
from tasks.dispatch import online_workers  # noqa: E402
from tasks.dispatch_points import PointDispatch, point_runner  # noqa: E402
from tasks.tracking import Tracker  # noqa: E402
from tasks.tune import log_chain, tune_task  # noqa: E402

DEFAULT_HARDWARE = "configs/hardware/cpu.yaml"
DISPATCH_KEYS = ("dispatch", "parallel", "point_deployment")  # where points run, not what the search is


def load_inputs(
    system: str,
    workload: str,
    slo: str,
    hardware: str = DEFAULT_HARDWARE,
    budget: int = 12,
    capacity: dict[str, Any] | None = None,
    spaces: dict[str, list[Any]] | None = None,
    control: str | None = None,
    overrides: dict[str, Any] | None = None,
    judge: int = 1,
    prune: bool = False,
) -> tuple[tuple[Any, ...], TuneBudget, list[Any] | None]:
    """The configs, the budget and the search space, each checked: ConfigError for a bad file or `--set`
    (`precheck.check_tune`) or a cheat the recommendation would carry into the chain (`refuse_cheats`, when
    `judge` > 0), ValueError (naming the field and the fix) for a bad budget or space — before anything runs."""
    if judge < 0:
        raise ValueError(f"--judge {judge}: points through the chain must be >= 0 (0: search only); fix: --judge 1")
    paths = {"system": system, "workload": workload, "slo": slo, "hardware": hardware}
    as_candidate = check_tune(paths, overrides)
    if judge:
        refuse_cheats(as_candidate)  # the recommendation is this plus one change: flows.optimize would refuse it
    c = as_candidate
    configs = (c.baseline, c.workload, c.slo, c.hardware)
    knobs = [custom_space(configs[0], field, values) for field, values in (spaces or {}).items()] or None
    known = {f.name for f in fields(CapacityBudget)}
    unknown = sorted(set(capacity or {}) - known)
    if unknown:
        raise ValueError(f"capacity: unknown field(s) {unknown}; fix: one of {', '.join(sorted(known))}")
    try:
        cap = CapacityBudget(**{"max_probes": 8, "rel_tol": 0.1, **(capacity or {})})
    except TypeError as exc:  # a value of the wrong type (`--capacity max_probes=many`)
        raise ValueError(f"capacity {capacity}: {exc}; fix: numbers, e.g. max_probes=8 rel_tol=0.1") from None
    try:
        tb = TuneBudget(max_trials=budget, capacity=cap, control=control, prune=prune)
    except ValueError as exc:
        raise ValueError(f"{exc} (max_trials is --budget {budget}; capacity.* are --capacity FIELD=VALUE)") from None
    problems = search_space_problems(configs[0], knobs, control)
    if problems:
        raise ValueError("; ".join(problems))
    return configs, tb, knobs


@task(name="load-configs")
def load_task(**kwargs: Any) -> tuple[tuple[Any, ...], TuneBudget, list[Any] | None]:
    return load_inputs(**kwargs)


@flow(name="optimize", log_prints=False, validate_parameters=True)
def tune(
    system: str,
    workload: str,
    slo: str,
    hardware: str = DEFAULT_HARDWARE,
    budget: int = 12,
    capacity: dict[str, Any] | None = None,
    spaces: dict[str, list[Any]] | None = None,
    control: str | None = None,
    overrides: dict[str, Any] | None = None,
    judge: int = 1,
    prune: bool = False,
    experiment: str = "inferopt",
    dispatch: Literal["inline", "workers"] = "inline",
    parallel: int | None = None,
    point_deployment: str = "point/point",
    dispatch_timeout_s: float = 3600.0,
) -> dict[str, Any]:
    """Search `system` (a system YAML) for the change that raises its capacity under `slo` on `workload`; `budget`:
    capacity searches, the baseline's included; `capacity`: CapacityBudget fields (e.g. {"requests_per_probe": 40});
    `spaces`: {dotted field: values} searched instead of the engine's declared knob spaces; `overrides`:
    {"workload.num_requests": 16, ...}; `judge`: how many of the ranked points (the recommendation, then its
    ties) go through flows.optimize (0: the search alone); `prune`: the simulator, calibrated on the baseline,
    predicts every point and only what it keeps is measured (`inferopt.choose.pruning`); `dispatch`: "workers"
    runs each point's capacity search as a flow run of `point_deployment` on its work pool (tasks/dispatch_points.py),
    `parallel` at a time (default: the pool's workers online now), each waited for up to `dispatch_timeout_s`."""
    args = {"system": system, "workload": workload, "slo": slo, "hardware": hardware, "budget": budget}
    more = {"capacity": capacity, "spaces": spaces, "control": control, "overrides": overrides, "judge": judge}
    more["prune"] = prune
    configs, tb, knobs = load_task(**args, **more)
    width = dispatch_width(dispatch, parallel, point_deployment)  # before MLflow starts: a bad pool says so first
    tags = {"inferopt.kind": "tune", "inferopt.system": configs[0].name, "inferopt.config_path": system}
    tracker = Tracker.start(run_name=f"tune-{configs[0].name}", experiment=experiment, tags=tags)
    print(f"[tune] MLflow run {tracker.parent_run_id}; results in {tracker.results_dir}")
    try:
        shown = {"capacity": tb.capacity.__dict__, "spaces": spaces or "declared", "control": control, "judge": judge}
        shown["prune"] = prune
        tracker.params({**args, **shown, "overrides": overrides or {}})
        resolved = dict(zip(("system", "workload", "slo", "hardware"), configs, strict=True))
        tracker.json(redacted({k: c.model_dump(mode="json") for k, c in resolved.items()}), "inputs.resolved.json")
        paths = {k: args[k] for k in ("system", "workload", "slo", "hardware")}
        where = PointDispatch(point_deployment, paths, overrides, tb.capacity, timeout_s=dispatch_timeout_s)
        runner = point_runner(where, tracker) if dispatch == "workers" else None
        result = tune_task(configs, tb, tracker, knobs, run_points=runner, parallel=width)
        judged = [judge_point(label, path, experiment) for label, path in result.candidates[:judge]]
        outcome = chain_outcome(result.decision, judged)
        log_chain(tracker, result, outcome)
    except BaseException:
        tracker.fail({"inferopt.tune.decision": "error"})  # never raises over the error being handled
        raise
    tracker.finish()
    return {
        "run_id": tracker.parent_run_id,
        "decision": result.decision,
        "message": result.message,
        "recommendation": result.recommendation_path,
        "evidence": list(result.evidence),
        "results_dir": str(tracker.results_dir),
        "chain": outcome.to_dict(),
        "report": str(tracker.results_dir / "report.html"),
        "pruning": result.pruning.summary() if result.pruning is not None else None,
    }


def dispatch_width(dispatch: str, parallel: int | None, deployment: str) -> int:
    """How many points run at once: 1 inline; on workers `parallel`, or the deployment's pool's workers online
    now (at least 1). ValueError naming the fix for a bad value or a deployment Prefect does not know."""
    if dispatch not in ("inline", "workers"):
        raise ValueError(f"dispatch {dispatch!r}: one of inline, workers; fix: --dispatch workers")
    if parallel is not None and parallel < 1:
        raise ValueError(f"--parallel {parallel}: points at once must be >= 1; fix: the number of worker nodes")
    if dispatch == "inline":
        return 1
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            pool, online = online_workers(client, deployment)
        except ObjectNotFound:
            raise ValueError(
                f"--dispatch workers: Prefect has no deployment {deployment!r}; fix: INFEROPT_REPO=$PWD prefect "
                "deploy --all (prefect.yaml registers point/point on the pool arms)"
            ) from None
    width = parallel or max(1, online)
    print(f"[tune] points run on {deployment} (pool {pool}, {online} worker(s) online), {width} at a time", flush=True)
    return width


def judge_point(label: str, candidate: str, experiment: str) -> Judged:
    """One ranked point through the chain (flows.optimize as a subflow: its own MLflow parent run); a refusal
    by its pre-run check or an error is the point's verdict, not the search's end."""
    try:
        r = optimize(candidate=candidate, experiment=experiment)
    except ConfigError as exc:  # the pre-run check or the cheat lint refused the candidate
        return Judged(label, candidate, "refused", (str(exc),))
    except Exception as exc:  # noqa: BLE001 - the other points and the search's evidence still stand
        return Judged(label, candidate, "error", (f"{type(exc).__name__}: {exc}",))
    reasons = tuple(r["reasons"]) + tuple(f"WARNING: {w}" for w in r["warnings"])
    return Judged(label, candidate, r["decision"], reasons, r["run_id"], r["report"])


def parse_knob_items(items: Sequence[str], what: str, split: bool) -> dict[str, Any]:
    """`--capacity FIELD=VALUE` / `--space FIELD=V1,V2` items (`precheck.parse_set_items`: FIELD=VALUE, values
    YAML, each field once; a malformed one is a ConfigError naming it); `split`: a comma list of YAML values."""
    try:
        parsed = parse_set_items(items)
    except ConfigError as exc:
        raise ConfigError(str(exc).replace("--set", what).replace("workload.num_requests=16", "FIELD=VALUE")) from None
    if not split:
        return parsed
    return {k: _values(v, f"{what} {k}") for k, v in parsed.items()}


def _values(value: Any, where: str) -> list[Any]:
    if value is None:  # `FIELD=`: no values (custom_space refuses the empty space with its fix)
        return []
    if isinstance(value, list):
        return value
    if isinstance(value, str):
        return [parse_yaml(v, where) for v in value.split(",") if v.strip()]
    return [value]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Find the change that raises a system's capacity under an SLO.")
    parser.add_argument("system", help="system YAML (configs/systems/)")
    parser.add_argument("--workload", required=True, help="workload YAML: the production load")
    parser.add_argument("--slo", required=True, help="SLO YAML")
    parser.add_argument("--hardware", default=DEFAULT_HARDWARE)
    parser.add_argument("--budget", type=int, default=12, help="capacity searches, the baseline's included")
    parser.add_argument("--capacity", action="append", default=[], metavar="FIELD=VALUE", help="CapacityBudget field")
    parser.add_argument("--space", action="append", default=[], metavar="FIELD=V1,V2", help="search this knob only")
    parser.add_argument("--control", default=None, help="a lever to add as a control arm (must show no gain)")
    parser.add_argument("--set", action="append", default=[], metavar="PART.FIELD=VALUE", help="e.g. workload.seed=4")
    parser.add_argument("--judge", type=int, default=1, help="ranked points through flows.optimize (0: search only)")
    parser.add_argument(
        "--prune",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="predict every point with the simulator calibrated on the baseline; measure only what it keeps",
    )
    parser.add_argument(
        "--dispatch",
        choices=["inline", "workers"],
        default="inline",
        help="workers: each point's capacity search runs as a flow run of --point-deployment (one per worker node)",
    )
    parser.add_argument("--parallel", type=int, default=None, help="points at once on workers (default: online)")
    parser.add_argument("--point-deployment", default="point/point")
    parser.add_argument("--serve", action="store_true", help="serve the optimize/system deployment")
    args = parser.parse_args(argv)
    try:  # refuse bad input before Prefect, MLflow or any engine starts
        kwargs = {
            "system": args.system,
            "workload": args.workload,
            "slo": args.slo,
            "hardware": args.hardware,
            "budget": args.budget,
            "capacity": parse_knob_items(args.capacity, "--capacity", split=False) or None,
            "spaces": parse_knob_items(args.space, "--space", split=True) or None,
            "control": args.control,
            "overrides": parse_set_items(args.set) or None,
            "judge": args.judge,
            "prune": args.prune,
            "dispatch": args.dispatch,
            "parallel": args.parallel,
            "point_deployment": args.point_deployment,
        }
        if not args.serve:
            load_inputs(**{k: v for k, v in kwargs.items() if k not in DISPATCH_KEYS})
            if args.parallel is not None:
                dispatch_width("inline", args.parallel, args.point_deployment)  # the value; the pool at run time
    except ConfigError as exc:  # CheatRefused included
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"tune: {exc}", file=sys.stderr)
        return 2
    if args.serve:
        tune.serve(name="system", parameters={k: v for k, v in kwargs.items() if v is not None})
        return 0
    start_reaper()  # a SIGKILL of this process leaves nothing it started running
    result = tune(**kwargs)
    print(json.dumps({k: result[k] for k in ("decision", "run_id", "recommendation", "results_dir")}))
    print(f"\nTUNE: {result['decision'].upper().replace('_', ' ')}  (MLflow run {result['run_id']})")
    print(f"  {result['message']}")
    for line in result["evidence"]:
        print(f"  {line}")
    chain = result["chain"]
    print(f"\nCHAIN: {chain['decision'].upper().replace('_', ' ')}: {chain['message']}")
    if result["recommendation"] and not chain["judged"]:
        print(f"\nJudge it: .venv/bin/python -m flows.optimize {result['recommendation']}")
    print(f"Report: {result['report']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
