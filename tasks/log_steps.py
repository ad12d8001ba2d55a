"""What each step's Prefect task logs of its step's result: tables, figures, JSON documents, metrics and tags
on the step's MLflow child run (and the parent's, for the verdict). One `log_<step>` per step.

Deliberately not here: computing or deciding anything (the step's entry function in `inferopt/` returns it all)
and the MLflow plumbing (`tracking.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd

from inferopt.ablate import AblationResult
from inferopt.ablate.compare import trial_resources
from inferopt.ablate.plan import Arm, Trial
from inferopt.choose import Choice
from inferopt.gate import GateResult
from inferopt.locate import LocateResult
from inferopt.locate.profile import PHASES, category_share, host_share
from inferopt.measure import MeasureResult
from inferopt.measure.session import MeasuredRun
from inferopt.measure.slices import headline
from inferopt.report import plots, profile_plots
from inferopt.validate import ScenarioResult, scenario_verdicts
from inferopt.validate.scenarios import scenario_table
from inferopt.validate.step import runs_that_ran, scenario_phases
from inferopt.verdict import VerdictResult
from tasks.tracking import Tracker, log_records, metric_key

# --------------------------------------------------------------------------- 1 measure


def log_measure(tracker: Tracker, result: MeasureResult, name: str) -> None:
    """Headline, decomposition and resource metrics, `measure.json`, the tables, the records, the plots."""
    tracker.metrics(result.headline, name)
    numeric = {k: v for k, v in result.decomposition.items() if isinstance(v, (int, float))}  # words: measure.json
    tracker.metrics({f"decomposition.{k}": float(v) for k, v in numeric.items()}, name)
    tracker.metrics({f"resources.{k}": v for k, v in result.resources.items() if isinstance(v, (int, float))}, name)
    tracker.json(
        {
            "engine": result.run.engine_info,
            "server_metrics_delta": result.run.server_metrics,
            "warmup_requests_excluded": result.run.warmup_declared,
            "decomposition": result.decomposition,
            "slice_edges": result.edges.__dict__,
            "resources": result.resources,
        },
        "measure.json",
        name,
    )
    tracker.table(result.workload, "workload.parquet", name)
    tracker.table(result.phases, "phases.parquet", name)
    tracker.table(result.summary, "summary.parquet", name)
    if len(result.sessions):  # a multi-turn load: one row per session (task time, tool and history time, outcome)
        tracker.table(result.sessions, "sessions.parquet", name)
    log_records(tracker, result.run.records, name)
    for dim in ("input_bucket", "output_bucket", "concurrency_bucket"):
        tracker.figure(plots.phase_stack(result.phases, dim), f"phase_stack_{dim}.png", name)
    tracker.figure(plots.latency_cdf(result.phases, "ttft_ms", by="input_bucket"), "ttft_cdf_by_input.png", name)


# --------------------------------------------------------------------------- 2 locate, 3 choose


def log_locate(tracker: Tracker, result: LocateResult, name: str) -> None:
    """Hardware, the op profile, the diagnosis (`bottleneck.json`, per slice), roofline and KV tables, the plot."""
    tracker.params({"hardware": result.hardware.to_dict()}, name)
    log_profile(tracker, result, name)
    d = result.diagnosis
    tracker.tags({"inferopt.cause": d.cause}, name)
    tracker.metrics({"confidence": d.confidence}, name)
    tracker.json(d.to_dict(), "bottleneck.json", name)
    tracker.table(d.per_slice, "per_slice.parquet", name)
    if len(result.roofline):
        _log_roofline(tracker, result, name)
    print(f"[locate] cause: {d.cause} (confidence {d.confidence:.2f}) — {d.rule}")


def _log_roofline(tracker: Tracker, result: LocateResult, name: str) -> None:
    tracker.table(result.roofline, "roofline.parquet", name)
    tracker.table(result.kv, "kv_capacity.parquet", name)
    if len(result.kv_vllm):  # vLLM baselines: our KV math beside vLLM's own report (blocks, usage, preemptions)
        tracker.table(result.kv_vllm, "kv_capacity_vllm.parquet", name)
    if len(result.measured):
        tracker.table(result.measured, "roofline_measured.parquet", name)
        tracker.metrics(
            {
                f"{r.phase}.{k}": getattr(r, k)
                for r in result.measured.itertuples()
                for k in ("mfu", "mbu", "measured_ms", "roofline_min_ms")
            },
            name,
        )
    hw = result.hardware
    fig = plots.roofline(result.roofline, hw.peak_flops_per_s, hw.mem_bandwidth_bytes_per_s, result.measured)
    tracker.figure(fig, "roofline.png", name)


def log_profile(tracker: Tracker, result: LocateResult, name: str) -> None:
    """The op breakdown (table, top ops, settings and resources, stacked-bar figure) on the locate run."""
    if result.profile_error:
        tracker.tags({"inferopt.profile_error": result.profile_error[:4000]}, name)
        print(f"[locate] op profile failed (verdict made without it): {result.profile_error.splitlines()[0]}")
    prof = result.profile
    if prof is None:
        return
    tracker.table(prof.ops, "op_breakdown.parquet", name)
    tracker.table(prof.top_ops, "top_ops.parquet", name)
    tracker.json(prof.to_dict(), "profile.json", name)
    metrics = {}
    for phase in PHASES:
        metrics[f"profile.{phase}.host_share"] = host_share(prof.ops, phase)
        for cat in ("attention", "matmul", "other"):
            metrics[f"profile.{phase}.{cat}_share"] = category_share(prof.ops, phase, cat)
    metrics.update({f"profile.resources.{k}": v for k, v in prof.resources.items() if isinstance(v, (int, float))})
    tracker.metrics(metrics, name)
    s = prof.settings
    title = f"{s['system']}: prefill {s['prompt_len']} tok x {s['batch']}, {s['decode_steps']} decode steps"
    tracker.figure(profile_plots.op_breakdown(prof.ops, title), "op_breakdown.png", name)


def log_choice(tracker: Tracker, choice: Choice, name: str) -> None:
    """`choice.json`, whether it matches the cause, and the warning when it does not (also printed)."""
    tracker.json(choice.to_dict(), "choice.json", name)
    tracker.tags(
        {
            "inferopt.matches_cause": str(choice.matches),
            "inferopt.quality_gate_required": str(choice.quality_gate_required),
        },
        name,
    )
    if choice.warning:
        tracker.tags({"inferopt.warning": choice.warning[:4000]}, name)
        print(f"[choose] WARNING: {choice.warning}")
    else:
        print(f"[choose] the candidate's remedy matches the cause '{choice.cause}'")


# --------------------------------------------------------------------------- 4 ablate


def trial_logger(tracker: Tracker) -> Callable[[Trial, MeasuredRun], None]:
    """An `on_trial` callback for `ablate`: each trial's metrics on its arm's child run, as the trial ends."""

    def on_trial(trial: Trial, run: MeasuredRun) -> None:
        name = f"arm-{trial.arm}"
        tracker.child(name, tags={"inferopt.step": "ablate", "inferopt.arm": trial.arm})
        res = getattr(run, "resources", None) or {}
        if not run.failed:  # latency headline and the trial's memory / KV bytes (and RSS, CPU time where measured)
            metrics = {**headline(run.phases, run.duration_s), **trial_resources(run.engine_info, res or None)}
            tracker.metrics(metrics, name, step=trial.repeat)
        # the serving process tree's peak RSS / CPU time over the load, NVML power/memory/clock on GPUs
        tracker.metrics({f"resources.{k}": v for k, v in res.items()}, name, step=trial.repeat)  # numbers only
        if res.get("gpu"):
            tracker.tags({"inferopt.gpu_sampling": str(res["gpu"])[:500]}, name)
        print(
            f"[ablate] trial {trial.order + 1}: {trial.arm} repeat {trial.repeat}"
            + (f" FAILED: {(run.error or '').splitlines()[0]}" if run.failed else f" {run.duration_s:.1f} s")
        )

    return on_trial


def log_ablation(tracker: Tracker, result: AblationResult, name: str) -> None:
    """A child run per arm (every arm, the A/A arm and skipped ones included: never only the best), then the
    step's tables, figures, verdicts, the sequential test's looks and the interactions."""
    for arm in result.arms:
        _log_arm(tracker, result, arm)
    log_records(tracker, [r for run in result.runs for r in run.records], name)
    tracker.table(result.trials.drop(columns=["phases"]), "trials.parquet", name)
    tracker.table(result.trial_headlines(), "trial_headlines.parquet", name)
    if len(result.phases):
        tracker.table(result.phases, "phases.parquet", name)
        tracker.figure(plots.latency_cdf(result.phases, "ttft_ms", by="arm"), "ttft_cdf_by_arm.png", name)
        tracker.figure(plots.latency_cdf(result.phases, "tpot_ms", by="arm"), "tpot_cdf_by_arm.png", name)
    if len(result.effects):
        _log_effects(tracker, result.effects, name)
    if len(result.speculative):
        tracker.table(result.speculative, "speculative.parquet", name)
    tracker.json(result.verdicts_doc(), "arm_verdicts.json", name)
    _log_stopping(tracker, result, name)
    if len(result.interactions):
        tracker.table(result.interactions, "interactions.parquet", name)
        for r in result.interactions.itertuples():
            tracker.metrics(
                {
                    f"interaction.{r.metric}": r.interaction,
                    f"interaction.{r.metric}.lo": r.interaction_lo,
                    f"interaction.{r.metric}.hi": r.interaction_hi,
                },
                name,
            )
    tracker.tags({"inferopt.noise_suspicious": str(result.noise_suspicious).lower()}, name)


def _log_arm(tracker: Tracker, result: AblationResult, arm: Arm) -> None:
    """One arm's child run: role, system, verdict, effects, K5 figures, skip reason; FAILED when it crashed."""
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


def _log_effects(tracker: Tracker, effects: pd.DataFrame, name: str) -> None:
    tracker.table(effects, "effects.parquet", name)
    tracker.figure(plots.forest(effects), "effects_forest.png", name)
    for metric, sub in effects.groupby("metric", sort=False):  # a forest per metric: every arm's ratio
        tracker.figure(plots.forest(sub), f"forest_{metric}.png", name)
    for r in effects.itertuples():
        tracker.metrics(
            {
                f"{r.arm}.{r.metric}.ratio": r.ratio,
                f"{r.arm}.{r.metric}.ratio_lo": r.ratio_lo,
                f"{r.arm}.{r.metric}.ratio_hi": r.ratio_hi,
            },
            name,
        )


def _log_stopping(tracker: Tracker, result: AblationResult, name: str) -> None:
    """The sequential test: every look (per arm and target metric), the alpha spent, why it stopped."""
    tracker.json(result.stopping, "stopping.json", name)
    tracker.params({f"stopping.{k}": v for k, v in result.stopping.items()}, name)
    tracker.metrics(
        {
            "stopping.repeats_done": result.stopping.get("repeats_done", 0),
            "stopping.alpha_used": result.stopping.get("alpha_used", float("nan")),
            "noise_suspicious": float(result.noise_suspicious),
        },
        name,
    )
    if not len(result.looks):
        return
    tracker.table(result.looks, "looks.parquet", name)
    for look, sub in result.looks.groupby("look"):
        tracker.metrics(
            {
                "look.repeats": float(sub["repeats"].iloc[0]),
                "look.alpha": float(sub["alpha"].iloc[0]),
                "look.stop": float(sub["stop"].iloc[0]),
            },
            name,
            step=int(look),
        )


# --------------------------------------------------------------------------- 5 validate


def log_validation(tracker: Tracker, results: Sequence[ScenarioResult], name: str) -> None:
    """The scenario table, each scenario's metrics and tables, `scenario_verdicts.json`, pass/fail tags, the
    records and phases of every run that ran, the TTFT CDF per scenario."""
    tracker.table(scenario_table(list(results)), "scenarios.parquet", name)
    verdicts = scenario_verdicts(results)
    for r in results:
        sc = r.scenario.name
        tracker.metrics(
            {metric_key(f"{sc}.{k}"): v for k, v in r.metrics.items()} | {metric_key(f"{sc}.passed"): float(r.passed)},
            name,
        )
        for tname, t in r.tables.items():  # fairness, queue growth, attempts, failure segments, ...
            if len(t):
                tracker.table(t, f"{sc}.{tname}.parquet", name)
        print(f"[validate] {sc} ({r.scenario.kind}): {'pass' if r.passed else 'FAIL'} — " + "; ".join(r.reasons))
    tracker.json({n: v.to_dict() for n, v in verdicts.items()}, "scenario_verdicts.json", name)
    tracker.tags({f"inferopt.scenario.{n}": "pass" if v.passed else "fail" for n, v in verdicts.items()}, name)
    log_records(tracker, [rec for run in runs_that_ran(results) for rec in run.records], name)
    phases = scenario_phases(results)
    if len(phases):
        tracker.table(phases, "phases.parquet", name)
        tracker.figure(plots.latency_cdf(phases, "ttft_ms", by="scenario"), "ttft_cdf_by_scenario.png", name)


# --------------------------------------------------------------------------- 6 gate


def log_gate(tracker: Tracker, result: GateResult, name: str) -> None:
    """The suite's tables and samples, lm-eval's results, the cost table, `gate.json`, drift metrics, status tags."""
    suite = result.suite
    if not suite.table.empty:
        tracker.table(suite.table, "quality_slices.parquet", name)
        tracker.table(suite.accuracy, "quality_accuracy.parquet", name)
    if not suite.distance.empty:
        tracker.table(suite.distance, "quality_distance.parquet", name)
    if not suite.calibration.empty:
        tracker.table(suite.calibration, "quality_calibration.parquet", name)
    for arm, samples in suite.samples.items():
        tracker.table(samples, f"quality_samples_{arm}.parquet", name)
    if suite.lm_eval_results:
        tracker.json(suite.lm_eval_results, "lm_eval_results.json", name)
    if result.cost is not None and len(result.cost):
        tracker.table(result.cost, "cost.parquet", name)
    tracker.json(result.to_dict(), "gate.json", name)
    tracker.metrics(result.metrics(), name)
    tracker.tags(
        {"inferopt.quality": result.quality_status, "inferopt.quality.suite": suite.status}
        | {"inferopt.cost": result.cost_status}
        | {f"inferopt.quality.path.{arm}": path for arm, path in suite.paths.items() if path},
        name,
    )
    for line in result.reasons:
        print(f"[gate] {line}")


# --------------------------------------------------------------------------- the verdict (on the parent run)


def log_verdict(tracker: Tracker, result: VerdictResult) -> None:
    """`lint.json` with its tags and counts, the findings that matter (printed), `verdict.json`, the parent's
    metrics and summary tags."""
    lint = result.lint
    tracker.json(lint, "lint.json")
    tracker.tags(
        {
            "inferopt.lint": lint["status"],
            **{f"inferopt.lint.{sev}": ",".join(c) for sev, c in lint["cheats"].items() if c},
        }
    )
    tracker.metrics({f"lint.{sev}": float(n) for sev, n in lint["counts"].items()})
    for f in result.findings:
        if f.severity != "note":
            print(f"[lint] {f}")
    tracker.json(result.verdict.to_dict(), "verdict.json")
    tracker.metrics(result.parent_metrics)
    tracker.tags(result.parent_tags)
