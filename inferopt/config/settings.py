"""How a candidate's run is carried out and judged: the per-step settings of a `CandidateConfig`
(measure, ablate, validate, gate) and the cheat lint's opt-in overrides.

Deliberately not here: the systems (`systems.py`), workloads, SLOs and hardware (`models.py`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

from inferopt.config.bounds import MAX_SECONDS, Count, Seconds, Seed, Tokens
from inferopt.config.systems import Frozen

PairedTest = Literal["repeat_t", "two_level_bootstrap"]  # how an ablation tests an arm against the baseline

# The ablation's metrics by name (their definitions: `inferopt.ablate.compare.ALL_METRICS`, which a test keeps
# equal to this list): targets, harm tolerances and the nightly name them.
METRIC_NAMES: tuple[str, ...] = (
    "ttft_ms_p50",
    "ttft_ms_p99",
    "tpot_ms_p50",
    "tpot_ms_p95",
    "e2e_ms_p99",
    "output_tok_per_s",
    "failure_rate",
    "slo_attainment",
    "goodput_req_per_s",
    "peak_memory_bytes",
    "weight_bytes",
    "kv_peak_bytes",
    "kv_bytes_per_token",
    "peak_rss_bytes",
    "cpu_time_s",
    "gpu_energy_j",
)
# The harm family's primary hypotheses by default: the typical request's two latencies and the failure rate. A
# median rests on every request of a trial, a p99 on its slowest one or two, so the primaries are where a few
# repeats can see a regression; the SLO's tails are judged against their bounds by validation anyway.
PRIMARY_HARM: tuple[str, ...] = ("ttft_ms_p50", "tpot_ms_p50", "failure_rate")
MIN_REPEATS = 2  # the paired test over repeats (`inferopt.stats.inference.paired_repeat_test`) needs two


class MeasureSettings(Frozen):
    warmup_requests: int = Field(default=2, ge=0, le=10_000, description="sent before measuring, excluded and declared")


class AblationSettings(Frozen):
    """How an ablation runs and is judged (SPEC A1).

    Fixed design (`max_repeats` unset): `repeats` trials per arm, one look at level `alpha`. Two families, each
    with its own error control (`inferopt.ablate.compare`): benefit (the target metrics, two-sided, Holm) and
    harm (every metric, one-sided against `harm_tolerance`, Holm): a regression beyond tolerance is tested and
    fails the arm whether or not the targets moved.
    Sequential design (`max_repeats` set): a look after every repeat from `min_repeats` (default: `repeats`)
    to `max_repeats`; the run stops at the first look where every tested arm has every target metric
    significant or a regression beyond tolerance, or at `max_repeats`. Peeking is paid for with Bonferroni over
    the planned looks: each look tests at `alpha / number_of_looks`, so the chance of any false alarm over all
    looks stays <= `alpha` whatever the stopping rule (see `inferopt.ablate.run`)."""

    repeats: PositiveInt = Field(
        default=3, le=1000, description="trials per arm (fixed design), interleaved in seeded random order"
    )
    seed: Seed = 0
    test: PairedTest = Field(
        default="repeat_t",
        description="repeat_t: paired t-test over repeats on per-trial log ratios (the repeat is the unit); "
        "two_level_bootstrap: resample repeats then requests (anti-conservative with few repeats)",
    )
    bootstrap_samples: Count = Field(default=2000, description="resamples for test: two_level_bootstrap")
    harm_tolerance: float = Field(
        default=0.05,
        gt=0.0,
        lt=1.0,
        description="harm family: a metric worse than the baseline by more than this fraction (x1.05 for latency, "
        "x0.95 for throughput) is a regression, tested one-sided whether or not the targets moved",
    )
    harm_tolerance_abs: float = Field(
        default=0.01,
        gt=0.0,
        lt=1.0,
        description="harm family, share metrics (failure rate, SLO attainment): worse by more than this absolute "
        "share (0.01 = one percentage point) is a regression",
    )
    harm_tolerances: dict[str, float] = Field(
        default_factory=dict,
        description="per-metric tolerances overriding the two above, e.g. {tpot_ms_p50: 0.5}: a change that trades "
        "one metric for another (batching: TPOT for throughput) declares what it may cost (the SLOs still judge it)",
    )

    primary_harm: tuple[str, ...] = Field(
        default=PRIMARY_HARM,
        description="harm family, primary hypotheses (with every metric named in harm_tolerances): tested with "
        "primary_alpha_share of alpha (Holm), the other metrics with the rest, alpha passed on when a family is "
        "all rejected (graphical weighted Holm: family-wise error <= alpha over every metric)",
    )
    primary_alpha_share: float = Field(
        default=0.8, gt=0.0, lt=1.0, description="the share of alpha the primary harm hypotheses start with"
    )

    @field_validator("harm_tolerances")
    @classmethod
    def _tolerances_in_range(cls, value: dict[str, float]) -> dict[str, float]:
        for metric, tol in value.items():
            if not (isinstance(tol, (int, float)) and 0.0 < tol < 10.0):
                raise ValueError(f"harm_tolerances.{metric} = {tol!r}; fix: a positive fraction, e.g. 0.5 for 50 %")
        return value

    alpha: float = Field(
        default=0.05, gt=0.0, lt=0.5, description="family-wise error over metrics (Holm) and looks (Bonferroni)"
    )
    num_requests: Count | None = Field(default=None, description="requests per trial (default: the workload's)")
    aa_arm: bool = Field(
        default=True, description="also run the baseline again as arm `aa`: the noise floor, measured in the same run"
    )
    min_repeats: PositiveInt | None = Field(
        default=None, description="sequential design: first look after this many repeats (default: repeats)"
    )
    max_repeats: PositiveInt | None = Field(
        default=None, le=1000, description="sequential design: last look; unset = fixed design with `repeats`"
    )
    dispatch: Literal["inline", "workers"] = Field(
        default="inline",
        description="inline: every trial in this process, interleaved; workers: each arm's trials as a flow run of "
        "`arm_deployment` on a Prefect work pool (one worker per node), arms in parallel, statistics here",
    )
    arm_deployment: str = Field(default="arm/arm", description="dispatch: workers — the deployment that runs one arm")
    dispatch_timeout_s: PositiveFloat = Field(
        default=3600.0, le=7 * MAX_SECONDS, description="dispatch: workers — longest wait for all arms"
    )
    extra_arms: tuple[dict[str, Any], ...] = Field(
        default=(),
        description="more one-change arms, compared with the baseline but not part of the combined candidate "
        "(alternatives for one field, e.g. [{attn_implementation: flash_attention_2}] beside a "
        "candidate that changes it to sdpa); each maps exactly one dotted path to a value and is "
        "named `path=value`",
    )

    @field_validator("extra_arms")
    @classmethod
    def _one_path_each(cls, value: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
        for i, arm in enumerate(value):
            if len(arm) != 1:
                raise ValueError(
                    f"extra_arms[{i}] = {arm!r} sets {len(arm)} paths; fix: one dotted path per extra arm, "
                    "e.g. {attn_implementation: flash_attention_2} (list several arms for several values)"
                )
        return value

    @model_validator(mode="after")
    def _design(self) -> AblationSettings:
        if self.max_repeats is None:
            if self.min_repeats is not None:
                raise ValueError(
                    "min_repeats only applies to sequential stopping; fix: set max_repeats too, or drop min_repeats"
                )
            if self.repeats < MIN_REPEATS:
                raise ValueError(
                    f"repeats = {self.repeats}: the paired test over repeats needs >= {MIN_REPEATS} (one trial per "
                    f"arm says nothing about trial-to-trial noise, so every arm would read 'no detectable change'); "
                    f"fix: repeats >= {MIN_REPEATS} (3 or more to detect anything but large effects)"
                )
            return self
        first = self.min_repeats if self.min_repeats is not None else self.repeats
        if first < 2:
            raise ValueError(
                f"sequential stopping looks first after {first} repeat(s); fix: min_repeats >= 2 "
                "(one trial per arm says nothing about trial-to-trial noise)"
            )
        if first > self.max_repeats:
            which = (
                "min_repeats" if self.min_repeats is not None else "repeats (the first look when min_repeats is unset)"
            )
            raise ValueError(
                f"{which} = {first} exceeds max_repeats = {self.max_repeats}; fix: min_repeats <= max_repeats"
            )
        return self

    @property
    def sequential(self) -> bool:
        return self.max_repeats is not None

    @property
    def look_repeats(self) -> tuple[int, ...]:
        """After how many repeats each planned look happens (one look for the fixed design)."""
        if self.max_repeats is None:
            return (self.repeats,)
        first = self.min_repeats if self.min_repeats is not None else self.repeats
        return tuple(range(first, self.max_repeats + 1))

    @property
    def alpha_per_look(self) -> float:
        """Bonferroni over the planned looks (the whole alpha for the fixed design)."""
        return self.alpha / len(self.look_repeats)


class RetrySettings(Frozen):
    """Opt-in client retry of rejected requests (HTTP 429/503), as a real caller would (`inferopt.transport.retry`):
    bounded attempts, the server's Retry-After honoured, else exponential backoff with full jitter."""

    max_attempts: PositiveInt = Field(default=3, le=100, description="attempts in all, the first included")
    base_backoff_s: NonNegativeFloat = Field(default=0.25, le=3600.0)
    max_backoff_s: NonNegativeFloat = Field(default=4.0, le=3600.0)
    jitter: Literal["full", "none"] = "full"
    honour_retry_after: bool = True
    max_retry_after_s: NonNegativeFloat = Field(
        default=30.0, le=3600.0, description="a longer Retry-After ends the retries"
    )
    budget_s: Seconds | None = Field(default=None, description="total waiting per request across its retries")


_KIND_FIELDS = {
    "admission_limit": "overload",
    "compare_unbounded": "overload",
    "replicas": "node_failure",
    "kill_at_s": "node_failure",
    "kill_replica": "node_failure",
    "max_recovery_s": "node_failure",
}


class ScenarioConfig(Frozen):
    """One validation scenario (`inferopt.validate`): steady, burst, overload (admission control vs an
    unbounded queue) or node_failure (replicas behind nginx, one killed mid-run)."""

    name: str
    kind: Literal["steady", "burst", "overload", "node_failure"]
    rate_scale: PositiveFloat = Field(
        default=1.0,
        le=1e6,  # the scaled rate's own bound (1e6/s) is checked by the pre-run check; capacity probes scale far
        description="multiplies the workload's arrival rate (overload: above capacity, e.g. 4)",
    )
    burstiness: PositiveFloat = Field(default=8.0, le=1000.0, description="CV² of gaps for kind=burst")
    num_requests: Count | None = None
    retry: RetrySettings | None = Field(default=None, description="client retries of rejected requests; None = none")
    admission_limit: PositiveInt | None = Field(
        default=None,
        description="overload: queue bound of the admission-controlled run (hf/fake: batching.max_queue, "
        "vllm: max_num_queued_reqs); None = the system's own",
    )
    compare_unbounded: bool = Field(
        default=True,
        description="overload: also replay the load with no queue bound (shows the p99 blow-up; not judged)",
    )
    replicas: int = Field(default=2, ge=2, le=8, description="node_failure: engine replicas behind the load balancer")
    kill_at_s: Seconds = Field(
        default=5.0, description="node_failure: SIGKILL one replica this long after the first measured send"
    )
    kill_replica: int = Field(default=0, ge=0, description="node_failure: which replica (0-based) is killed")
    max_recovery_s: Seconds = Field(
        default=10.0,
        description="node_failure: longest tolerated time for the failure rate to return to baseline after the kill",
    )

    @model_validator(mode="after")
    def _kind_fields(self) -> ScenarioConfig:
        for name in sorted(self.model_fields_set & _KIND_FIELDS.keys()):
            # a dumped config sets every field: only a value off its default is misplaced
            if _KIND_FIELDS[name] != self.kind and getattr(self, name) != type(self).model_fields[name].default:
                raise ValueError(
                    f"scenario {self.name!r}: `{name}` applies to kind: {_KIND_FIELDS[name]}, not "
                    f"{self.kind}; fix: remove it or set kind: {_KIND_FIELDS[name]}"
                )
        if self.kill_replica >= self.replicas:
            raise ValueError(
                f"scenario {self.name!r}: kill_replica={self.kill_replica} but only {self.replicas} "
                f"replicas (0-based); fix: kill_replica < replicas"
            )
        return self


class FairnessSettings(Frozen):
    """Starvation thresholds of the fairness check run on every scenario (SPEC V5, `inferopt.validate.fairness`)."""

    max_wait_ms: PositiveFloat | None = Field(
        default=None,
        description="when every group's longest wait exceeds this, the run reads as overloaded (not starvation: "
        "nobody is worse off than the others); None = 3 x the SLO's TTFT p99",
    )
    max_wait_ratio: float = Field(
        default=3.0,
        gt=1.0,
        description="a group whose median wait is this many times the other groups' (and significantly so) starves",
    )
    min_share_ratio: float = Field(
        default=0.5, gt=0.0, le=1.0, description="served share / offered share below this starves"
    )
    min_requests: PositiveInt = Field(
        default=5, description="the share rule needs this many requests offered by the group"
    )
    fail_on_starvation: bool = Field(
        default=True, description="a starved group fails the scenario (else it is only flagged)"
    )


class ValidationSettings(Frozen):
    scenarios: tuple[ScenarioConfig, ...] = (
        ScenarioConfig(name="steady", kind="steady"),
        ScenarioConfig(name="burst", kind="burst"),
    )
    fairness: FairnessSettings = FairnessSettings()

    @field_validator("scenarios")
    @classmethod
    def _unique(cls, value: tuple[ScenarioConfig, ...]) -> tuple[ScenarioConfig, ...]:
        names = [s.name for s in value]
        if len(set(names)) != len(names):
            raise ValueError(f"scenario names must be unique (they key the metrics), got {names}; fix: rename one")
        return value


class GateSettings(Frozen):
    """Step 6. Quality: the sliced suite (lm-eval, `inferopt.gate`) on baseline and candidate, paired per
    document, non-inferiority per slice (G1, G2); plus next-token drift as a diagnostic. Cost per successful
    task (G3)."""

    quality_model: str = Field(
        default="builtin:quality-tiny",
        description="model the suite evaluates under each arm's settings: `system` = the arm's own model (a real, "
        "trained model on a GPU); a path or builtin: = a proxy that solves the tasks (the serving model "
        "here is random, so it would score zero on everything)",
    )
    quality_margin: float = Field(
        default=0.05, ge=0.0, le=1.0, description="largest tolerated drop per slice (absolute)"
    )
    slice_margins: dict[str, float] = Field(
        default_factory=dict, description='per-slice margins, e.g. {"risk=high": 0.0}'
    )
    mlperf_ratio: float | None = Field(
        default=None, gt=0.0, le=1.0, description="MLPerf's rule: candidate >= ratio x baseline (e.g. 0.99)"
    )
    quality_alpha: float = Field(default=0.05, gt=0.0, lt=0.5, description="two-sided level of each slice's interval")
    quality_bootstrap: Count = 2000
    quality_limit: Count | None = Field(default=None, description="documents per task (None = all)")
    quality_data_dir: str | None = Field(
        default=None, description="directory with <task>.jsonl (real task data); None = the built-in suite"
    )
    held_prompts: Count = 16
    prompt_len: Tokens = 48
    continuation_len: Tokens = 16
    min_token_agreement: float = Field(default=0.98, ge=0.0, le=1.0)
    max_mean_kl: NonNegativeFloat = 0.01
    seed: Seed = 1234


class LintSettings(Frozen):
    """Opt-in overrides of the benchmark-cheat lint (SPEC V4, `inferopt.verdict.lint.cheats`). By default a cheat
    refuses the run (config-level, before any model loads) or makes the verdict at best inconclusive.
    `allow` names cheats that are deliberate here (e.g. a fixed-length kernel microbenchmark): each is then
    only flagged — recorded on the run and in the verdict's warnings — and `reason` says why."""

    allow: tuple[Literal["fixed_outputs", "warm_cache", "no_queueing"], ...] = Field(
        default=(), description="cheats accepted on purpose for this candidate: flagged, never silently passed"
    )
    reason: str = Field(default="", description="why the allowed cheats are acceptable here (required with allow)")

    @model_validator(mode="after")
    def _reason(self) -> LintSettings:
        if self.allow and not self.reason.strip():
            raise ValueError(
                "lint.allow needs lint.reason: say why this benchmark may "
                f"{', '.join(self.allow)}; fix: e.g. reason: 'fixed-length kernel microbenchmark'"
            )
        return self
