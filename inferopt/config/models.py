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

from inferopt.config.bounds import MAX_COUNT, Count, RatePerS, Seconds, Seed, Tokens
from inferopt.config.capabilities import Capabilities, KVBudget, Speculation  # noqa: F401 - re-exported
from inferopt.config.sessions import (  # noqa: F401 - re-exported
    DelayConfig,
    HistoryConfig,
    MessageLengthConfig,
    SessionsConfig,
    ToolConfig,
    TurnsConfig,
)
from inferopt.config.settings import (  # noqa: F401 - re-exported
    METRIC_NAMES,
    AblationSettings,
    GateSettings,
    LintSettings,
    MeasureSettings,
    ScenarioConfig,
    ValidationSettings,
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
from inferopt.config.trace_formats import MOONCAKE_BLOCK_TOKENS, TRACE_FIELDS

# --------------------------------------------------------------------------- workload


class PoissonArrivals(Frozen):
    kind: Literal["poisson"] = "poisson"
    rate_per_s: RatePerS


class GammaArrivals(Frozen):
    """Gamma inter-arrivals with mean 1/rate; `burstiness` = CV² of the gaps (1 = Poisson, >1 = bursty)."""

    kind: Literal["gamma"] = "gamma"
    rate_per_s: RatePerS
    burstiness: PositiveFloat = Field(default=4.0, le=1000.0)


class ConstantArrivals(Frozen):
    kind: Literal["constant"] = "constant"
    rate_per_s: RatePerS


ArrivalConfig = Annotated[PoissonArrivals | GammaArrivals | ConstantArrivals, Field(discriminator="kind")]


class LengthConfig(Frozen):
    """Joint input/output lengths: a bivariate lognormal (log-space correlation), clipped to bounds."""

    input_median: Tokens = 64
    input_sigma: NonNegativeFloat = Field(default=0.6, le=10.0)
    output_median: Tokens = 16
    output_sigma: NonNegativeFloat = Field(default=0.6, le=10.0)
    correlation: float = Field(default=0.0, ge=-1.0, le=1.0)
    input_min: Tokens = 4
    input_max: Tokens = 512
    output_min: Tokens = 1
    output_max: Tokens = 128

    @model_validator(mode="after")
    def _bounds(self) -> LengthConfig:
        if self.input_min > self.input_max:
            raise ValueError(
                f"input_min must be <= input_max ({self.input_min} > {self.input_max}); fix: lower input_min or raise "
                "input_max"
            )
        if self.output_min > self.output_max:
            raise ValueError(
                f"output_min must be <= output_max ({self.output_min} > {self.output_max}); fix: lower output_min or "
                "raise output_max"
            )
        return self


class PrefixConfig(Frozen):
    """Shared-prefix groups (controls prefix-cache hit): `share_fraction` of requests start with one of
    `num_groups` shared prefixes of `prefix_len` tokens."""

    num_groups: PositiveInt = Field(default=2, le=MAX_COUNT)
    prefix_len: Tokens = 16
    share_fraction: float = Field(default=0.0, ge=0.0, le=1.0)


class TenantConfig(Frozen):
    name: str
    weight: PositiveFloat = 1.0
    priority: int = Field(default=0, description="lower runs first (vLLM convention)")


class TraceConfig(Frozen):
    """Replay a recorded trace instead of synthesizing arrivals and lengths (see `inferopt.workload.trace`).
    One request per row; `format` says whose columns (`auto`: told from the header), `columns` maps our fields
    to the file's own column names, `timestamp_unit` overrides the format's (formats:
    `inferopt.config.trace_formats`)."""

    path: str = Field(description="the trace file; relative paths resolve against the config file")
    format: Literal["auto", "jsonl", "csv", "native", "azure", "burstgpt", "mooncake", "sessions"] = Field(
        default="auto",
        description="auto (by header), native (jsonl/csv: our columns), azure, burstgpt, mooncake, sessions",
    )
    columns: dict[str, str] = Field(
        default_factory=dict, description="our field -> the file's column, e.g. {timestamp: ts, output_len: gen}"
    )
    timestamp_unit: Literal["s", "ms", "us", "iso"] | None = Field(
        default=None, description="s / ms / us numbers, or iso date-times; default: the format's"
    )
    block_tokens: Tokens = Field(default=MOONCAKE_BLOCK_TOKENS, description="tokens per Mooncake hash_ids block")
    time_scale: PositiveFloat = Field(
        default=1.0, le=1000.0, description="multiplies the gaps (0.5 = replay twice as fast)"
    )
    limit: Count | None = Field(default=None, description="replay only the first N rows")

    @field_validator("columns")
    @classmethod
    def _known_fields(cls, value: dict[str, str]) -> dict[str, str]:
        for field, column in value.items():
            if field not in TRACE_FIELDS:
                near = difflib.get_close_matches(field, TRACE_FIELDS, n=1)
                hint = f"did you mean {near[0]!r}? " if near else ""
                raise ValueError(
                    f"columns: {field!r} is not a trace field; fix: {hint}map one of {', '.join(TRACE_FIELDS)} "
                    "to the file's column name"
                )
            if not column.strip() or len(column) > 200:
                raise ValueError(f"columns.{field}: give the file's column name (1-200 characters)")
        if len(set(value.values())) != len(value):
            raise ValueError("columns: two fields map to one column; fix: map each column once")
        return value


class WorkloadConfig(Frozen):
    """Either synthetic (`arrival` + `lengths` + `prefix` + `tenants`) or a replayed `trace`."""

    name: str = "workload"
    seed: Seed = 0
    num_requests: Count = 64
    arrival: ArrivalConfig | None = None
    trace: TraceConfig | None = None
    lengths: LengthConfig = LengthConfig()
    prefix: PrefixConfig = PrefixConfig()
    tenants: tuple[TenantConfig, ...] = (TenantConfig(name="default"),)
    timeout_s: Seconds = Field(default=60.0, description="per-request client timeout")
    output_lengths: Literal["forced", "natural"] | None = Field(
        default=None,
        description="forced: every request runs to its target length (ignore_eos/min_tokens, hf's own loop); "
        "natural: the model stops at EOS. Unset: forced for trace replay and capacity probes, natural for "
        "synthetic loads and for arms whose changes can change outputs",
    )
    sessions: SessionsConfig | None = Field(
        default=None, description="multi-turn sessions (arrivals are sessions; see inferopt.config.sessions)"
    )

    @model_validator(mode="after")
    def _one_source(self) -> WorkloadConfig:
        if (self.arrival is None) == (self.trace is None):
            raise ValueError(
                "give exactly one of `arrival` (synthetic workload) or `trace` (replay a file); fix: "
                "e.g. arrival: {kind: poisson, rate_per_s: 2}, or trace: {path: trace.jsonl}"
            )
        if self.sessions is not None and self.trace is not None:
            raise ValueError(
                "`sessions` synthesises sessions from `arrival`; a trace brings its own (session_id/turn columns); "
                "fix: drop `sessions` or replace `trace` by an `arrival` process"
            )
        return self

    @field_validator("tenants")
    @classmethod
    def _tenants_unique(cls, value: tuple[TenantConfig, ...]) -> tuple[TenantConfig, ...]:
        names = [t.name for t in value]
        if not names:
            raise ValueError("at least one tenant is needed; fix: e.g. tenants: [{name: default}], or drop tenants")
        if len(set(names)) != len(names):
            raise ValueError(f"tenant names must be unique, got {names}; fix: rename one")
        return value


# --------------------------------------------------------------------------- SLOs and hardware


class SLOConfig(Frozen):
    name: str = "interactive"
    ttft_p50_ms: PositiveFloat | None = Field(
        default=None, description="median TTFT bound (the seed's case checks p50, then p99)"
    )
    ttft_p99_ms: PositiveFloat
    tpot_p95_ms: PositiveFloat
    e2e_p99_ms: PositiveFloat | None = None
    max_timeout_rate: float = Field(default=0.01, ge=0.0, le=1.0)
    max_error_rate: float = Field(default=0.01, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _consistent(self) -> SLOConfig:
        """A percentile bound below a lower percentile's, or a first token slower than the whole answer, is a
        contradiction no system can meet (or a typo in the unit)."""
        pairs = [
            ("ttft_p50_ms", self.ttft_p50_ms, "ttft_p99_ms", self.ttft_p99_ms, "a median above its p99"),
            ("ttft_p99_ms", self.ttft_p99_ms, "e2e_p99_ms", self.e2e_p99_ms, "the first token after the whole answer"),
            ("tpot_p95_ms", self.tpot_p95_ms, "e2e_p99_ms", self.e2e_p99_ms, "one token slower than the whole answer"),
        ]
        for low, a, high, b, what in pairs:
            if a is not None and b is not None and a > b:
                raise ValueError(
                    f"{low} = {a:g} > {high} = {b:g}: {what} is a contradiction; fix: {low} <= {high} "
                    "(check the units: milliseconds)"
                )
        return self


class HardwareConfig(Frozen):
    """Peak compute and memory of the device. `measure_at_runtime` (CPU) replaces the peaks with
    short micro-benchmarks taken at run time; the figures given are then only fallbacks."""

    name: str
    kind: Literal["gpu", "cpu"]
    peak_flops_per_s: dict[str, PositiveFloat] = Field(description="per dtype name, e.g. float32, bfloat16")
    mem_bandwidth_bytes_per_s: PositiveFloat
    memory_bytes: PositiveFloat
    tdp_w: PositiveFloat = Field(le=1e6)
    price_per_hour_usd: NonNegativeFloat
    measure_at_runtime: bool = False
    source: str = ""


# --------------------------------------------------------------------------- the candidate and its run


class CandidateConfig(Frozen):
    """A baseline system plus exactly the changes under test, judged on one workload against SLOs."""

    name: str
    description: str = ""
    baseline: SystemConfig
    changes: dict[str, Any] = Field(
        description="dotted field paths of the baseline -> new value, e.g. {attn_implementation: sdpa}"
    )
    target_metrics: tuple[str, ...] = Field(
        default=("tpot_ms_p50", "ttft_ms_p99"),
        description=f"what the change is meant to improve; one or more of {', '.join(METRIC_NAMES)}",
    )
    workload: WorkloadConfig
    slo: SLOConfig
    hardware: HardwareConfig
    measure: MeasureSettings = MeasureSettings()
    ablation: AblationSettings = AblationSettings()
    validation: ValidationSettings = ValidationSettings()
    gate: GateSettings = GateSettings()
    lint: LintSettings = LintSettings()
    diagnostic: bool = Field(
        default=False,
        description="this candidate plants a diagnostic change (diagnostic_decode_delay_ms) to measure the verdict's "
        "error rates; without it such a knob is refused",
    )
    allow_hardware_mismatch: bool = Field(
        default=False,
        description="the hardware file describes another device than the system runs on (e.g. to project a CPU "
        "run onto a GPU's roofs); without it the pre-run check refuses a gpu hardware file for a cpu system and "
        "the reverse",
    )

    @field_validator("target_metrics")
    @classmethod
    def _known_targets(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError(f"no target metric; fix: name at least one of {', '.join(METRIC_NAMES)}")
        for name in value:
            if name not in METRIC_NAMES:
                close = difflib.get_close_matches(str(name), METRIC_NAMES, n=1)
                raise ValueError(
                    f"unknown target metric {str(name)[:60]!r} (the ablation would find it in no arm and call every "
                    "arm 'no detectable change'); fix: "
                    + (f"did you mean {close[0]!r}? " if close else "")
                    + f"one of {', '.join(METRIC_NAMES)}"
                )
        if len(set(value)) != len(value):
            raise ValueError(f"target metrics {list(value)} name one twice; fix: list each once")
        return value

    @model_validator(mode="after")
    def _changes_apply(self) -> CandidateConfig:
        if not self.changes:
            raise ValueError(
                "changes is empty: a candidate must change at least one baseline field; fix: e.g. changes: "
                "{attn_implementation: sdpa} (a dotted field of the baseline and its new value)"
            )
        apply_changes(self.baseline, self.changes)  # raises with the offending path
        single_change_systems(self.baseline, self.changes)  # each change alone moves exactly one field
        self._diagnostics_declared()
        for field in ("harm_tolerances", "primary_harm"):
            unknown = sorted(set(getattr(self.ablation, field)) - set(METRIC_NAMES))
            if unknown:
                raise ValueError(f"ablation.{field}: unknown metric(s) {unknown}; fix: one of {list(METRIC_NAMES)}")
        for i, extra in enumerate(self.ablation.extra_arms):  # alternatives: also exactly one field each
            try:
                single_change_systems(self.baseline, extra)
            except ValueError as exc:
                raise ValueError(f"ablation.extra_arms[{i}]: {exc}") from exc
        return self

    def _diagnostics_declared(self) -> None:
        """A planted diagnostic delay is refused in a candidate that does not declare itself diagnostic."""
        if self.diagnostic:
            return
        for where, system in (("baseline", self.baseline), ("changes", apply_changes(self.baseline, self.changes))):
            delay = getattr(system, "diagnostic_decode_delay_ms", 0.0)
            if delay:
                raise ValueError(
                    f"{where}: diagnostic_decode_delay_ms = {delay:g} plants a sleep in every decode step (a test "
                    "knob for the verdict's error rates, never production); fix: remove it, or declare the "
                    "candidate diagnostic: true (error-rate measurements only)"
                )

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
                    raise ValueError(
                        f"changes.{dotted}: the baseline already has {value!r}; fix: change something or drop it"
                    )
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
        for q in paths[i + 1 :]:
            if q.startswith(p + "."):
                raise ValueError(
                    f"changes.{p} and changes.{q} overlap: the first contains the second; fix: keep only "
                    "the dotted leaf paths, one per variable"
                )
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
    "Capabilities",
    "ConfigError",
    "ConstantArrivals",
    "DelayConfig",
    "FakeSystem",
    "Frozen",
    "GammaArrivals",
    "GateSettings",
    "HFSystem",
    "HardwareConfig",
    "HistoryConfig",
    "KVBudget",
    "LengthConfig",
    "LintSettings",
    "MeasureSettings",
    "MessageLengthConfig",
    "ModelSpec",
    "OpenAISystem",
    "PoissonArrivals",
    "PrefixConfig",
    "SLOConfig",
    "SessionsConfig",
    "ScenarioConfig",
    "Speculation",
    "SystemConfig",
    "TenantConfig",
    "ToolConfig",
    "TraceConfig",
    "TurnsConfig",
    "VLLMSystem",
    "ValidationSettings",
    "WorkloadConfig",
    "apply_changes",
    "changed_fields",
    "single_change_systems",
]
