"""The configuration models of inferopt: frozen pydantic models with `extra="forbid"`.

The systems under test (`systems.py`, re-exported here), the workload, SLOs, hardware, and a candidate
(a baseline system plus exactly the changes under test). `apply_changes` derives the candidate system.

Deliberately not here: reading files (`loader.py`) or anything that loads a model, touches the network,
or measures (no side effects; the builtin-model check only lists the registry).
"""

from __future__ import annotations

import difflib
from typing import Annotated, Any, Literal

from pydantic import (
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    field_validator,
    model_validator,
)

from inferopt.config.systems import (
    BUILTIN_PREFIX,
    AnySystem,
    BatchingKnobs,
    ConfigError,
    FakeSystem,
    Frozen,
    HFSystem,
    ModelSpec,
    OpenAISystem,
    SystemConfig,
    VLLMSystem,
)

# --------------------------------------------------------------------------- workload


class PoissonArrivals(Frozen):
    kind: Literal["poisson"] = "poisson"
    rate_per_s: PositiveFloat


class GammaArrivals(Frozen):
    """Gamma inter-arrivals with mean 1/rate; `burstiness` = CV² of the gaps (1 = Poisson, >1 = bursty)."""

    kind: Literal["gamma"] = "gamma"
    rate_per_s: PositiveFloat
    burstiness: PositiveFloat = 4.0


class ConstantArrivals(Frozen):
    kind: Literal["constant"] = "constant"
    rate_per_s: PositiveFloat


ArrivalConfig = Annotated[PoissonArrivals | GammaArrivals | ConstantArrivals, Field(discriminator="kind")]


class LengthConfig(Frozen):
    """Joint input/output lengths: a bivariate lognormal (log-space correlation), clipped to bounds."""

    input_median: PositiveInt = 64
    input_sigma: NonNegativeFloat = 0.6
    output_median: PositiveInt = 16
    output_sigma: NonNegativeFloat = 0.6
    correlation: float = Field(default=0.0, ge=-1.0, le=1.0)
    input_min: PositiveInt = 4
    input_max: PositiveInt = 512
    output_min: PositiveInt = 1
    output_max: PositiveInt = 128

    @model_validator(mode="after")
    def _bounds(self) -> LengthConfig:
        if self.input_min > self.input_max:
            raise ValueError("input_min must be <= input_max")
        if self.output_min > self.output_max:
            raise ValueError("output_min must be <= output_max")
        return self


class PrefixConfig(Frozen):
    """Shared-prefix groups (controls prefix-cache hit): `share_fraction` of requests start with one of
    `num_groups` shared prefixes of `prefix_len` tokens."""

    num_groups: PositiveInt = 2
    prefix_len: PositiveInt = 16
    share_fraction: float = Field(default=0.0, ge=0.0, le=1.0)


class TenantConfig(Frozen):
    name: str
    weight: PositiveFloat = 1.0
    priority: int = Field(default=0, description="lower runs first (vLLM convention)")


class TraceConfig(Frozen):
    """Replay a recorded trace instead of synthesizing arrivals and lengths (see `inferopt.workload.trace`).
    JSONL or CSV, one request per row: `timestamp` (s; absolute or relative, shifted to start at 0) and
    `input_len`/`output_len` or `prompt` text; optional `tenant`, `priority`, `prefix_group`."""

    path: str = Field(description="the trace file; relative paths resolve against the config file")
    format: Literal["auto", "jsonl", "csv"] = "auto"
    time_scale: PositiveFloat = Field(default=1.0, description="multiplies the gaps (0.5 = replay twice as fast)")
    limit: PositiveInt | None = Field(default=None, description="replay only the first N rows")


class WorkloadConfig(Frozen):
    """Either synthetic (`arrival` + `lengths` + `prefix` + `tenants`) or a replayed `trace`."""

    name: str = "workload"
    seed: int = 0
    num_requests: PositiveInt = 64
    arrival: ArrivalConfig | None = None
    trace: TraceConfig | None = None
    lengths: LengthConfig = LengthConfig()
    prefix: PrefixConfig = PrefixConfig()
    tenants: tuple[TenantConfig, ...] = (TenantConfig(name="default"),)
    timeout_s: PositiveFloat = Field(default=60.0, description="per-request client timeout")

    @model_validator(mode="after")
    def _one_source(self) -> WorkloadConfig:
        if (self.arrival is None) == (self.trace is None):
            raise ValueError("give exactly one of `arrival` (synthetic workload) or `trace` (replay a file); fix: "
                             "e.g. arrival: {kind: poisson, rate_per_s: 2}, or trace: {path: trace.jsonl}")
        return self

    @field_validator("tenants")
    @classmethod
    def _tenants_unique(cls, value: tuple[TenantConfig, ...]) -> tuple[TenantConfig, ...]:
        names = [t.name for t in value]
        if not names:
            raise ValueError("at least one tenant is needed")
        if len(set(names)) != len(names):
            raise ValueError(f"tenant names must be unique, got {names}")
        return value


# --------------------------------------------------------------------------- SLOs and hardware


class SLOConfig(Frozen):
    name: str = "interactive"
    ttft_p99_ms: PositiveFloat
    tpot_p95_ms: PositiveFloat
    e2e_p99_ms: PositiveFloat | None = None
    max_timeout_rate: float = Field(default=0.01, ge=0.0, le=1.0)
    max_error_rate: float = Field(default=0.01, ge=0.0, le=1.0)


class HardwareConfig(Frozen):
    """Peak compute and memory of the device. `measure_at_runtime` (CPU) replaces the peaks with
    short micro-benchmarks taken at run time; the figures given are then only fallbacks."""

    name: str
    kind: Literal["gpu", "cpu"]
    peak_flops_per_s: dict[str, PositiveFloat] = Field(description="per dtype name, e.g. float32, bfloat16")
    mem_bandwidth_bytes_per_s: PositiveFloat
    memory_bytes: PositiveFloat
    tdp_w: PositiveFloat
    price_per_hour_usd: NonNegativeFloat
    measure_at_runtime: bool = False
    source: str = ""


# --------------------------------------------------------------------------- the candidate and its run


class MeasureSettings(Frozen):
    warmup_requests: int = Field(default=2, ge=0, description="sent before measuring, excluded and declared")


class AblationSettings(Frozen):
    """How an ablation runs and is judged (SPEC A1).

    Fixed design (`max_repeats` unset): `repeats` trials per arm, one look at level `alpha`. The test per
    metric is `test` (see `inferopt.ablation.compare`): target metrics first (Holm), the other metrics only
    when every target moved (Holm) — family-wise error <= `alpha` over all metrics.
    Sequential design (`max_repeats` set): a look after every repeat from `min_repeats` (default: `repeats`)
    to `max_repeats`; the run stops at the first look where every tested arm has every target metric
    significant, or at `max_repeats`. Peeking is paid for with Bonferroni over the planned looks: each look
    tests at `alpha / number_of_looks`, so the chance of any false alarm over all looks stays <= `alpha`
    whatever the stopping rule (see `inferopt.ablation.run`)."""

    repeats: PositiveInt = Field(default=3, description="trials per arm (fixed design), interleaved in seeded random order")
    seed: int = 0
    test: Literal["repeat_t", "two_level_bootstrap"] = Field(
        default="repeat_t",
        description="repeat_t: paired t-test over repeats on per-trial log ratios (the repeat is the unit); "
                    "two_level_bootstrap: resample repeats then requests (anti-conservative with few repeats)")
    bootstrap_samples: PositiveInt = Field(default=2000, description="resamples for test: two_level_bootstrap")
    alpha: float = Field(default=0.05, gt=0.0, lt=0.5, description="family-wise error over metrics (Holm) and looks (Bonferroni)")
    num_requests: PositiveInt | None = Field(default=None, description="requests per trial (default: the workload's)")
    aa_arm: bool = Field(default=True, description="also run the baseline again as arm `aa`: the noise floor, measured in the same run")
    min_repeats: PositiveInt | None = Field(default=None, description="sequential design: first look after this many repeats (default: repeats)")
    max_repeats: PositiveInt | None = Field(default=None, description="sequential design: last look; unset = fixed design with `repeats`")

    @model_validator(mode="after")
    def _design(self) -> AblationSettings:
        if self.max_repeats is None:
            if self.min_repeats is not None:
                raise ValueError("min_repeats only applies to sequential stopping; fix: set max_repeats too, or drop min_repeats")
            return self
        first = self.min_repeats if self.min_repeats is not None else self.repeats
        if first < 2:
            raise ValueError(f"sequential stopping looks first after {first} repeat(s); fix: min_repeats >= 2 "
                             "(one trial per arm says nothing about trial-to-trial noise)")
        if first > self.max_repeats:
            which = "min_repeats" if self.min_repeats is not None else "repeats (the first look when min_repeats is unset)"
            raise ValueError(f"{which} = {first} exceeds max_repeats = {self.max_repeats}; fix: min_repeats <= max_repeats")
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


class ScenarioConfig(Frozen):
    name: str
    kind: Literal["steady", "burst"]
    rate_scale: PositiveFloat = Field(default=1.0, description="multiplies the workload's arrival rate")
    burstiness: PositiveFloat = Field(default=8.0, description="CV² of gaps for kind=burst")
    num_requests: PositiveInt | None = None


class ValidationSettings(Frozen):
    scenarios: tuple[ScenarioConfig, ...] = (
        ScenarioConfig(name="steady", kind="steady"),
        ScenarioConfig(name="burst", kind="burst"),
    )


class GateSettings(Frozen):
    """Step 6. Quality: the sliced suite (lm-eval, `inferopt.quality`) on baseline and candidate, paired per
    document, non-inferiority per slice (G1, G2); plus next-token drift as a diagnostic. Cost per successful
    task (G3)."""

    quality_model: str = Field(
        default="builtin:quality-tiny",
        description="model the suite evaluates under each arm's settings: `system` = the arm's own model (a real, "
                    "trained model on a GPU); a path or builtin: = a proxy that solves the tasks (the serving model "
                    "here is random, so it would score zero on everything)")
    quality_margin: float = Field(default=0.05, ge=0.0, le=1.0, description="largest tolerated drop per slice (absolute)")
    slice_margins: dict[str, float] = Field(default_factory=dict, description='per-slice margins, e.g. {"risk=high": 0.0}')
    mlperf_ratio: float | None = Field(default=None, gt=0.0, le=1.0, description="MLPerf's rule: candidate >= ratio x baseline (e.g. 0.99)")
    quality_alpha: float = Field(default=0.05, gt=0.0, lt=0.5, description="two-sided level of each slice's interval")
    quality_bootstrap: PositiveInt = 2000
    quality_limit: PositiveInt | None = Field(default=None, description="documents per task (None = all)")
    quality_data_dir: str | None = Field(default=None, description="directory with <task>.jsonl (real task data); None = the built-in suite")
    held_prompts: PositiveInt = 16
    prompt_len: PositiveInt = 48
    continuation_len: PositiveInt = 16
    min_token_agreement: float = Field(default=0.98, ge=0.0, le=1.0)
    max_mean_kl: NonNegativeFloat = 0.01
    seed: int = 1234


class LintSettings(Frozen):
    """Opt-in overrides of the benchmark-cheat lint (SPEC V4, `inferopt.lint.cheats`). By default a cheat
    refuses the run (config-level, before any model loads) or makes the verdict at best inconclusive.
    `allow` names cheats that are deliberate here (e.g. a fixed-length kernel microbenchmark): each is then
    only flagged — recorded on the run and in the verdict's warnings — and `reason` says why."""

    allow: tuple[Literal["fixed_outputs", "warm_cache", "no_queueing"], ...] = Field(
        default=(), description="cheats accepted on purpose for this candidate: flagged, never silently passed")
    reason: str = Field(default="", description="why the allowed cheats are acceptable here (required with allow)")

    @model_validator(mode="after")
    def _reason(self) -> LintSettings:
        if self.allow and not self.reason.strip():
            raise ValueError("lint.allow needs lint.reason: say why this benchmark may "
                             f"{', '.join(self.allow)}; fix: e.g. reason: 'fixed-length kernel microbenchmark'")
        return self


class CandidateConfig(Frozen):
    """A baseline system plus exactly the changes under test, judged on one workload against SLOs."""

    name: str
    description: str = ""
    baseline: SystemConfig
    changes: dict[str, Any] = Field(description="dotted field paths of the baseline -> new value, e.g. {attn_implementation: sdpa}")
    target_metrics: tuple[str, ...] = Field(default=("tpot_ms_p50", "ttft_ms_p99"), description="what the change is meant to improve")
    workload: WorkloadConfig
    slo: SLOConfig
    hardware: HardwareConfig
    measure: MeasureSettings = MeasureSettings()
    ablation: AblationSettings = AblationSettings()
    validation: ValidationSettings = ValidationSettings()
    gate: GateSettings = GateSettings()
    lint: LintSettings = LintSettings()

    @model_validator(mode="after")
    def _changes_apply(self) -> CandidateConfig:
        if not self.changes:
            raise ValueError("changes is empty: a candidate must change at least one baseline field")
        apply_changes(self.baseline, self.changes)  # raises with the offending path
        single_change_systems(self.baseline, self.changes)  # each change alone moves exactly one field
        return self

    @property
    def candidate_system(self) -> AnySystem:
        return apply_changes(self.baseline, self.changes)


def apply_changes(system: AnySystem, changes: dict[str, Any]) -> AnySystem:
    """Return `system` with each dotted path in `changes` set; every path must exist and change its value."""
    data = system.model_dump()
    for dotted, value in changes.items():
        node = data
        parts = dotted.split(".")
        for i, part in enumerate(parts):
            if not isinstance(node, dict) or part not in node:
                where = ".".join(parts[: i + 1])
                options = sorted(node) if isinstance(node, dict) else []
                hint = difflib.get_close_matches(part, options, n=1)
                raise ValueError(
                    f"changes.{dotted}: {where!r} is not a field of the {system.engine} baseline; fix: "
                    + (f"did you mean {hint[0]!r}? " if hint else "")
                    + f"fields here: {', '.join(options)}"
                )
            if i == len(parts) - 1:
                if node[part] == value:
                    raise ValueError(f"changes.{dotted}: the baseline already has {value!r}; fix: change something or drop it")
                node[part] = value
            else:
                node = node[part]
    return type(system).model_validate(data)

def changed_fields(a: AnySystem, b: AnySystem) -> dict[str, tuple[Any, Any]]:
    """Leaf fields (dotted paths) whose values differ between two systems: path -> (a's value, b's value)."""
    out: dict[str, tuple[Any, Any]] = {}

    def walk(x: Any, y: Any, prefix: str) -> None:
        if isinstance(x, dict) and isinstance(y, dict):
            for key in sorted(set(x) | set(y)):
                walk(x.get(key), y.get(key), f"{prefix}{key}.")
        elif x != y:
            out[prefix.rstrip(".")] = (x, y)

    walk(a.model_dump(), b.model_dump(), "")
    return out


def single_change_systems(system: AnySystem, changes: dict[str, Any]) -> dict[str, AnySystem]:
    """One system per change (change path -> the baseline with only that change), each checked to differ from
    the baseline in exactly one leaf field (SPEC A1: one variable at a time). Refused: overlapping paths
    (`batching` and `batching.max_batch_size`), and a change whose value moves several fields or none
    (e.g. `batching: {max_batch_size: 8}` also resets `batch_wait_ms` to its default)."""
    paths = sorted(changes)
    for i, p in enumerate(paths):
        for q in paths[i + 1:]:
            if q.startswith(p + "."):
                raise ValueError(f"changes.{p} and changes.{q} overlap: the first contains the second; fix: keep only "
                                 "the dotted leaf paths, one per variable")
    out: dict[str, AnySystem] = {}
    for dotted, value in changes.items():
        one = apply_changes(system, {dotted: value})
        moved = changed_fields(system, one)
        if len(moved) != 1:
            listing = ", ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in moved.items()) or "nothing"
            raise ValueError(
                f"changes.{dotted}: an ablation arm must change exactly one field of the baseline, this change "
                f"moves {len(moved)} ({listing}); fix: give each variable its own dotted path, e.g. "
                + (f"{next(iter(moved))}: {next(iter(moved.values()))[1]!r}" if moved else f"{dotted}.<field>: <value>")
            )
        out[dotted] = one
    return out


__all__ = [
    "BUILTIN_PREFIX",
    "AblationSettings",
    "AnySystem",
    "ArrivalConfig",
    "BatchingKnobs",
    "CandidateConfig",
    "ConfigError",
    "ConstantArrivals",
    "FakeSystem",
    "Frozen",
    "GammaArrivals",
    "GateSettings",
    "HFSystem",
    "HardwareConfig",
    "LengthConfig",
    "LintSettings",
    "MeasureSettings",
    "ModelSpec",
    "OpenAISystem",
    "PoissonArrivals",
    "PrefixConfig",
    "SLOConfig",
    "ScenarioConfig",
    "SystemConfig",
    "TenantConfig",
    "TraceConfig",
    "VLLMSystem",
    "ValidationSettings",
    "WorkloadConfig",
    "apply_changes",
    "changed_fields",
    "single_change_systems",
]
