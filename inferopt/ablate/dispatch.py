"""One arm's trials as a unit of work that can run elsewhere (a Prefect worker on another node), and its results
as files that travel back to the process that runs the statistics.

- `run_arm_trials`: every planned repeat of one arm, each trial saved the moment it ends;
- `save_run` / `load_run`: a `MeasuredRun` as plain files (run.json, requests.jsonl, phases.parquet,
  aggregate_join.parquet) — no pickles, so a results directory from another machine is safe to read;
- `PrecomputedTrials`: the `run_trial` hook of `run.ablate` that hands back the trials a worker ran.

On workers the arms run concurrently, each arm's repeats in order: repeat r of every arm still pairs (they ran
at about the same time, sharing the day's drift), but on separate nodes the arm effect includes the node-to-node
difference; the A/A arm on its own node measures that floor. Sequential stopping still looks after each repeat,
but workers run all `max_repeats` (they cannot see the looks).

Deliberately not here: Prefect (submitting the runs) and MLflow (moving the files): `tasks/dispatch.py`.
"""

from __future__ import annotations

import json
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import pandas as pd

from inferopt.ablate.plan import Trial, plan_arms
from inferopt.choose.output_lengths import arm_workload
from inferopt.config import CandidateConfig
from inferopt.config.redact import redacted
from inferopt.measure.join import rewrite_records
from inferopt.measure.runner import RunTags
from inferopt.measure.session import MeasuredRun, run_system
from inferopt.records import RequestRecord, read_records
from inferopt.workload.build import build_workload

TRIAL_SECTIONS = (
    "name",
    "description",
    "baseline",
    "changes",
    "target_metrics",
    "workload",
    "slo",
    "hardware",
    "measure",
    "ablation",
)
_SCALARS = (
    "duration_s",
    "engine_info",
    "server_metrics",
    "warmup_declared",
    "failed",
    "error",
    "failed_at",
    "error_type",
    "join",
    "resources",
)


@dataclass
class ArmWindow:
    """Where and when one arm's trials ran (epoch seconds), for showing parallelism and for the record."""

    arm: str
    host: str
    pid: int
    start_s: float
    end_s: float = 0.0
    trials: int = 0
    failed: bool = False
    trial_windows_s: list[tuple[float, float]] = field(default_factory=list)


def save_run(run: MeasuredRun, directory: str | Path) -> Path:
    """Write `run` as plain files under `directory` (created); returns the directory."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    meta = {k: getattr(run, k) for k in _SCALARS}
    meta["tags"] = vars(run.tags)
    (d / "run.json").write_text(json.dumps(redacted(meta), default=str))  # engine info holds the system
    rewrite_records(d / "requests.jsonl", run.records)  # atomic: never a half-written record file
    if len(run.phases):
        run.phases.to_parquet(d / "phases.parquet", index=False)
    if len(run.aggregate_join):
        run.aggregate_join.to_parquet(d / "aggregate_join.parquet", index=False)
    return d


def load_run(directory: str | Path) -> MeasuredRun:
    """The `MeasuredRun` that `save_run` wrote under `directory`."""
    d = Path(directory)
    meta = json.loads((d / "run.json").read_text())
    tags = RunTags(**{k: v for k, v in meta.pop("tags").items() if k in {f.name for f in fields(RunTags)}})
    records: list[RequestRecord] = read_records(d / "requests.jsonl") if (d / "requests.jsonl").exists() else []
    phases = pd.read_parquet(d / "phases.parquet") if (d / "phases.parquet").exists() else pd.DataFrame()
    agg = pd.read_parquet(d / "aggregate_join.parquet") if (d / "aggregate_join.parquet").exists() else pd.DataFrame()
    return MeasuredRun(
        tags=tags, records=records, phases=phases, aggregate_join=agg, **{k: meta[k] for k in _SCALARS if k in meta}
    )


def trial_config(data: dict[str, Any]) -> CandidateConfig:
    """A candidate from its resolved dump (`model_dump(mode="json")`, e.g. `candidate.resolved.json`), keeping
    only what a trial needs: the systems, workload, SLO, hardware, measure and ablation settings. Validation,
    gate and lint settings are dropped (defaults), so a run logged by an older or newer version still loads."""
    return CandidateConfig.model_validate({k: v for k, v in data.items() if k in TRIAL_SECTIONS})


def trial_dir(out_dir: str | Path, repeat: int) -> Path:
    return Path(out_dir) / f"trial-{repeat}"


def run_arm_trials(
    candidate: CandidateConfig,
    arm_name: str,
    out_dir: str | Path,
    run_tag: str = "",
    on_trial: Callable[[Trial, MeasuredRun], None] | None = None,
    repeats: int | None = None,
) -> tuple[list[MeasuredRun], ArmWindow]:
    """Run `repeats` (default: every planned repeat, `ablation.look_repeats[-1]`) trials of arm `arm_name`
    of `candidate`, saving each under `out_dir/trial-<r>/`. Raises ValueError for an unknown arm.

    The same workload table, warm-ups and timeouts as `run.ablate`; a crashed trial ends the arm (not retried,
    as in `ablate`). The arm's wall-clock window comes back so a caller can show that arms ran side by side."""
    arms = {a.name: a for a in plan_arms(candidate)}
    if arm_name not in arms:
        raise ValueError(
            f"arm {arm_name!r} is not an arm of candidate {candidate.name!r}; fix: one of {', '.join(arms)}"
        )
    arm = arms[arm_name]
    settings = candidate.ablation
    n = repeats or settings.look_repeats[-1]
    table = build_workload(arm_workload(candidate), settings.num_requests)
    out_dir = Path(out_dir)
    window = ArmWindow(arm=arm_name, host=socket.gethostname(), pid=os.getpid(), start_s=time.time())
    runs: list[MeasuredRun] = []
    for rep in range(n):
        t0 = time.time()
        tags = RunTags(run_tag=run_tag, arm=arm_name, trial=rep, scenario="ablation")
        run = run_system(
            arm.system,
            table,
            tags,
            timeout_s=candidate.workload.timeout_s,
            records_path=trial_dir(out_dir, rep) / "stream.jsonl",
            warmup_requests=candidate.measure.warmup_requests,
            prompt_seed=candidate.workload.seed,
        )
        save_run(run, trial_dir(out_dir, rep))
        runs.append(run)
        window.trial_windows_s.append((t0, time.time()))
        window.trials += 1
        if on_trial:
            on_trial(Trial(order=rep, repeat=rep, arm=arm_name), run)
        if run.failed:
            window.failed = True
            break  # a crashed arm is not retried (as in `ablate`); the statistics see the rest as missing
    window.end_s = time.time()
    (out_dir / "window.json").write_text(json.dumps(vars(window)))
    return runs, window


class PrecomputedTrials:
    """`run_trial` for `run.ablate`: trial results that workers saved, one directory per arm
    (`arm_dirs[arm]/trial-<repeat>/`). `missing[arm]` says why an arm has no results (e.g. its flow run
    crashed); such trials come back as failed runs with that reason — a trial no worker reported is never lost."""

    def __init__(self, arm_dirs: dict[str, Path], missing: dict[str, str] | None = None) -> None:
        self.arm_dirs = arm_dirs
        self.missing = missing or {}

    def __call__(self, trial: Trial, tags: RunTags) -> MeasuredRun:
        d = self.arm_dirs.get(trial.arm)
        if d is not None and (trial_dir(d, trial.repeat) / "run.json").exists():
            return load_run(trial_dir(d, trial.repeat))
        why = self.missing.get(trial.arm) or (
            f"the worker for arm {trial.arm!r} reported no trial {trial.repeat} "
            "(an earlier trial of the arm failed, or the worker stopped)"
        )
        return MeasuredRun(
            tags=tags,
            failed=True,
            error=f"WorkerResultMissing: {why}",
            failed_at="run",
            error_type="WorkerResultMissing",
        )


def window_overlap_s(a: dict[str, Any], b: dict[str, Any]) -> float:
    """Seconds during which two arm windows (`ArmWindow` as a dict) both ran; 0 when they did not overlap."""
    return max(0.0, min(a["end_s"], b["end_s"]) - max(a["start_s"], b["start_s"]))
