"""`load_config(path)`: read a YAML config, resolve its file references, validate it, and on bad input
raise `ConfigError` naming the file, the field and the fix — before any model loads.

Files may reference other files by relative path (a candidate names its workload, SLO and hardware
files); references and relative model, tokenizer and trace paths resolve against the referencing file. An
error in a referenced file, or in a field set by `--set`, says so (`Provenance`). YAML is read strictly
(`yaml_io.py`: duplicate keys, alias bombs, bad encodings refused).

Deliberately not here: the models themselves (`models.py`), checks of what a run needs beyond the fields
(the trace's rows, interpreters, the device: `precheck.py`).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel, TypeAdapter, ValidationError

from inferopt.config.case import CaseConfig
from inferopt.config.models import (
    BUILTIN_PREFIX,
    CandidateConfig,
    ConfigError,
    FakeSystem,
    HardwareConfig,
    HFSystem,
    OpenAISystem,
    SLOConfig,
    SystemConfig,
    VLLMSystem,
    WorkloadConfig,
)
from inferopt.config.redact import SECRET_CONTAINERS, is_secret_name
from inferopt.config.yaml_io import read_yaml

_KINDS: dict[str, type[BaseModel]] = {
    "candidate": CandidateConfig,
    "workload": WorkloadConfig,
    "slo": SLOConfig,
    "hardware": HardwareConfig,
}
# which fields of which models may be given as a relative file path instead of inline
_REF_FIELDS = {"baseline", "workload", "slo", "hardware"}
_UNION_TAGS = ("hf", "fake", "vllm", "openai", "poisson", "gamma", "constant")
_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z0-9_-]+)*$")

Loc = tuple[str, ...]


@dataclass(frozen=True)
class Provenance:
    """Which file each part of a loaded config came from: `refs` maps a field path (e.g. ("workload",)) to
    the file it was read from; `overrides` the paths set by `--set`/overrides; the rest is `root`'s."""

    root: Path
    refs: dict[Loc, Path] = field(default_factory=dict)
    overrides: frozenset[Loc] = frozenset()

    def file_for(self, loc: Loc) -> tuple[Path, Loc]:
        """The file holding field `loc`, and the field's path inside that file."""
        best: Loc = ()
        for prefix in self.refs:
            if loc[: len(prefix)] == prefix and len(prefix) > len(best):
                best = prefix
        return (self.refs[best], loc[len(best) :]) if best else (self.root, loc)

    def where(self, loc: Loc) -> str:
        """' (in <file>, as `x.y`)' for a field of a referenced file, ' (set by --set a.b)' for an override
        (a file given by `--set baseline=x.yaml` counts as the file), '' for the root file's own fields."""
        n_set = max((n for n in range(1, len(loc) + 1) if loc[:n] in self.overrides), default=0)
        n_ref = max((len(p) for p in self.refs if loc[: len(p)] == p), default=0)
        if n_set > n_ref:
            return f" (set by --set {'.'.join(loc[:n_set])})"
        below = sorted(".".join(o) for o in self.overrides if o[: len(loc)] == loc and len(o) > len(loc))
        also = f", with --set {', '.join(below)}" if below else ""
        path, inner = self.file_for(loc)
        if path == self.root:
            return f" ({also[2:]})" if also else ""
        return f" (in {path}" + (f", as `{'.'.join(inner)}`" if inner else "") + f"{also})"


def _read_ref(ref: Path, referrer: Path | str, loc: Loc) -> dict[str, Any]:
    where = f"(referenced by {referrer}, field `{'.'.join(loc)}`)"
    try:
        data = read_yaml(ref)
    except ConfigError as exc:
        raise ConfigError(f"{exc} {where}") from None
    if not isinstance(data, dict):
        what = "is empty" if data is None else f"holds a {type(data).__name__}, not a mapping of fields"
        raise ConfigError(f"{ref}: {what} {where}; fix: write the fields of `{loc[-1]}` in it, one per line")
    return data


def _resolve_path(value: dict[str, Any], key: str, base: Path) -> dict[str, Any]:
    p = value.get(key)
    if isinstance(p, str) and p and not p.startswith(BUILTIN_PREFIX) and not Path(p).expanduser().is_absolute():
        return {**value, key: str((base / p).resolve())}
    return value


def _resolve_refs(
    data: Any, base: Path, seen: tuple[Path, ...], loc: Loc = (), refs: dict[Loc, Path] | None = None
) -> Any:
    """Inline `field: some/file.yaml` references (only for _REF_FIELDS) and relative model/trace paths;
    `refs` collects which field path came from which file."""
    if not isinstance(data, dict):
        return data
    refs = {} if refs is None else refs
    out = {}
    for key, value in data.items():
        here = (*loc, str(key))
        if key in _REF_FIELDS and isinstance(value, str) and value.endswith((".yaml", ".yml")):
            ref = (base / value).expanduser().resolve()
            if ref in seen:
                raise ConfigError(f"{ref}: reference cycle via {key}; fix: a file may not reference itself")
            refs[here] = ref
            out[key] = _resolve_refs(_read_ref(ref, seen[-1], here), ref.parent, seen + (ref,), here, refs)
        elif key == "model" and isinstance(value, dict):
            out[key] = _resolve_path(_resolve_path(value, "path", base), "tokenizer", base)
        elif key == "trace" and isinstance(value, dict):
            out[key] = _resolve_path(value, "path", base)
        elif isinstance(value, dict):
            out[key] = _resolve_refs(value, base, seen, here, refs)
        else:
            out[key] = value
    return out


def _apply_overrides(data: dict[str, Any], overrides: dict[str, Any], refs: dict[Loc, Path]) -> frozenset[Loc]:
    """Set each dotted override in `data`; a malformed path or one through a non-section is a ConfigError.
    A `.yaml` value for a reference field (`--set baseline=configs/systems/x.yaml`) is read (relative to the
    working directory) as the same field in a file would be."""
    done: set[Loc] = set()
    for dotted, value in overrides.items():
        if not isinstance(dotted, str) or not _DOTTED.match(dotted):
            raise ConfigError(
                f"--set {str(dotted)[:60]!r}: not a dotted field path; fix: e.g. --set workload.num_requests=16"
            )
        here = tuple(dotted.split("."))
        if here[-1] in _REF_FIELDS and isinstance(value, str) and value.endswith((".yaml", ".yml")):
            ref = Path(value).expanduser().resolve()
            refs[here] = ref
            value = _resolve_refs(_read_ref(ref, f"--set {dotted}", here), ref.parent, (ref,), here, refs)
        try:
            set_dotted(data, dotted, value)
        except ValueError as exc:
            raise ConfigError(f"--set {dotted}: {exc}; fix: set that field itself, or a field of a section") from None
        done.add(here)
    return frozenset(done)


def _fix_hint(err: dict[str, Any], model: type[BaseModel]) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        field = str(err["loc"][-1])
        parent = _model_at(model, err["loc"][:-1])
        options = sorted(parent.model_fields) if parent is not None else []
        close = difflib.get_close_matches(field, options, n=1)
        return (f"did you mean {close[0]!r}? " if close else "remove it or correct its name") + (
            f"{'; ' if not close else ''}allowed: {', '.join(options)}" if options else ""
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
    return _TYPE_HINTS.get(kind, "fix the value as described")


_TYPE_HINTS = {
    "finite_number": "use a finite number (not .inf or .nan)",
    "float_parsing": "write a number",
    "float_type": "write a number",
    "int_parsing": "write a whole number",
    "int_type": "write a whole number",
    "int_from_float": "write a whole number (no fraction)",
    "bool_parsing": "write true or false",
    "bool_type": "write true or false",
    "string_type": "write text (quote it if YAML reads it as something else)",
    "dict_type": "give a mapping of fields, or the path of a .yaml file that holds them",
    "model_type": "give a mapping of fields, or the path of a .yaml file that holds them",
    "model_attributes_type": "give a mapping of fields, or the path of a .yaml file that holds them",
    "list_type": "give a list, e.g. [a, b]",
    "tuple_type": "give a list, e.g. [a, b]",
    "union_tag_not_found": "add the tag field (engine: or kind:)",
    "dict_attributes_type": "give a mapping",
}


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """Best-effort: the pydantic model class at a location (for listing allowed fields); a discriminated
    union's member is picked by the tag pydantic puts in the location (e.g. 'fake', 'poisson')."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        if isinstance(current, list):
            current = _union_member(current, part)
            continue
        fields = getattr(current, "model_fields", None)
        if fields is None or part not in fields:
            return None
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


def _shown(got: Any, loc: Loc) -> str:
    """The offending value as the message shows it: hidden for a secret, cut short otherwise."""
    if any(p in SECRET_CONTAINERS for p in loc) or (loc and is_secret_name(loc[-1])):
        return " (value hidden: a secret)"
    text = repr(got)
    return f" (got {text if len(text) <= 60 else text[:57] + '...'})"


def format_validation_error(
    exc: ValidationError, path: Path | str, model: type[BaseModel], provenance: Provenance | None = None
) -> str:
    """One line per problem: the field (dotted), the file that holds it when it is not `path`, what is
    wrong, the value (never a secret's) and the fix."""
    lines = [f"{path}: {exc.error_count()} problem(s) in this {model.__name__}:"]
    for err in exc.errors():
        parts = tuple(str(p) for p in err["loc"] if p not in _UNION_TAGS)
        loc = ".".join(parts)
        got = err.get("input")
        got_s = "" if isinstance(got, dict) or err["type"] == "missing" else _shown(got, parts)
        where = provenance.where(parts) if provenance is not None else ""
        msg = err["msg"].removeprefix("Value error, ")
        fix = "" if "fix:" in msg else f"; fix: {_fix_hint(err, model)}"
        lines.append(f"  - field `{loc or '<root>'}`{where}: {msg}{got_s}{fix}")
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
    return load_with_provenance(path, kind, overrides)[0]


def load_with_provenance(
    path: str | Path, kind: str | None = None, overrides: dict[str, Any] | None = None
) -> tuple[Any, Provenance]:
    """`load_config`, and which file each field came from (for messages that name the file at fault)."""
    path = Path(path)
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        what = "is empty" if raw is None else f"holds a {type(raw).__name__} at the top level"
        raise ConfigError(f"{path}: {what}, not a mapping of fields; fix: write the config's fields, one per line")
    refs: dict[Loc, Path] = {}
    data = _resolve_refs(raw, path.resolve().parent, (path.resolve(),), (), refs)
    prov = Provenance(root=path, refs=refs, overrides=_apply_overrides(data, overrides or {}, refs))
    kind = kind or detect_kind(data)
    return _validate(data, kind, path, prov), prov


def _validate(data: dict[str, Any], kind: str, path: Path, prov: Provenance) -> Any:
    if kind == "system":
        adapter = TypeAdapter(SystemConfig)
        try:
            return adapter.validate_python(data)
        except ValidationError as exc:
            engines = {"hf": HFSystem, "vllm": VLLMSystem, "openai": OpenAISystem}
            member = engines.get(str(data.get("engine")), FakeSystem)
            raise ConfigError(format_validation_error(exc, path, member, prov)) from None
    if kind == "case":  # the seed's case study (inferopt.config.case)
        try:
            return CaseConfig.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(format_validation_error(exc, path, CaseConfig, prov)) from None
    if kind not in _KINDS:
        raise ConfigError(f"{path}: unknown kind {kind!r}; fix: one of {', '.join([*_KINDS, 'system', 'case'])}")
    model = _KINDS[kind]
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, path, model, prov)) from None


def load_case(path: str | Path, **overrides: Any) -> CaseConfig:
    """Read and validate a case YAML (`load_config(path, kind="case")`); raises `ConfigError` naming the
    file, the field and the fix."""
    return load_config(path, kind="case", **overrides)


def set_dotted(data: dict[str, Any], dotted: str, value: Any, *, what: str | None = None) -> None:
    """`data["a"]["b"]["c"] = value` for `dotted` "a.b.c", in place. Missing sections are created, unless `what`
    names the document: then a part that is not a section raises ValueError naming it. Without `what`, a part
    that exists but is not a section raises ValueError too."""
    node = data
    parts = dotted.split(".")
    for i, part in enumerate(parts[:-1]):
        if what is None:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"`{'.'.join(parts[: i + 1])}` is a {type(node).__name__}, not a section with fields")
            continue
        if not isinstance(node.get(part), dict):
            raise ValueError(f"overrides: {dotted!r}: {part!r} is not a section of {what}")
        node = node[part]
    node[parts[-1]] = value
