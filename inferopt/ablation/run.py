"""Step 4, ablate: replay one fixed workload on every arm, repeats interleaved, engine restarted per trial
(no cache or warm state carries over between trials), then effects with CIs and a verdict per arm.

An arm whose trial crashes is marked failed with its error; the other arms still run and are reported.

Deliberately not here: tracking (the task logs the returned tables) and the final accept/reject.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from inferopt.ablation.compare import arm_verdict, compare_arms
from inferopt.ablation.plan import Arm, Trial, interleaved_order, plan_arms
from inferopt.config import CandidateConfig
from inferopt.measure.runner import RunTags
from inferopt.measure.session import MeasuredRun, run_system
from inferopt.measure.slices import headline
from inferopt.workload.build import build_workload


@dataclass
class AblationResult:
    arms: list[Arm]
    order: list[Trial]
    trials: pd.DataFrame                       # arm, repeat, order, duration_s, failed, error, phases
    effects: pd.DataFrame                      # one row per (arm, metric)
    verdicts: dict[str, dict]                  # arm -> {"verdict", "reasons", "error"}
    runs: list[MeasuredRun] = field(default_factory=list)

    @property
    def phases(self) -> pd.DataFrame:
        ok = self.trials[~self.trials["failed"]]
        return pd.concat(list(ok["phases"]), ignore_index=True) if len(ok) else pd.DataFrame()

    def trial_headlines(self) -> pd.DataFrame:
        rows = [{"arm": r.arm, "repeat": r.repeat, "order": r.order, **headline(r.phases, r.duration_s)}
                for r in self.trials.itertuples() if not r.failed]
        return pd.DataFrame(rows)


def ablate(candidate: CandidateConfig, out_dir: str | Path, run_tag: str = "",
           on_trial: Callable[[Trial, MeasuredRun], None] | None = None) -> AblationResult:
    out_dir = Path(out_dir)
    settings = candidate.ablation
    arms = plan_arms(candidate)
    by_name = {a.name: a for a in arms}
    table = build_workload(candidate.workload, settings.num_requests)
    order = interleaved_order([a.name for a in arms], settings.repeats, settings.seed)
    rows, runs = [], []
    failed_arms: dict[str, str] = {}
    for trial in order:
        if trial.arm in failed_arms:
            continue  # a crashed arm is not retried; its failure is reported once
        tags = RunTags(run_tag=run_tag, arm=trial.arm, trial=trial.repeat, scenario="ablation")
        run = run_system(by_name[trial.arm].system, table, tags, timeout_s=candidate.workload.timeout_s,
                         records_path=out_dir / "requests.jsonl",
                         warmup_requests=candidate.measure.warmup_requests, prompt_seed=candidate.workload.seed)
        runs.append(run)
        if run.failed:
            failed_arms[trial.arm] = run.error or "unknown error"
        rows.append({"arm": trial.arm, "repeat": trial.repeat, "order": trial.order, "duration_s": run.duration_s,
                     "failed": run.failed, "error": run.error, "phases": run.phases})
        if on_trial:
            on_trial(trial, run)
    trials = pd.DataFrame(rows)
    effects, verdicts = [], {}
    for arm in arms:
        if arm.role == "baseline":
            continue
        if arm.name in failed_arms or "baseline" in failed_arms:
            which = arm.name if arm.name in failed_arms else "baseline"
            verdicts[arm.name] = {"verdict": "failed", "reasons": [f"{which} arm failed: {failed_arms[which].splitlines()[0]}"],
                                  "error": failed_arms[which]}
            continue
        eff = compare_arms(trials[~trials["failed"]], "baseline", arm.name, n_boot=settings.bootstrap_samples,
                           alpha=settings.alpha, seed=settings.seed)
        verdict, reasons = arm_verdict(eff, candidate.target_metrics)
        verdicts[arm.name] = {"verdict": verdict, "reasons": reasons, "error": None}
        effects.append(eff)
    effects_df = pd.concat(effects, ignore_index=True) if effects else pd.DataFrame()
    return AblationResult(arms=arms, order=order, trials=trials, effects=effects_df, verdicts=verdicts, runs=runs)
