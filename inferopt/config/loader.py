"""`load_config(path)`: read a YAML config, resolve its file references, validate it, and on bad input
raise `ConfigError` naming the file, the field and the fix — before any model loads.

Files may reference other files by relative path (a candidate names its workload, SLO and hardware
files); references and relative model paths resolve against the referencing file.

Deliberately not here: the models themselves (`models.py`).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError

from inferopt.config.case import CaseConfig
from inferopt.config.models import (
    BUILTIN_PREFIX,
    CandidateConfig,
    ConfigError,
    FakeSystem,
    HardwareConfig,
    HFSystem,
    SLOConfig,
    SystemConfig,
    WorkloadConfig,
)

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
        raise ConfigError(
            f"{path}: file not found; fix: check the path (relative paths resolve against the referencing file)"
        ) from None
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
        elif key == "trace" and isinstance(value, dict) and isinstance(value.get("path"), str):
            p = value["path"]
            if not Path(p).expanduser().is_absolute():
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
        return (f"did you mean {close[0]!r}? " if close else "remove it; ") + (
            f"allowed: {', '.join(options)}" if options else ""
        )
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
    if "arrival" in data or "trace" in data or "num_requests" in data:
        return "workload"
    if "ttft_p99_ms" in data or "tpot_p95_ms" in data:
        return "slo"
    if "peak_flops_per_s" in data or "mem_bandwidth_bytes_per_s" in data:
        return "hardware"
    if "engine" in data:
        return "system"
    if "strategies" in data:
        return "case"
    raise ConfigError(
        "cannot tell what kind of config this is; fix: pass kind= (candidate, workload, slo, hardware, system, case)"
    )


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
        set_dotted(data, dotted, value)
    kind = kind or detect_kind(data)
    if kind == "system":
        adapter = TypeAdapter(SystemConfig)
        try:
            return adapter.validate_python(data)
        except ValidationError as exc:
            member = HFSystem if data.get("engine") == "hf" else FakeSystem
            raise ConfigError(format_validation_error(exc, path, member)) from None
    if kind == "case":  # the seed's case study (inferopt.config.case)
        try:
            return CaseConfig.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, path, CaseConfig)) from None
    if kind not in _KINDS:
        raise ConfigError(f"{path}: unknown kind {kind!r}; fix: one of {', '.join([*_KINDS, 'system', 'case'])}")
    model = _KINDS[kind]
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, path, model)) from None


def load_case(path: str | Path, **overrides: Any) -> CaseConfig:
    """Read and validate a case YAML (`load_config(path, kind="case")`); raises `ConfigError` naming the
    file, the field and the fix."""
    return load_config(path, kind="case", **overrides)


def set_dotted(data: dict[str, Any], dotted: str, value: Any, *, what: str | None = None) -> None:
    """`data["a"]["b"]["c"] = value` for `dotted` "a.b.c", in place. Missing sections are created, unless `what`
    names the document: then a part that is not a section raises ValueError naming it."""
    node = data
    parts = dotted.split(".")
    for part in parts[:-1]:
        if what is None:
            node = node.setdefault(part, {})
            continue
        if not isinstance(node.get(part), dict):
            raise ValueError(f"overrides: {dotted!r}: {part!r} is not a section of {what}")
        node = node[part]
    node[parts[-1]] = value
