"""The `nightly` flow: re-measure the accepted production configuration and fail loudly on a regression.

    python -m flows.nightly --accept <optimize run id>     # promote an accepted optimize run to production
    python -m flows.nightly                                # one nightly check now (ephemeral Prefect API)
    python -m flows.nightly --serve --cron "0 2 * * *"     # serve deployment nightly/nightly on a schedule
    prefect deploy --all                                   # or: prefect.yaml's `nightly` on the work pool

Production is the `optimize` run tagged `inferopt.accepted = true` (one: `accept_run` clears the tag it
replaces, and pins the sha256 of candidate.resolved.json; a changed one, or overrides of `python`, `extra_args`,
`extra_env`, are refused: `inferopt.config.pin`). Tonight that candidate replays the same workload and
`inferopt.ablate.regression` compares the trials with the accepted ones (the baseline stays the promoted run:
no slow drift creeps in); a regression ends the MLflow run FAILED and raises `NightlyRegression`.

Deliberately not here: the statistics (`inferopt.ablate.regression`), running trials (`inferopt.ablate.dispatch`).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

import pandas as pd  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402
from prefect import flow  # noqa: E402

from flows.reaper import start_reaper  # noqa: E402
from inferopt.ablate.dispatch import run_arm_trials, trial_config  # noqa: E402
from inferopt.ablate.regression import ACCEPTED, compare_to_accepted, trials_from_ablation, trials_from_runs  # noqa: E402
from inferopt.config import CandidateConfig, ConfigError, set_dotted  # noqa: E402
from inferopt.config.pin import check_pinned, config_sha256  # noqa: E402
from inferopt.config.redact import redacted_flat, redacted_paths  # noqa: E402
from inferopt.measure.slices import headline  # noqa: E402
from inferopt.measure.slo import RequestSLO  # noqa: E402
from tasks.tracking import DEFAULT_EXPERIMENT, RESOLVED_TAG, Tracker, tracking_uri  # noqa: E402

ACCEPTED_TAG = "inferopt.accepted"
PINNED_TAG = "inferopt.accepted_sha256"  # content hash of candidate.resolved.json, pinned by accept_run
RESOLVED = "candidate.resolved.json"
ABLATE_CHILD = "4-ablate"


class NightlyRegression(RuntimeError):
    """The production configuration measured worse than its accepted baseline, beyond noise."""


def find_accepted_run(client: MlflowClient, experiment: str = DEFAULT_EXPERIMENT) -> str:
    """The run id of the production configuration (the run tagged `inferopt.accepted = true`)."""
    exp = client.get_experiment_by_name(experiment)
    runs = (
        client.search_runs(
            [exp.experiment_id],
            filter_string=f"tags.`{ACCEPTED_TAG}` = 'true'",
            order_by=["tags.`inferopt.accepted_at` DESC"],
            max_results=2,
        )
        if exp
        else []
    )
    if not runs:
        raise LookupError(
            f"no run in experiment {experiment!r} is tagged {ACCEPTED_TAG}=true; fix: "
            "python -m flows.nightly --accept <the optimize run id that production runs>"
        )
    return runs[0].info.run_id


def accept_run(client: MlflowClient, run_id: str, by: str = "", reason: str = "") -> str | None:
    """Promote `run_id` (a finished optimize run whose verdict is accept) to production; returns the run it
    replaces. Another verdict needs `reason` (e.g. production already runs it), recorded on the run as
    `inferopt.accepted_reason`; `inferopt.accepted_at` and who promoted it are tagged too. The replaced run gets
    `inferopt.accepted = false` and `inferopt.superseded_by`, so exactly one run is production."""
    run = client.get_run(run_id)
    verdict = run.data.tags.get("inferopt.verdict")
    if run.data.tags.get("inferopt.kind") != "optimize" or run.info.status != "FINISHED":
        raise ValueError(
            f"run {run_id}: only a finished optimize run can become production "
            f"(kind {run.data.tags.get('inferopt.kind')!r}, status {run.info.status})"
        )
    if verdict != "accept" and not reason.strip():
        raise ValueError(
            f"run {run_id}: its verdict is {verdict!r}, not accept; fix: promote an accepted run, or "
            "say why this one is production anyway with --reason '...'"
        )
    exp_name = client.get_experiment(run.info.experiment_id).name
    try:
        previous = find_accepted_run(client, exp_name)
    except LookupError:
        previous = None
    pinned = resolved_sha256(client, run_id)
    logged = run.data.tags.get(RESOLVED_TAG)
    if logged and logged != pinned:
        raise ValueError(
            f"run {run_id}: {RESOLVED} has sha256 {pinned[:12]}… but the optimize flow logged {logged[:12]}…: "
            "the artifact changed after the run; fix: run the candidate again and promote that run"
        )
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    if previous and previous != run_id:
        client.set_tag(previous, ACCEPTED_TAG, "false")
        client.set_tag(previous, "inferopt.superseded_by", run_id)
    client.set_tag(run_id, PINNED_TAG, pinned)
    client.set_tag(run_id, ACCEPTED_TAG, "true")
    client.set_tag(run_id, "inferopt.accepted_at", now)
    client.set_tag(run_id, "inferopt.accepted_by", by or os.environ.get("USER", "unknown"))
    if verdict != "accept":
        client.set_tag(run_id, "inferopt.accepted_reason", f"verdict {verdict}, promoted because: {reason}")
    return previous if previous != run_id else None


def resolved_sha256(client: MlflowClient, run_id: str) -> str:
    """The content hash (`config_sha256`) of the run's candidate.resolved.json as stored now."""
    with tempfile.TemporaryDirectory(prefix="inferopt-pin-") as tmp:
        return config_sha256(json.loads(Path(client.download_artifacts(run_id, RESOLVED, tmp)).read_text()))


def load_accepted(
    client: MlflowClient, run_id: str, overrides: dict[str, Any] | None
) -> tuple[CandidateConfig, pd.DataFrame]:
    """The accepted run's resolved candidate (with `overrides`) and its `candidate` arm's trials."""
    with tempfile.TemporaryDirectory(prefix="inferopt-accepted-") as tmp:
        reviewed = json.loads(Path(client.download_artifacts(run_id, RESOLVED, tmp)).read_text())
        resolved = json.loads(json.dumps(reviewed))
        for dotted, value in (overrides or {}).items():
            set_dotted(resolved, dotted, value, what="the accepted candidate")
        hidden = redacted_paths(resolved)
        if hidden:  # secrets are never logged, so they cannot be read back from the accepted run
            raise ConfigError(
                f"candidate.resolved.json of run {run_id}: fields {hidden} were redacted when logged (secrets); "
                "fix: pass each as an override, e.g. overrides={" + repr(hidden[0]) + ": <value>}"
            )
        pinned = client.get_run(run_id).data.tags.get(PINNED_TAG)
        check_pinned(reviewed, pinned, overrides, where=f"{RESOLVED} of accepted run {run_id}")
        cfg = trial_config(resolved)
        children = client.search_runs(
            [client.get_run(run_id).info.experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{run_id}' and tags.`inferopt.child` = '{ABLATE_CHILD}'",
        )
        if not children:
            raise LookupError(f"accepted run {run_id} has no {ABLATE_CHILD} child run: nothing to compare with")
        child = children[0].info.run_id
        phases = pd.read_parquet(client.download_artifacts(child, "phases.parquet", tmp))
        trials = pd.read_parquet(client.download_artifacts(child, "trials.parquet", tmp))
    return cfg, trials_from_ablation(phases, trials, arm="candidate", as_arm=ACCEPTED)


@flow(name="nightly", log_prints=False, validate_parameters=True)
def nightly(
    accepted_run_id: str | None = None,
    repeats: int | None = None,
    tolerance: float = 0.05,
    alpha: float = 0.05,
    overrides: dict[str, Any] | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
) -> dict[str, Any]:
    """Re-measure the production configuration (the run tagged inferopt.accepted=true, or `accepted_run_id`)
    `repeats` times (default: as many as it was accepted with) and compare it with its accepted trials.

    Read from the accepted run: `candidate.resolved.json` (the production system = baseline + changes, the
    workload, the measure settings) and its ablation's `candidate` trials (`4-ablate/phases.parquet`,
    `trials.parquet`). Logged: a run `nightly-<candidate>` (tags `inferopt.kind = nightly`,
    `inferopt.accepted_run`), the effects table, each trial's headline metrics, `inferopt.regression` and
    `inferopt.regression_reasons`. `overrides` (dotted fields of the resolved candidate, e.g.
    {"baseline.decode_step_ms": 6.0}) re-measure a variant of production — a new driver image, a planted
    regression in a test — and are tagged on the run."""
    client = MlflowClient(tracking_uri=tracking_uri())
    run_id = accepted_run_id or find_accepted_run(client, experiment)
    cfg, accepted = load_accepted(client, run_id, overrides)
    n = repeats or max(2, len(accepted))
    tags = {"inferopt.kind": "nightly", "inferopt.candidate": cfg.name, "inferopt.accepted_run": run_id}
    if overrides:
        tags["inferopt.nightly.overrides"] = json.dumps(redacted_flat(overrides))
    tracker = Tracker.start(run_name=f"nightly-{cfg.name}", experiment=experiment, tags=tags)
    print(f"[nightly] production = run {run_id} ({cfg.name}); MLflow run {tracker.parent_run_id}", flush=True)
    try:
        tracker.params(
            {
                "accepted_run": run_id,
                "repeats": n,
                "tolerance": tolerance,
                "alpha": alpha,
                "system": cfg.candidate_system.model_dump(mode="json"),
                "workload": cfg.workload.name,
            }
        )
        runs, window = run_arm_trials(
            cfg, "candidate", tracker.dir_for("tonight"), run_tag=tracker.parent_run_id, repeats=n
        )
        for r in runs:
            if not r.failed:
                tracker.metrics(headline(r.phases, r.duration_s), step=r.tags.trial)
        context = RequestSLO.of(cfg.workload, cfg.slo)  # failures censored at the deadline, goodput's SLO
        check = compare_to_accepted(accepted, trials_from_runs(runs), alpha=alpha, tolerance=tolerance, context=context)
        if len(check.effects):
            tracker.table(check.effects, "effects.parquet")
            for e in check.effects.itertuples():
                tracker.metrics({f"{e.metric}.ratio": e.ratio, f"{e.metric}.p_value": e.p_value})
        tracker.metrics(
            {
                "regression": float(check.regressed),
                "pairs": float(check.n_pairs),
                "failed_share_tonight": check.failed_share_tonight,
            }
        )
        tracker.json(
            {
                "regressed": check.regressed,
                "reasons": check.reasons,
                "notes": check.notes,
                "underpowered": check.underpowered,
                "accepted_run": run_id,
                "window": vars(window),
            },
            "nightly.json",
        )
        tracker.tags(
            {
                "inferopt.regression": str(check.regressed).lower(),
                "inferopt.regression_reasons": "\n".join(check.reasons) or "none",
                "inferopt.regression_power": "\n".join(check.underpowered)
                or f"every metric: a regression of the tolerance is detectable at power 0.8 with {check.n_pairs} pairs",
            }
        )
    except BaseException:
        tracker.fail({"inferopt.regression": "error"})  # never raises over the error being handled
        raise
    if check.regressed:
        tracker.finish(status="FAILED")
        raise NightlyRegression(
            f"REGRESSION of production ({cfg.name}, accepted run {run_id}) in MLflow run "
            f"{tracker.parent_run_id}:\n  " + "\n  ".join(check.reasons)
        )
    tracker.finish()
    for line in check.underpowered:  # said, never a silent pass
        print(f"[nightly] UNDERPOWERED: {line.removeprefix('underpowered: ')}", flush=True)
    seen = "no regression beyond noise" if not check.underpowered else "no regression seen, but see UNDERPOWERED"
    print(f"[nightly] {seen} ({check.n_pairs} pairs, tolerance {tolerance:.0%})", flush=True)
    return {
        "run_id": tracker.parent_run_id,
        "accepted_run": run_id,
        "regressed": False,
        "pairs": check.n_pairs,
        "underpowered": check.underpowered,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Nightly regression check of the accepted production configuration.")
    parser.add_argument("--accept", metavar="RUN_ID", help="promote an optimize run (verdict accept) to production")
    parser.add_argument(
        "--reason", default="", help="with --accept: why a run whose verdict is not accept is production"
    )
    parser.add_argument("--experiment", default=DEFAULT_EXPERIMENT)
    parser.add_argument("--serve", action="store_true", help="serve deployment nightly/nightly")
    parser.add_argument("--cron", default="0 2 * * *", help="with --serve: the schedule (UTC)")
    args = parser.parse_args(argv)
    if args.accept:
        try:
            previous = accept_run(MlflowClient(tracking_uri=tracking_uri()), args.accept, reason=args.reason)
        except ValueError as exc:
            print(f"not promoted: {exc}", file=sys.stderr)
            return 2
        print(f"production = run {args.accept}" + (f" (replaces {previous})" if previous else ""))
        return 0
    if args.serve:
        from prefect.schedules import Cron

        nightly.serve(
            name="nightly", schedule=Cron(args.cron, timezone="UTC"), parameters={"experiment": args.experiment}
        )
        return 0
    start_reaper()  # a SIGKILL of this process leaves nothing it started running
    try:
        result = nightly(experiment=args.experiment)
    except NightlyRegression as exc:
        print(str(exc), file=sys.stderr)
        return 1
    except ConfigError as exc:  # the pinned config changed, or an override of an executable field
        print(f"not run: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
