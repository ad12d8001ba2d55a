"""The `optimize` flow: one candidate through the six steps, into one MLflow parent run.

    python -m flows.optimize configs/candidates/batching.yaml        # run once (ephemeral Prefect API)
    python -m flows.optimize --serve                                 # serve deployment optimize/candidate
    prefect deployment run optimize/candidate -p candidate=configs/candidates/sdpa.yaml --watch

measure -> locate -> choose -> ablate -> validate -> gate -> verdict. Before Prefect, MLflow or any model
starts, `prerun` checks every input (`inferopt.config.precheck`: the config and its files, the trace's rows,
paths, numbers, the device) and the benchmark cheats a config shows (SPEC V4, `inferopt.verdict.lint`); a
refusal is one message and exit code 2 (`lint.allow` opts into a cheat, recorded and flagged on the verdict).
Secrets are redacted in everything logged. Every step is a Prefect task wrapping a pure function of `inferopt`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # the op profile in locate: no USDT chatter on stdout

from mlflow.tracking import MlflowClient  # noqa: E402
from prefect import flow, task  # noqa: E402

from flows.reaper import start_reaper  # noqa: E402
from inferopt.ablate.resume import TRIALS, archive_attempt  # noqa: E402
from inferopt.config import CandidateConfig, ConfigError  # noqa: E402
from inferopt.config.pin import config_sha256  # noqa: E402
from inferopt.config.precheck import check_candidate, parse_set_items  # noqa: E402
from inferopt.config.redact import redacted, secret_values  # noqa: E402
from inferopt.records import RecordWriteError  # noqa: E402
from inferopt.verdict.lint import CheatRefused, refuse_cheats  # noqa: E402
from tasks.ablate import ablate_task  # noqa: E402
from tasks.choose import choose_task  # noqa: E402
from tasks.gate import gate_task  # noqa: E402
from tasks.locate import locate_task  # noqa: E402
from tasks.measure import measure_task  # noqa: E402
from tasks.report import Progress, report_after_failure, report_task  # noqa: E402
from tasks.tracking import RESOLVED_TAG, Tracker, resumable, tracking_uri  # noqa: E402
from tasks.tracking_buffer import IDS, PENDING  # noqa: E402
from tasks.validate import validate_task  # noqa: E402
from tasks.verdict import verdict_task  # noqa: E402

DEFAULT_CANDIDATE = "configs/candidates/batching.yaml"


def precheck(candidate: str, overrides: dict[str, Any] | None = None) -> CandidateConfig:
    """The pre-run check, before Prefect, MLflow or any model: every input (`check_candidate`: the config, its
    files, the trace's rows, paths, device), then the cheat lint. Raises ConfigError (CheatRefused is one)."""
    cfg = check_candidate(candidate, overrides)
    refuse_cheats(cfg)  # SPEC V4: raises CheatRefused (a ConfigError) before any model loads
    return cfg


def prerun(candidate: str, set_items: Sequence[str] = ()) -> tuple[CandidateConfig, dict[str, Any]]:
    """What `main` runs before Prefect or MLflow start: the `--set` items parsed, then `precheck`."""
    overrides = parse_set_items(set_items)
    return precheck(candidate, overrides), overrides


def refusal(exc: ConfigError, candidate: str) -> str:
    """The one message the CLI prints for a refused input (stderr, then exit code 2)."""
    return f"{candidate}: {exc}" if isinstance(exc, CheatRefused) else f"config error: {exc}"


def resolved_sha256(cfg: CandidateConfig) -> str:
    """The content hash of candidate.resolved.json as the flow logs it (secrets redacted)."""
    return config_sha256(json.loads(json.dumps(redacted(cfg.model_dump(mode="json")), default=str)))


@task(name="load-config")
def load_candidate(candidate: str, overrides: dict[str, Any] | None = None) -> CandidateConfig:
    return precheck(candidate, overrides)


@flow(name="optimize", log_prints=False, validate_parameters=True)  # step progress to stdout
def optimize(
    candidate: str = DEFAULT_CANDIDATE,
    overrides: dict[str, Any] | None = None,
    experiment: str = "inferopt",
    compare_with: str | None = None,
    resume: str | None = None,
) -> dict[str, Any]:
    """Judge one candidate optimization. `candidate` is a YAML path (relative to the working directory);
    `overrides` sets dotted fields, e.g. {"workload.num_requests": 16}. The report ends with this run beside
    `compare_with` (an MLflow run id or results directory), by default the previous run of the same candidate.
    `resume`: the MLflow run id of a killed run of the same candidate: the run is reopened, what it wrote moves
    to `results/<run>/attempt-<k>/`, the steps run again, and the ablation loads the trials it had finished
    instead of rerunning them."""
    cfg = load_candidate(candidate, overrides)
    resume_from = None
    if resume:
        why = resumable(MlflowClient(tracking_uri=tracking_uri()), resume, resolved_sha256(cfg))
        if why:
            raise ConfigError(why)
        tracker = Tracker.resume(resume)
        archived = archive_attempt(tracker.results_dir, keep=(PENDING, IDS))
        resume_from = archived / "4-ablate" / TRIALS if archived else None
        print(f"[optimize] resuming MLflow run {resume}; the killed attempt's files are in {archived}")
    else:
        tracker = Tracker.start(
            run_name=cfg.name,
            experiment=experiment,
            tags={"inferopt.candidate": cfg.name, "inferopt.config_path": str(candidate)},
        )
    print(f"[optimize] MLflow run {tracker.parent_run_id}; results in {tracker.results_dir}")
    progress = Progress(total=6)  # one line per step with the elapsed time
    report = None
    try:
        tracker.params(
            {
                "candidate": cfg.name,
                "changes": cfg.changes,
                "workload": cfg.workload.model_dump(mode="json"),
                "slo": cfg.slo.model_dump(mode="json"),
                "hardware": cfg.hardware.name,
                "baseline": cfg.baseline.model_dump(mode="json"),
            }
        )
        resolved = tracker.json(redacted(cfg.model_dump(mode="json")), "candidate.resolved.json")  # secrets as ***
        tracker.tags({RESOLVED_TAG: config_sha256(json.loads(resolved.read_text()))})  # what --accept pins
        if cfg.lint.allow:  # the documented override of the cheat lint: on the run from the start
            tracker.tags(
                {"inferopt.lint.allow": ",".join(cfg.lint.allow), "inferopt.lint.allow_reason": cfg.lint.reason}
            )
        tracker.file(candidate, secrets=secret_values(cfg.model_dump(mode="json")))  # the file as written, scrubbed
        progress.step("measure")
        measured = measure_task(cfg, tracker)
        progress.step("locate")
        located = locate_task(cfg, measured, tracker)
        progress.step("choose")
        choice = choose_task(cfg, located, tracker)
        progress.step("ablate")
        ablation = ablate_task(cfg, tracker, resume_from=resume_from)
        progress.step("validate")
        scenarios = validate_task(cfg, tracker, arm="candidate")
        progress.step("gate")
        gate = gate_task(cfg, ablation, located, choice, tracker)
        progress.step("verdict")
        verdict = verdict_task(cfg, measured, located, choice, ablation, scenarios, gate, tracker)
        progress.step("report")
        report = report_task(tracker, compare_with)
        progress.done()
    except BaseException:
        report_after_failure(tracker)  # the steps that did run, in report.html (not on Ctrl-C)
        tracker.fail({"inferopt.verdict": "error"})  # never raises over the error being handled
        raise
    tracker.finish()
    return {
        "run_id": tracker.parent_run_id,
        "decision": verdict.decision,
        "reasons": list(verdict.reasons),
        "warnings": list(verdict.warnings),
        "results_dir": str(tracker.results_dir),
        "report": str(report),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Judge a candidate serving optimization (six steps).")
    parser.add_argument("candidate", nargs="?", default=DEFAULT_CANDIDATE, help="candidate YAML")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a dotted field (YAML value), e.g. --set workload.num_requests=16",
    )
    parser.add_argument(
        "--compare-with",
        default=None,
        metavar="RUN",
        help="the report compares this run with RUN (MLflow run id or results dir); default: the candidate's last run",
    )
    parser.add_argument(
        "--resume", metavar="RUN_ID", help="continue a killed run of this candidate from its finished ablation trials"
    )
    parser.add_argument("--serve", action="store_true", help="serve the optimize/candidate deployment")
    parser.add_argument("--cron", default=None, help="with --serve: a cron schedule, e.g. '0 2 * * *'")
    args = parser.parse_args(argv)
    if args.serve:
        optimize.serve(name="candidate", cron=args.cron, parameters={"candidate": args.candidate})
        return 0
    try:  # fail on a bad input before Prefect, MLflow or any model starts (exit 2, one message)
        _cfg, overrides = prerun(args.candidate, args.set)
    except ConfigError as exc:  # CheatRefused included
        print(refusal(exc, args.candidate), file=sys.stderr)
        return 2
    if args.resume:
        why = resumable(MlflowClient(tracking_uri=tracking_uri()), args.resume, resolved_sha256(_cfg))
        if why:
            print(why, file=sys.stderr)
            return 2
    start_reaper()  # a SIGKILL of this process leaves nothing it started running (Prefect's own server included)
    try:
        result = optimize(
            candidate=args.candidate,
            overrides=overrides or None,
            compare_with=args.compare_with,
            resume=args.resume,
        )
    except RecordWriteError as exc:  # disk full: the run stopped; the message says what was kept and the fix
        print(f"STOPPED: {exc}", file=sys.stderr)
        return 1
    print(
        json.dumps(
            {"decision": result["decision"], "mlflow_run_id": result["run_id"], "results_dir": result["results_dir"]}
        )
    )
    print(f"\nVERDICT: {result['decision'].upper()}  (MLflow run {result['run_id']})")
    for line in result["reasons"]:
        print(f"  {line}")
    for w in result["warnings"]:
        print(f"  WARNING: {w}")
    uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlflow.db'}"
    print(f"\nReview: .venv/bin/mlflow ui --backend-store-uri {uri} --host 127.0.0.1 --port 5000")
    print(f"Report: {result['report']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
