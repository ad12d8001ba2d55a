"""Prefect task for step 4 (ablate): interleaved trials of every arm, effects with CIs, a child run per arm."""

from __future__ import annotations

from prefect import task

from inferopt.ablation.plan import Trial
from inferopt.ablation.run import AblationResult, ablate
from inferopt.config import CandidateConfig
from inferopt.measure.session import MeasuredRun
from inferopt.measure.slices import headline
from inferopt.report import plots
from tasks.tracking import Tracker, log_records

STEP = "4-ablate"


@task(name="ablate", task_run_name="ablate baseline vs candidate")
def ablate_task(candidate: CandidateConfig, tracker: Tracker) -> AblationResult:
    tracker.child(STEP, tags={"inferopt.step": "ablate"})
    tracker.params(candidate.ablation.model_dump(mode="json"), STEP)

    def on_trial(trial: Trial, run: MeasuredRun) -> None:
        name = f"arm-{trial.arm}"
        tracker.child(name, tags={"inferopt.step": "ablate", "inferopt.arm": trial.arm})
        if not run.failed:
            tracker.metrics(headline(run.phases, run.duration_s), name, step=trial.repeat)
        print(f"[ablate] trial {trial.order + 1}: {trial.arm} repeat {trial.repeat}"
              + (f" FAILED: {(run.error or '').splitlines()[0]}" if run.failed else f" {run.duration_s:.1f} s"))

    result = ablate(candidate, tracker.dir_for(STEP), run_tag=tracker.parent_run_id, on_trial=on_trial)
    for arm in result.arms:
        name = f"arm-{arm.name}"
        tracker.child(name, tags={"inferopt.step": "ablate", "inferopt.arm": arm.name})
        tracker.params({"system": arm.system.model_dump(mode="json"), "changes": arm.changes or "none"}, name)
        v = result.verdicts.get(arm.name)
        tracker.tags({"inferopt.arm_verdict": v["verdict"] if v else "baseline"}, name)
        if v:
            tracker.json(v, "arm_verdict.json", name)
        failed = bool(result.trials[result.trials["arm"] == arm.name]["failed"].any()) if len(result.trials) else True
        tracker.finish(name, status="FAILED" if failed else "FINISHED")
    log_records(tracker, [r for run in result.runs for r in run.records], STEP)
    tracker.table(result.trials.drop(columns=["phases"]), "trials.parquet", STEP)
    tracker.table(result.trial_headlines(), "trial_headlines.parquet", STEP)
    if len(result.phases):
        tracker.table(result.phases, "phases.parquet", STEP)
        tracker.figure(plots.latency_cdf(result.phases, "ttft_ms", by="arm"), "ttft_cdf_by_arm.png", STEP)
        tracker.figure(plots.latency_cdf(result.phases, "tpot_ms", by="arm"), "tpot_cdf_by_arm.png", STEP)
    if len(result.effects):
        tracker.table(result.effects, "effects.parquet", STEP)
        tracker.figure(plots.forest(result.effects), "effects_forest.png", STEP)
        for r in result.effects.itertuples():
            tracker.metrics({f"{r.arm}.{r.metric}.ratio": r.ratio, f"{r.arm}.{r.metric}.ratio_lo": r.ratio_lo,
                             f"{r.arm}.{r.metric}.ratio_hi": r.ratio_hi}, STEP)
    tracker.json(result.verdicts, "arm_verdicts.json", STEP)
    tracker.finish(STEP)
    return result
