"""Prefect task for step 4 (ablate): interleaved trials of every arm, effects with CIs, a child run per arm
(baseline, the A/A arm, each single change, the candidate; skipped arms too), the looks of the sequential
test, the interaction table, and the verdicts."""

from __future__ import annotations

from prefect import task

from inferopt.ablate.compare import trial_resources
from inferopt.ablate.plan import Trial
from inferopt.ablate.run import AblationResult, ablate
from inferopt.config import CandidateConfig
from inferopt.measure.session import MeasuredRun
from inferopt.measure.slices import headline
from inferopt.report import plots
from tasks.tracking import Tracker, log_records

STEP = "4-ablate"


@task(name="ablate", task_run_name="ablate baseline vs arms")
def ablate_task(candidate: CandidateConfig, tracker: Tracker) -> AblationResult:
    tracker.child(STEP, tags={"inferopt.step": "ablate"})
    tracker.params(candidate.ablation.model_dump(mode="json"), STEP)

    def on_trial(trial: Trial, run: MeasuredRun) -> None:
        name = f"arm-{trial.arm}"
        tracker.child(name, tags={"inferopt.step": "ablate", "inferopt.arm": trial.arm})
        if not run.failed:  # latency headline and the trial's memory / KV bytes (and RSS, CPU time where measured)
            tracker.metrics(
                {
                    **headline(run.phases, run.duration_s),
                    **trial_resources(run.engine_info, getattr(run, "resources", None)),
                },
                name,
                step=trial.repeat,
            )
        # the serving process tree's peak RSS / CPU time over the load, NVML power/memory/clock on GPUs
        res = getattr(run, "resources", None) or {}
        tracker.metrics({f"resources.{k}": v for k, v in res.items()}, name, step=trial.repeat)  # numbers only
        if res.get("gpu"):
            tracker.tags({"inferopt.gpu_sampling": str(res["gpu"])[:500]}, name)
        print(
            f"[ablate] trial {trial.order + 1}: {trial.arm} repeat {trial.repeat}"
            + (f" FAILED: {(run.error or '').splitlines()[0]}" if run.failed else f" {run.duration_s:.1f} s")
        )

    run_trial = None
    if candidate.ablation.dispatch == "workers":  # each arm on a Prefect worker; the statistics stay here
        from tasks.dispatch import run_arms_on_workers

        run_trial = run_arms_on_workers(candidate, tracker)
    result = ablate(
        candidate, tracker.dir_for(STEP), run_tag=tracker.parent_run_id, on_trial=on_trial, run_trial=run_trial
    )
    for arm in result.arms:  # every arm, the A/A arm and skipped ones included: never only the best
        name = f"arm-{arm.name}"
        tracker.child(name, tags={"inferopt.step": "ablate", "inferopt.arm": arm.name})
        tracker.tags({"inferopt.arm_role": arm.role}, name)
        tracker.params(
            {"system": arm.system.model_dump(mode="json"), "changes": arm.changes or "none", "role": arm.role}, name
        )
        v = result.verdicts.get(arm.name)
        tracker.tags({"inferopt.arm_verdict": v.verdict if v else "baseline"}, name)
        if v:
            tracker.json(v.to_dict(), "arm_verdict.json", name)
        if len(result.effects) and arm.name in set(result.effects["arm"]):
            mine = result.effects[result.effects["arm"] == arm.name]
            tracker.table(mine, "effects.parquet", name)
            tracker.metrics(
                {
                    f"effect.{r.metric}.{k}": getattr(r, k)
                    for r in mine.itertuples()
                    for k in ("ratio", "ratio_lo", "ratio_hi", "diff", "diff_lo", "diff_hi", "p_value")
                },
                name,
            )
        spec = result.speculative[result.speculative["arm"] == arm.name] if len(result.speculative) else None
        if spec is not None and len(spec):  # SPEC K5: acceptance, tokens per round, speed-up predicted vs measured
            tracker.metrics({f"speculative.{k}": v for k, v in spec.iloc[0].to_dict().items()}, name)
            tracker.json(spec.iloc[0].to_dict(), "speculative.json", name)
        if arm.name in result.skipped:
            tracker.params({"skip_reason": result.skipped[arm.name]}, name)
        tracker.finish(name, status="FAILED" if result.crashed(arm.name) else "FINISHED")
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
        for metric, sub in result.effects.groupby("metric", sort=False):  # a forest per metric: every arm's ratio
            tracker.figure(plots.forest(sub), f"forest_{metric}.png", STEP)
        for r in result.effects.itertuples():
            tracker.metrics(
                {
                    f"{r.arm}.{r.metric}.ratio": r.ratio,
                    f"{r.arm}.{r.metric}.ratio_lo": r.ratio_lo,
                    f"{r.arm}.{r.metric}.ratio_hi": r.ratio_hi,
                },
                STEP,
            )
    if len(result.speculative):
        tracker.table(result.speculative, "speculative.parquet", STEP)
    tracker.json(result.verdicts_doc(), "arm_verdicts.json", STEP)
    # the sequential test: every look (per arm and target metric), the alpha spent, why it stopped
    tracker.json(result.stopping, "stopping.json", STEP)
    tracker.params({f"stopping.{k}": v for k, v in result.stopping.items()}, STEP)
    tracker.metrics(
        {
            "stopping.repeats_done": result.stopping.get("repeats_done", 0),
            "stopping.alpha_used": result.stopping.get("alpha_used", float("nan")),
            "noise_suspicious": float(result.noise_suspicious),
        },
        STEP,
    )
    if len(result.looks):
        tracker.table(result.looks, "looks.parquet", STEP)
        for look, sub in result.looks.groupby("look"):
            tracker.metrics(
                {
                    "look.repeats": float(sub["repeats"].iloc[0]),
                    "look.alpha": float(sub["alpha"].iloc[0]),
                    "look.stop": float(sub["stop"].iloc[0]),
                },
                STEP,
                step=int(look),
            )
    if len(result.interactions):
        tracker.table(result.interactions, "interactions.parquet", STEP)
        for r in result.interactions.itertuples():
            tracker.metrics(
                {
                    f"interaction.{r.metric}": r.interaction,
                    f"interaction.{r.metric}.lo": r.interaction_lo,
                    f"interaction.{r.metric}.hi": r.interaction_hi,
                },
                STEP,
            )
    tracker.tags({"inferopt.noise_suspicious": str(result.noise_suspicious).lower()}, STEP)
    tracker.finish(STEP)
    return result
