"""Step 4, ablate (SPEC A1): replay one fixed workload on every arm, repeats interleaved, engine restarted per
trial (no cache or warm state carries over between trials), then effects with CIs and a verdict per arm.

The arms come from `plan.plan_arms` (baseline, the A/A arm, one per change, the candidate); each repeat runs
every arm once in a seeded random order, warm-ups excluded and declared. The fixed design looks once, after
`repeats`; the sequential one (`ablation.max_repeats`) looks after every repeat at alpha / K for K planned
looks (Bonferroni: why not Pocock or O'Brien-Fleming, in docs/method.md, A1). `compare.compare_arms` tests the
benefit (targets) and harm (every metric, against a tolerance) families; verdicts per arm: improves / regresses /
no detectable change / skipped / failed. A significant A/A effect flags the run's noise on every verdict. A
crashing arm is not retried; the others run.

Deliberately not here: tracking (the task logs the returned tables) and the final accept/reject.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from inferopt.ablate.arm_verdicts import ArmVerdict, arm_verdicts, missing_candidate
from inferopt.ablate.availability import start_failure_reason, unavailable_reason
from inferopt.ablate.compare import (
    METRICS,
    compare_arms,
    interaction_reason,
    interaction_table,
    trial_resources,
)
from inferopt.ablate.looks import arm_decided, decided_reason, looks_table
from inferopt.ablate.plan import (
    AA,
    BASELINE,
    CANDIDATE,
    Arm,
    Trial,
    check_bootstrap_resolution,
    interleaved_order,
    plan_arms,
)
from inferopt.ablate.resume import TRIALS, append_records, load_trial, save_trial
from inferopt.ablate.speculative_arms import speculative_table
from inferopt.choose.output_lengths import arm_workload
from inferopt.config import AnySystem, CandidateConfig
from inferopt.engines import EngineFactory, make_engine
from inferopt.measure.runner import RunTags
from inferopt.measure.session import MeasuredRun, run_system
from inferopt.measure.slices import headline
from inferopt.measure.slo import RequestSLO
from inferopt.records import RequestRecord
from inferopt.workload.build import build_workload

SystemForTrial = Callable[[Arm, Trial], AnySystem]


@dataclass
class AblationResult:
    arms: list[Arm]
    order: list[Trial]  # the trials that were planned and reached (not those after a stop)
    trials: pd.DataFrame  # arm, repeat, order, duration_s, failed, skipped, failed_at, error, phases
    effects: pd.DataFrame  # one row per (arm, metric), the A/A arm included, at the final look
    verdicts: dict[str, ArmVerdict]  # every arm but the baseline
    runs: list[MeasuredRun] = field(default_factory=list)
    looks: pd.DataFrame = field(default_factory=pd.DataFrame)  # a row per (look, arm, target metric)
    stopping: dict[str, Any] = field(default_factory=dict)  # design, looks, alpha per look, why it stopped
    interactions: pd.DataFrame = field(default_factory=pd.DataFrame)  # a row per target metric (>= 2 single arms)
    noise_suspicious: bool = False  # the A/A arm showed a significant difference
    skipped: dict[str, str] = field(default_factory=dict)  # arm -> why it cannot run here
    speculative: pd.DataFrame = field(default_factory=pd.DataFrame)  # K5 per speculative arm (speculative_arms)
    resumed: list[str] = field(default_factory=list)  # "<arm>/trial-<r>": loaded from a killed attempt, not rerun

    @property
    def phases(self) -> pd.DataFrame:
        ok = self.trials[~self.trials["failed"]] if len(self.trials) else self.trials
        return pd.concat(list(ok["phases"]), ignore_index=True) if len(ok) else pd.DataFrame()

    def trial_headlines(self) -> pd.DataFrame:
        rows = [
            {"arm": r.arm, "repeat": r.repeat, "order": r.order, **headline(r.phases, r.duration_s)}
            for r in self.trials.itertuples()
            if not r.failed
        ]
        return pd.DataFrame(rows)

    def crashed(self, arm: str) -> bool:
        """Whether `arm` crashed: a trial of it failed other than by being unavailable here, or it has no trial
        at all without a skip reason (it never got to run)."""
        rows = self.trials[self.trials["arm"] == arm] if len(self.trials) else self.trials
        if not len(rows):
            return arm not in self.skipped
        return bool((rows["failed"] & ~rows["skipped"]).any())

    @property
    def candidate_verdict(self) -> ArmVerdict:
        """The candidate arm's verdict; a missing one reads as failed (the verdict must never accept it)."""
        return self.verdicts.get(CANDIDATE) or missing_candidate()

    def records(self, arm: str) -> list[RequestRecord]:
        """Every request record of `arm`'s trials, in trial order."""
        return [r for run in self.runs if run.tags.arm == arm for r in run.records]

    def verdicts_doc(self) -> dict[str, dict[str, Any]]:
        """`arm_verdicts.json`: arm -> its verdict as a document."""
        return {name: v.to_dict() for name, v in self.verdicts.items()}


def fresh_fake_noise(arm: Arm, trial: Trial) -> AnySystem:
    """A `system_for_trial` that gives the fake engine an independent noise stream per (arm, repeat).

    FakeEngine seeds its delay noise from `system.seed`, so every trial of one fake system replays the same
    noise, and the A/A arm replays the baseline's: the A/A comparison would be rigged to agree. A real machine
    gives each trial fresh noise. The same seed also draws the fake's token ids, so reseeding makes served
    outputs differ between arms: use this where timing statistics are the question (error-rate benchmark,
    tests), not where served-output agreement is. Systems with real timings are returned unchanged."""
    if not arm.system.capabilities.scripted_timings:
        return arm.system
    seq = np.random.SeedSequence([arm.system.seed & 0xFFFFFFFF, zlib.crc32(arm.name.encode()), trial.repeat])
    return arm.system.model_copy(update={"seed": int(seq.generate_state(1)[0])})


def ablate(
    candidate: CandidateConfig,
    out_dir: str | Path,
    run_tag: str = "",
    on_trial: Callable[[Trial, MeasuredRun], None] | None = None,
    system_for_trial: SystemForTrial | None = None,
    run_trial: Callable[[Trial, RunTags], MeasuredRun] | None = None,
    engine_factory: EngineFactory = make_engine,
    resume_from: str | Path | None = None,
) -> AblationResult:
    """Run the ablation of `candidate` (see the module docstring). `run_trial(trial, tags)`, when given,
    returns a trial's run instead of running it here (`dispatch.PrecomputedTrials`: arms run on Prefect
    workers). `system_for_trial(arm, trial)` may replace the system a trial starts (default: the arm's own),
    e.g. `fresh_fake_noise`; `engine_factory(system)` builds each trial's engine (tests pass a fake).
    Every finished trial is saved under `out_dir/trials/` (`resume.save_trial`); with `resume_from` (the
    `trials/` folder of a killed attempt) a trial found there is loaded instead of run, and listed in `resumed`.

    Sequential design: from `min_repeats` to `max_repeats`, stop at the first look where every tested arm
    (single-change arms and the candidate; not the A/A arm) has every target metric significant after Holm, or
    a regression beyond tolerance (the harm family): either way its verdict is settled.
    Each look tests at alpha / K, so P(any false alarm at any look) <= alpha by the union bound, for any
    stopping rule and any dependence between looks; conservative (K = 4: 0.0125 where Pocock allows ~0.018).
    Every look and the alpha used are in the result. Skipped: the option cannot run here (known before the run,
    or ImportError at engine start, `availability.py`); failed: it crashed (the error is kept). With two or
    more single-change arms, `interactions` compares the combined arm with the product of the single ratios."""
    out_dir = Path(out_dir)
    settings = candidate.ablation
    context = RequestSLO.of(candidate.workload, candidate.slo)  # failures censored, goodput's SLO
    arms = plan_arms(candidate)
    if settings.test == "two_level_bootstrap":
        check_bootstrap_resolution(settings, len(METRICS))
    by_name = {a.name: a for a in arms}
    table = build_workload(arm_workload(candidate), settings.num_requests)
    look_at = settings.look_repeats
    alpha = settings.alpha_per_look
    planned = interleaved_order([a.name for a in arms], look_at[-1], settings.seed)

    skipped = {a.name: _skip_reason(a, r) for a in arms if (r := unavailable_reason(a.system))}
    failed: dict[str, str] = {}
    rows: list[dict] = []
    runs: list[MeasuredRun] = []
    order: list[Trial] = []
    look_rows: list[dict] = []
    resumed: list[str] = []
    effects: dict[str, pd.DataFrame] = {}
    stop_reason = ""
    repeats_done = 0
    looks_taken = 0
    for rep in range(look_at[-1]):
        for trial in (t for t in planned if t.repeat == rep):
            order.append(trial)
            if trial.arm in failed or trial.arm in skipped:
                continue  # a crashed or unavailable arm is not retried; it is reported once
            arm = by_name[trial.arm]
            system = system_for_trial(arm, trial) if system_for_trial else arm.system
            tags = RunTags(run_tag=run_tag, arm=trial.arm, trial=trial.repeat, scenario="ablation")
            saved = load_trial(resume_from, trial.arm, trial.repeat)
            if saved is not None:
                resumed.append(f"{trial.arm}/trial-{trial.repeat}")
                append_records(out_dir / "requests.jsonl", saved.records)  # the stream holds every trial
            run = (
                saved
                if saved is not None
                else run_trial(trial, tags)
                if run_trial
                else run_system(
                    system,
                    table,
                    tags,
                    timeout_s=candidate.workload.timeout_s,
                    records_path=out_dir / "requests.jsonl",
                    warmup_requests=candidate.measure.warmup_requests,
                    prompt_seed=candidate.workload.seed,
                    engine_factory=engine_factory,
                )
            )
            save_trial(out_dir / TRIALS, trial.arm, trial.repeat, run)
            runs.append(run)
            skip = start_failure_reason(run)
            if skip:
                skipped[trial.arm] = skip
            elif run.failed:
                failed[trial.arm] = run.error or "unknown error"
            rows.append(
                {
                    "arm": trial.arm,
                    "repeat": trial.repeat,
                    "order": trial.order,
                    "duration_s": run.duration_s,
                    "failed": run.failed,
                    "skipped": bool(skip),
                    "failed_at": run.failed_at,
                    "error": run.error,
                    "warmup_declared": run.warmup_declared,
                    "phases": run.phases,
                    "resources": trial_resources(run.engine_info, getattr(run, "resources", None)),
                }
            )
            if on_trial:
                on_trial(trial, run)
        repeats_done = rep + 1
        if repeats_done not in look_at:
            continue
        look = look_at.index(repeats_done)
        looks_taken += 1
        trials_ok = _ok_trials(rows)
        comparable = [
            a
            for a in arms
            if a.role != "baseline" and _usable(a.name, failed, skipped) and _usable(BASELINE, failed, skipped)
        ]
        effects = {
            a.name: compare_arms(
                trials_ok,
                BASELINE,
                a.name,
                alpha=alpha,
                seed=settings.seed + 7919 * look,
                n_boot=settings.bootstrap_samples,
                test=settings.test,
                targets=candidate.target_metrics,
                context=context,
                harm_tolerance=settings.harm_tolerance,
                harm_tolerance_abs=settings.harm_tolerance_abs,
                tolerances=settings.harm_tolerances,
                primary_harm=settings.primary_harm,
                primary_alpha_share=settings.primary_alpha_share,
            )
            for a in comparable
        }
        tested = [a for a in comparable if a.tested]
        decided = {a.name: arm_decided(effects[a.name], candidate.target_metrics) for a in tested}
        last = repeats_done == look_at[-1]
        if not tested:
            stop, stop_reason = (
                True,
                "no tested arm left to compare (baseline or every tested arm failed / was skipped)",
            )
        elif all(decided.values()):
            stop, stop_reason = (
                True,
                decided_reason({n: effects[n] for n in decided}, candidate.target_metrics),
            )
        elif last:
            stop = True
            stop_reason = (
                "fixed design: the single planned look"
                if not settings.sequential
                else f"max_repeats = {look_at[-1]} reached; undecided: "
                + ", ".join(n for n, d in decided.items() if not d)
            )
        else:
            stop = False
        look_rows += looks_table(look, repeats_done, alpha, effects, decided, candidate.target_metrics, stop)
        if stop:
            break

    order = [t for t in order if t.repeat < repeats_done]
    trials = pd.DataFrame(
        rows,
        columns=[
            "arm",
            "repeat",
            "order",
            "duration_s",
            "failed",
            "skipped",
            "failed_at",
            "error",
            "warmup_declared",
            "phases",
            "resources",
        ],
    )
    verdicts = arm_verdicts(arms, effects, failed, skipped, candidate.target_metrics, alpha, repeats_done)
    noise_suspicious = AA in effects and bool(effects[AA]["significant"].any())
    if noise_suspicious:
        moved = effects[AA][effects[AA]["significant"]]["metric"].tolist()
        note = (
            f"noise suspicious: the A/A arm (the baseline against itself) shows a significant difference on "
            f"{', '.join(moved)} at alpha {alpha:.3g}; this run's effects may be false alarms"
        )
        verdicts = {name: v.with_reasons(note) for name, v in verdicts.items()}
    interactions = pd.DataFrame()
    singles = [a.name for a in arms if a.role == "single"]
    if len(singles) >= 2 and all(n in effects for n in [*singles, CANDIDATE]):
        interactions = interaction_table(
            _ok_trials(rows),
            BASELINE,
            singles,
            CANDIDATE,
            pd.concat(effects.values()),
            candidate.target_metrics,
            alpha=alpha,
            seed=settings.seed,
            n_boot=settings.bootstrap_samples,
            test=settings.test,
        )
        for _, r in interactions.iterrows():
            if r["flagged"]:
                verdicts[CANDIDATE] = verdicts[CANDIDATE].with_reasons(interaction_reason(r))
    stopping = {
        "design": "sequential" if settings.sequential else "fixed",
        "correction": "bonferroni over planned looks" if settings.sequential else "none (one look)",
        "planned_looks": list(look_at),
        "looks_taken": looks_taken,
        "alpha": settings.alpha,
        "alpha_per_look": alpha,
        "alpha_used": alpha,
        "repeats_done": repeats_done,
        "stopped_early": repeats_done < look_at[-1],
        "reason": stop_reason,
        "target_metrics": list(candidate.target_metrics),
    }
    effects_df = pd.concat(list(effects.values()), ignore_index=True) if effects else pd.DataFrame()
    return AblationResult(
        arms=arms,
        order=order,
        trials=trials,
        effects=effects_df,
        verdicts=verdicts,
        runs=runs,
        looks=pd.DataFrame(look_rows),
        stopping=stopping,
        interactions=interactions,
        noise_suspicious=noise_suspicious,
        skipped=dict(skipped),
        speculative=speculative_table(arms, runs, effects_df),
        resumed=resumed,
    )


# --------------------------------------------------------------------------- helpers


def _usable(name: str, failed: dict[str, str], skipped: dict[str, str]) -> bool:
    return name not in failed and name not in skipped


def _skip_reason(arm: Arm, reason: str) -> str:
    """The combined candidate is skipped, not run without the change that cannot run here: the candidate minus
    a change is another system, and its verdict would be read as the candidate's (validate and gate judge the
    candidate as written). The one-change arms of the other changes still run and carry the evidence."""
    if arm.role != "candidate" or len(arm.changes) < 2:
        return reason
    return (
        f"the combined candidate includes a change that cannot run here ({reason}); it is not run without that "
        "change (that would be another system); the single-change arms of the other changes still run"
    )


def _ok_trials(rows: list[dict]) -> pd.DataFrame:
    cols = ["arm", "repeat", "duration_s", "phases", "resources"]
    ok = [r for r in rows if not r["failed"]]
    return pd.DataFrame(ok, columns=cols) if ok else pd.DataFrame(columns=cols)
