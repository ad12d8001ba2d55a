"""Every configuration model of inferopt, and `load_config` with errors that name the file, field and fix.

A config is data: frozen pydantic models with `extra="forbid"`, validated before any model loads or any
request is sent. Files may reference other files by relative path (a candidate names its workload, SLO
and hardware files); `load_config` resolves those paths against the referencing file.

Deliberately not here: anything that loads a model, touches the network, or measures (no side effects).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

BUILTIN_PREFIX = "builtin:"


class ConfigError(ValueError):
    """A config file is wrong; the message names the file, the field and the fix."""


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --------------------------------------------------------------------------- system under test


class ModelSpec(Frozen):
    """Where the weights come from: a local model directory (the same path a GPU deployment uses) or
    `builtin:<name>`, a small model the project builds itself from `inferopt/model/builtin/<name>.yaml`."""

    path: str = Field(description="model directory with config.json, or builtin:tiny-llama")
    tokenizer: str | None = Field(default=None, description="tokenizer directory; defaults to `path`")
    revision_note: str | None = None

    @field_validator("path")
    @classmethod
    def _path_exists(cls, value: str) -> str:
        if value.startswith(BUILTIN_PREFIX):
            from inferopt.model.builtin import builtin_names  # local: keeps this module import-light

            name = value[len(BUILTIN_PREFIX):]
            if name not in builtin_names():
                raise ValueError(
                    f"unknown builtin model {name!r}; fix: use one of "
                    + ", ".join(f"{BUILTIN_PREFIX}{n}" for n in builtin_names())
                )
            return value
        p = Path(value).expanduser()
        if not (p / "config.json").is_file():
            raise ValueError(
                f"model path {value!r} is not a model directory (no config.json there); fix: point it at a "
                f"local directory saved with save_pretrained, or use {BUILTIN_PREFIX}tiny-llama"
            )
        return str(p)

    @property
    def is_builtin(self) -> bool:
        return self.path.startswith(BUILTIN_PREFIX)


class BatchingKnobs(Frozen):
    """The scheduling knobs shared by the in-process engines (hf, fake)."""

    policy: Literal["static"] = Field(default="static", description="static: a batch runs until its longest member ends (B1)")
    max_batch_size: PositiveInt = 4
    batch_wait_ms: NonNegativeFloat = Field(default=5.0, description="B4: wait this long to fill a batch")
    max_queue: PositiveInt | None = Field(default=None, description="admission control: reject arrivals beyond this many waiting (None = unbounded)")


class HFSystem(Frozen):
    """Our in-process engine: a forward loop over transformers, with a queue and a batching policy."""

    engine: Literal["hf"] = "hf"
    name: str = "hf"
    model: ModelSpec
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    attn_implementation: Literal["eager", "sdpa", "flex_attention", "flash_attention_2"] = "sdpa"
    torch_threads: PositiveInt = 1
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    batching: BatchingKnobs = BatchingKnobs()
    stop_at_eos: bool = True


class FakeSystem(Frozen):
    """Scripted per-phase delays (seconds scale with the knobs below) for fast tests above the engine."""

    engine: Literal["fake"] = "fake"
    name: str = "fake"
    context_ms: NonNegativeFloat = 0.2
    prefill_ms_per_token: NonNegativeFloat = 0.02
    prefill_base_ms: NonNegativeFloat = 1.0
    decode_step_ms: NonNegativeFloat = 2.0
    decode_ms_per_seq: NonNegativeFloat = 0.1
    jitter_cv: NonNegativeFloat = Field(default=0.0, description="lognormal noise on every delay (coefficient of variation)")
    error_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    cached_prefix_fraction: float = Field(default=0.0, ge=0.0, le=1.0, description="share of prefix-group requests whose prefix counts as cached")
    vocab_size: PositiveInt = 288
    eos_token_id: int = 2
    seed: int = 0
    batching: BatchingKnobs = BatchingKnobs()


SystemConfig = Annotated[Union[HFSystem, FakeSystem], Field(discriminator="engine")]


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


ArrivalConfig = Annotated[Union[PoissonArrivals, GammaArrivals, ConstantArrivals], Field(discriminator="kind")]


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
    def _bounds(self) -> "LengthConfig":
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


class WorkloadConfig(Frozen):
    name: str = "workload"
    seed: int = 0
    num_requests: PositiveInt = 64
    arrival: ArrivalConfig
    lengths: LengthConfig = LengthConfig()
    prefix: PrefixConfig = PrefixConfig()
    tenants: tuple[TenantConfig, ...] = (TenantConfig(name="default"),)
    timeout_s: PositiveFloat = Field(default=60.0, description="per-request client timeout")

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
    repeats: PositiveInt = Field(default=3, description="trials per arm, interleaved in seeded random order")
    seed: int = 0
    bootstrap_samples: PositiveInt = 2000
    alpha: float = Field(default=0.05, gt=0.0, lt=0.5)
    num_requests: PositiveInt | None = Field(default=None, description="requests per trial (default: the workload's)")


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
    held_prompts: PositiveInt = 16
    prompt_len: PositiveInt = 48
    continuation_len: PositiveInt = 16
    min_token_agreement: float = Field(default=0.98, ge=0.0, le=1.0)
    max_mean_kl: NonNegativeFloat = 0.01
    seed: int = 1234


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

    @model_validator(mode="after")
    def _changes_apply(self) -> "CandidateConfig":
        if not self.changes:
            raise ValueError("changes is empty: a candidate must change at least one baseline field")
        apply_changes(self.baseline, self.changes)  # raises with the offending path
        return self

    @property
    def candidate_system(self) -> HFSystem | FakeSystem:
        return apply_changes(self.baseline, self.changes)


def apply_changes(system: HFSystem | FakeSystem, changes: dict[str, Any]) -> HFSystem | FakeSystem:
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


# --------------------------------------------------------------------------- loading

_KINDS: dict[str, type[BaseModel]] = {
    "candidate": CandidateConfig,
    "workload": WorkloadConfig,
    "slo": SLOConfig,
    "hardware": HardwareConfig,
}
# which fields of which models may be given as a relative file path instead of inline
_REF_FIELDS = {"baseline", "workload", "slo", "hardware"}


def _read_yaml(path: Path) -> Any:
    try:
        with path.open() as fh:
            return yaml.safe_load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found; fix: check the path (relative paths resolve against the referencing file)") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None


def _resolve_refs(data: Any, base: Path, seen: tuple[Path, ...]) -> Any:
    """Inline `field: some/file.yaml` references (only for _REF_FIELDS) and relative model paths."""
    if not isinstance(data, dict):
        return data
    out = {}
    for key, value in data.items():
        if key in _REF_FIELDS and isinstance(value, str) and value.endswith((".yaml", ".yml")):
            ref = (base / value).resolve()
            if ref in seen:
                raise ConfigError(f"{ref}: reference cycle via {key}")
            out[key] = _resolve_refs(_read_yaml(ref), ref.parent, seen + (ref,))
        elif key == "model" and isinstance(value, dict) and isinstance(value.get("path"), str):
            p = value["path"]
            if not p.startswith(BUILTIN_PREFIX) and not Path(p).expanduser().is_absolute():
                value = {**value, "path": str((base / p).resolve())}
            out[key] = value
        elif isinstance(value, dict):
            out[key] = _resolve_refs(value, base, seen)
        else:
            out[key] = value
    return out


def _fix_hint(err: dict[str, Any], model: type[BaseModel]) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        field = str(err["loc"][-1])
        parent = _model_at(model, err["loc"][:-1])
        options = sorted(parent.model_fields) if parent is not None else []
        close = difflib.get_close_matches(field, options, n=1)
        return (f"did you mean {close[0]!r}? " if close else "remove it; ") + (f"allowed: {', '.join(options)}" if options else "")
    if kind == "missing":
        return "add this field"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        bound = next(iter(ctx.values()), "")
        words = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}[kind]
        return f"use a value {words} {bound}"
    if kind == "literal_error":
        return f"use one of {ctx.get('expected', '')}"
    if kind == "union_tag_invalid":
        return f"set the tag to one of {ctx.get('expected_tags', '')}"
    return "fix the value as described"


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """Best-effort: the pydantic model class at a location (for listing allowed fields)."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        fields = getattr(current, "model_fields", None)
        if fields is None:
            # discriminated union member name (e.g. 'hf', 'poisson'): pick the member with that tag
            return None
        if part not in fields:
            return _union_member(current, part)
        current = _unwrap(fields[part].annotation)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    from typing import get_args

    args = [a for a in get_args(annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
    if args:
        return args if len(args) > 1 else args[0]
    for a in get_args(annotation):
        inner = _unwrap(a)
        if inner is not a:
            return inner
    return annotation


def _union_member(current: Any, tag: str) -> Any:
    if isinstance(current, list):
        for member in current:
            for f in ("engine", "kind"):
                field = member.model_fields.get(f)
                if field is not None and field.default == tag:
                    return member
    return None


def format_validation_error(exc: ValidationError, path: Path | str, model: type[BaseModel]) -> str:
    lines = [f"{path}: {exc.error_count()} problem(s) in this {model.__name__}:"]
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"] if p not in ("hf", "fake", "poisson", "gamma", "constant"))
        got = err.get("input")
        got_s = "" if isinstance(got, dict) or err["type"] == "missing" else f" (got {got!r})"
        lines.append(f"  - field `{loc or '<root>'}`: {err['msg']}{got_s}; fix: {_fix_hint(err, model)}")
    return "\n".join(lines)


def detect_kind(data: dict[str, Any]) -> str:
    if "baseline" in data or "changes" in data:
        return "candidate"
    if "arrival" in data or "num_requests" in data:
        return "workload"
    if "ttft_p99_ms" in data or "tpot_p95_ms" in data:
        return "slo"
    if "peak_flops_per_s" in data or "mem_bandwidth_bytes_per_s" in data:
        return "hardware"
    if "engine" in data:
        return "system"
    raise ConfigError("cannot tell what kind of config this is; fix: pass kind= (candidate, workload, slo, hardware, system)")


def load_config(path: str | Path, kind: str | None = None, **overrides: Any) -> Any:
    """Load and validate one YAML config file (candidate, workload, slo, hardware or system).

    `overrides` are dotted paths set after references are resolved, e.g.
    `load_config(p, **{"workload.num_requests": 8})`. Raises ConfigError naming the file, field and fix.
    """
    path = Path(path)
    raw = _read_yaml(path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(raw).__name__}")
    data = _resolve_refs(raw, path.resolve().parent, (path.resolve(),))
    for dotted, value in overrides.items():
        node = data
        parts = dotted.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    kind = kind or detect_kind(data)
    if kind == "system":
        from pydantic import TypeAdapter

        adapter = TypeAdapter(SystemConfig)
        try:
            return adapter.validate_python(data)
        except ValidationError as exc:
            member = HFSystem if data.get("engine") == "hf" else FakeSystem
            raise ConfigError(format_validation_error(exc, path, member)) from None
    if kind not in _KINDS:
        raise ConfigError(f"{path}: unknown kind {kind!r}; fix: one of {', '.join([*_KINDS, 'system'])}")
    model = _KINDS[kind]
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, path, model)) from None
