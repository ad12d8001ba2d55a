"""The `tune` flow (issue 14): from a system and its production load to a recommended change, into one MLflow
parent run with a child run per point tried.

    python -m flows.tune configs/systems/fake.yaml --workload configs/workloads/fake-small.yaml \\
        --slo configs/slo/fake.yaml [--hardware configs/hardware/cpu.yaml] [--budget 12]
    python -m flows.tune --serve                          # serve deployment optimize/system
    prefect deployment run optimize/system -p system=configs/systems/hf-tiny.yaml \\
        -p workload=configs/workloads/interactive.yaml -p slo=configs/slo/interactive.yaml --watch

measure -> locate -> propose -> capacity under the SLO per point -> a recommendation (a candidate YAML that
`python -m flows.optimize` judges) or "no change helps", with the evidence (`inferopt.choose.search`). Its Prefect
name is `optimize`, so its deployment reads `optimize/system` beside `optimize/candidate`: one flow family, find
a change for a system / judge a candidate. Bad input (a config, the budget, the search space) is refused before
Prefect or MLflow start (exit 2).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import fields
from typing import Any

os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("KINETO_LOG_LEVEL", "5")

import yaml  # noqa: E402
from prefect import flow, task  # noqa: E402

from flows.reaper import start_reaper  # noqa: E402
from inferopt.choose.search import TuneBudget, custom_space, search_space_problems  # noqa: E402
from inferopt.config import ConfigError, load_config  # noqa: E402
from inferopt.config.redact import redacted  # noqa: E402
from inferopt.validate.capacity import CapacityBudget  # noqa: E402
from tasks.tracking import Tracker  # noqa: E402
from tasks.tune import tune_task  # noqa: E402

DEFAULT_HARDWARE = "configs/hardware/cpu.yaml"


def load_inputs(
    system: str,
    workload: str,
    slo: str,
    hardware: str = DEFAULT_HARDWARE,
    budget: int = 12,
    capacity: dict[str, Any] | None = None,
    spaces: dict[str, list[Any]] | None = None,
    control: str | None = None,
) -> tuple[tuple[Any, ...], TuneBudget, list[Any] | None]:
    """The configs, the budget and the search space, each checked: ConfigError for a bad file, ValueError
    (naming the field and the fix) for a bad budget or space — before anything runs."""
    configs = (
        load_config(system, kind="system"),
        load_config(workload, kind="workload"),
        load_config(slo, kind="slo"),
        load_config(hardware, kind="hardware"),
    )
    knobs = [custom_space(configs[0], field, values) for field, values in (spaces or {}).items()] or None
    known = {f.name for f in fields(CapacityBudget)}
    unknown = sorted(set(capacity or {}) - known)
    if unknown:
        raise ValueError(f"capacity: unknown field(s) {unknown}; fix: one of {', '.join(sorted(known))}")
    try:
        cap = CapacityBudget(**{"max_probes": 8, "rel_tol": 0.1, **(capacity or {})})
    except TypeError as exc:  # a value of the wrong type (`--capacity max_probes=many`)
        raise ValueError(f"capacity {capacity}: {exc}; fix: numbers, e.g. max_probes=8 rel_tol=0.1") from None
    tb = TuneBudget(max_trials=budget, capacity=cap, control=control)
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
    experiment: str = "inferopt",
) -> dict[str, Any]:
    """Search `system` (a system YAML) for the change that raises its capacity under `slo` on `workload`; `budget`:
    capacity searches, the baseline's included; `capacity`: CapacityBudget fields (e.g. {"requests_per_probe": 40});
    `spaces`: {dotted field: values} searched instead of the engine's declared knob spaces."""
    args = {"system": system, "workload": workload, "slo": slo, "hardware": hardware, "budget": budget}
    configs, tb, knobs = load_task(**args, capacity=capacity, spaces=spaces, control=control)
    tags = {"inferopt.kind": "tune", "inferopt.system": configs[0].name, "inferopt.config_path": system}
    tracker = Tracker.start(run_name=f"tune-{configs[0].name}", experiment=experiment, tags=tags)
    print(f"[tune] MLflow run {tracker.parent_run_id}; results in {tracker.results_dir}")
    try:
        tracker.params({**args, "capacity": tb.capacity.__dict__, "spaces": spaces or "declared", "control": control})
        resolved = dict(zip(("system", "workload", "slo", "hardware"), configs, strict=True))
        tracker.json(redacted({k: c.model_dump(mode="json") for k, c in resolved.items()}), "inputs.resolved.json")
        result = tune_task(configs, tb, tracker, knobs)
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
    }


def _pairs(items: list[str], what: str, parser: argparse.ArgumentParser, split: bool) -> dict[str, Any]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            parser.error(f"{what} {item!r}: expected FIELD=VALUE")
        out[key] = [yaml.safe_load(v) for v in value.split(",") if v.strip()] if split else yaml.safe_load(value)
    return out


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
    parser.add_argument("--serve", action="store_true", help="serve the optimize/system deployment")
    args = parser.parse_args(argv)
    kwargs = {
        "system": args.system,
        "workload": args.workload,
        "slo": args.slo,
        "hardware": args.hardware,
        "budget": args.budget,
        "capacity": _pairs(args.capacity, "--capacity", parser, split=False) or None,
        "spaces": _pairs(args.space, "--space", parser, split=True) or None,
        "control": args.control,
    }
    if args.serve:
        tune.serve(name="system", parameters={k: v for k, v in kwargs.items() if v is not None})
        return 0
    try:  # refuse bad input before Prefect, MLflow or any engine starts
        load_inputs(**kwargs)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"tune: {exc}", file=sys.stderr)
        return 2
    start_reaper()  # a SIGKILL of this process leaves nothing it started running
    result = tune(**kwargs)
    print(json.dumps({k: result[k] for k in ("decision", "run_id", "recommendation", "results_dir")}))
    print(f"\nTUNE: {result['decision'].upper().replace('_', ' ')}  (MLflow run {result['run_id']})")
    print(f"  {result['message']}")
    for line in result["evidence"]:
        print(f"  {line}")
    if result["recommendation"]:
        print(f"\nJudge it: .venv/bin/python -m flows.optimize {result['recommendation']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
