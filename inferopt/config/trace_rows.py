"""A trace file's rows, read and checked: `read_trace_rows(cfg, default_prefix_len)` -> `TraceRow`s, or a
`TraceError` (a `ConfigError`) naming the file, the row (line number), the field (the file's column, and ours
when it is mapped) and the fix. The pre-run check and the replay (`inferopt.workload.trace.load_trace`) read
through this one function, so a trace that passes the check cannot fail in step 1.

JSONL (one object per line) or CSV (a header, then rows; empty cells are missing), in one of the formats of
`trace_formats` (native, azure, burstgpt, mooncake, sessions; `auto` tells them by header), with
`trace.columns` mapping our fields to the file's names. Our fields: `timestamp` (finite; unit per format or
`trace.timestamp_unit`), `input_len` or `prompt` (text, for its length), `output_len`; optional `tenant`,
`priority`, `prefix_group` (-1 = none), `prefix_len`, `session_id` + `turn`, `hash_ids` (block hashes: they
set prefix_group/prefix_len, `trace_formats.shared_prefixes`). Other columns are ignored. Only the first
`trace.limit` rows are read. The replayed span (last - first timestamp, x `time_scale`) is at most a day.

Errors show a field's value cut short, never a whole line (a trace may hold prompts or secrets).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from inferopt.config.bounds import MAX_INT, MAX_SECONDS, MAX_TOKENS
from inferopt.config.models import TraceConfig
from inferopt.config.systems import ConfigError
from inferopt.config.trace_formats import (
    FORMATS,
    SECONDS_PER_UNIT,
    FormatSpec,
    Syntax,
    detect_format,
    resolve_spec,
    shared_prefixes,
)

BYTES_PER_TOKEN = 4
EPOCH_MS_FROM = 1e11  # as seconds: the year 5138; as epoch milliseconds: 1973 onwards
_SUFFIXES: dict[str, Syntax] = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv"}
_NATIVE = FORMATS["native"]


class TraceError(ConfigError):
    """A trace file is unreadable or has a bad row; the message names the file, the row and the field."""


@dataclass(frozen=True)
class TraceRow:
    line: int
    ts: float
    input_len: int
    output_len: int
    prefix_group: int
    prefix_len: int
    tenant: str
    priority: int
    session_id: str | None = None
    turn: int | None = None


@dataclass(frozen=True)
class _Ctx:
    """What reading one row needs: the file, its format (with the mapping), and the defaults."""

    path: Path
    spec: FormatSpec
    default_prefix_len: int
    block_tokens: int
    count_tokens: Callable[[str], int] | None


def _fail(path: Path, line: int, field: str, problem: str, fix: str, spec: FormatSpec = _NATIVE) -> TraceError:
    return TraceError(f"{path}: row at line {line}, field {spec.label(field)}: {problem}; fix: {fix}")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 30 else text[:27] + "..."


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line, decoded as UTF-8 (a bad byte names its line)."""
    with path.open("rb") as fh:
        for n, raw in enumerate(fh, start=1):
            try:
                yield n, raw.decode("utf-8-sig" if n == 1 else "utf-8")
            except UnicodeDecodeError:
                raise _fail(path, n, "(line)", "not UTF-8 text", "save the trace as UTF-8") from None


def _syntax(path: Path, fmt: str) -> Syntax:
    """csv or jsonl: the format's own (azure, burstgpt: CSV; mooncake: JSONL), else the file's suffix."""
    if fmt in ("csv", "jsonl"):
        return fmt  # type: ignore[return-value]
    own = FORMATS[fmt].syntax if fmt in FORMATS else None
    if own is not None:
        return own
    suffix = path.suffix.lower()
    if suffix not in _SUFFIXES:
        raise TraceError(
            f"{path}: cannot tell the format from the suffix {suffix!r}; fix: name it .jsonl or .csv, "
            "or set trace.format"
        )
    return _SUFFIXES[suffix]


def _keys(path: Path, syntax: Syntax) -> list[str]:
    """The CSV header's names, or the first JSONL object's keys ([] when unreadable: the rows say why)."""
    for _, line in _lines(path):
        if syntax == "csv":
            return next(csv.reader([line]), [])
        if line.strip():
            try:
                obj = json.loads(line)
            except (ValueError, RecursionError):
                return []
            return list(obj) if isinstance(obj, dict) else []
    return []


def _spec(path: Path, cfg: TraceConfig, keys: list[str], syntax: Syntax) -> FormatSpec:
    fmt = "native" if cfg.format in ("csv", "jsonl") else cfg.format
    spec = resolve_spec(detect_format(keys) if fmt == "auto" else fmt, cfg.columns, cfg.timestamp_unit)
    if syntax == "csv":
        _check_header(path, keys, spec, cfg)
    return spec


def _check_header(path: Path, names: list[str], spec: FormatSpec, cfg: TraceConfig) -> None:
    """Every mapped column is in the header, and so are the columns the rows need."""
    shown = [str(c)[:20] for c in names][:12]
    for field, col in cfg.columns.items():
        if col not in names:
            raise TraceError(
                f"{path}: trace.columns.{field} maps to {col[:40]!r}, which the CSV header {shown} does not have; "
                f"fix: map {field} to one of the header's columns (names are case-sensitive)"
            )
    has = {f for f, c in spec.columns.items() if c in names}
    for field in (*spec.required, "input_len"):
        if field in has or (field == "input_len" and "prompt" in has):
            continue
        col = spec.columns.get(field, field)
        raise TraceError(
            f"{path}: the CSV header {shown} has no `{col}` column (for {field}, format {spec.name}); fix: the first "
            "line must name the columns, e.g. timestamp,input_len,output_len, or map yours: "
            f"trace.columns: {{{field}: <your column>}}"
        )


def _csv_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    lines = _lines(path)
    current = [0]

    def text() -> Iterator[str]:
        for n, line in lines:
            current[0] = n
            yield line

    reader = csv.DictReader(text())
    try:
        names = reader.fieldnames or []
        if len(set(names)) != len(names):
            twice = sorted({str(c)[:20] for c in names if names.count(c) > 1})
            raise _fail(path, 1, "(header)", f"names columns {twice} twice", "name each column once")
        for row in reader:
            if None in row:
                got = len(row[None]) + len(names)
                raise _fail(path, current[0], "(row)", f"{got} cells, the header has {len(names)}", "one per column")
            yield current[0], {k: v for k, v in row.items() if v not in (None, "")}
    except csv.Error as exc:
        raise _fail(path, current[0], "(line)", f"not valid CSV ({str(exc)[:60]})", "one row per line") from None


def _jsonl_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for line_no, line in _lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _fail(path, line_no, "(line)", f"not valid JSON ({exc.msg})", "one JSON object per line") from None
        except (ValueError, RecursionError) as exc:  # a 5000-digit number, nesting beyond the parser
            why = "nested too deeply" if isinstance(exc, RecursionError) else "a number too long to read"
            raise _fail(
                path, line_no, "(line)", f"not readable JSON ({why})", "one flat JSON object per line"
            ) from None
        if not isinstance(obj, dict):
            raise _fail(path, line_no, "(line)", f"a {type(obj).__name__}, not an object", "one JSON object per line")
        yield line_no, {k: v for k, v in obj.items() if v is not None}


def _number(
    ctx: _Ctx, line: int, row: dict[str, Any], field: str, *, integer: bool, lo: float | None, hi: float | None
) -> float | int | None:
    """The row's `field` as a checked number (None when absent)."""
    if field not in row:
        return None
    path, spec, raw = ctx.path, ctx.spec, row[field]
    bad = f"{_show(raw)} is not a number"
    fix = f"write {field} as a number" + (
        f" (in {spec.timestamp_unit}; set trace.timestamp_unit: s, ms, us or iso to match the file)"
        if field == "timestamp"
        else ""
    )
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise _fail(path, line, field, bad, fix, spec)
    try:
        value = float(raw)
    except (TypeError, ValueError, OverflowError):
        raise _fail(path, line, field, bad, fix, spec) from None
    if not math.isfinite(value):
        raise _fail(path, line, field, f"{_show(raw)} is not finite", f"write {field} as a finite number", spec)
    if integer:
        if value != int(value):
            raise _fail(path, line, field, f"{_show(raw)} is not a whole number", f"{field}: write an integer", spec)
        value = int(value)
    if lo is not None and value < lo:
        raise _fail(path, line, field, f"{_show(raw)} is below {lo:g}", f"{field} must be >= {lo:g}", spec)
    if hi is not None and value > hi:
        raise _fail(path, line, field, f"{_show(raw)} is above {hi:g}", f"{field} must be <= {hi:g}", spec)
    return value


def _required(ctx: _Ctx, line: int, row: dict[str, Any], field: str, **kw: Any) -> Any:
    value = _number(ctx, line, row, field, **kw)
    if value is None:
        raise _fail(ctx.path, line, field, "missing", f"give every row a {field}", ctx.spec)
    return value


def _timestamp_s(ctx: _Ctx, line: int, row: dict[str, Any]) -> float:
    """The row's timestamp in seconds: a number in the format's unit, or an ISO date-time (naive = UTC)."""
    unit = ctx.spec.timestamp_unit
    if unit != "iso" or "timestamp" not in row:
        return _required(ctx, line, row, "timestamp", integer=False, lo=None, hi=None) * SECONDS_PER_UNIT.get(unit, 1)
    raw = row["timestamp"]
    try:
        when = datetime.fromisoformat(raw.strip()) if isinstance(raw, str) else None
    except ValueError:
        when = None
    if when is None:
        raise _fail(
            ctx.path,
            line,
            "timestamp",
            f"{_show(raw)} is not an ISO date-time",
            "write it as YYYY-MM-DD HH:MM:SS[.ffffff][+HH:MM], or set trace.timestamp_unit: s/ms/us for numbers",
            ctx.spec,
        )
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()


def _input_len(ctx: _Ctx, line: int, raw: dict[str, Any]) -> int:
    if "input_len" in raw:
        return _required(ctx, line, raw, "input_len", integer=True, lo=1, hi=MAX_TOKENS)
    if "prompt" not in raw:
        raise _fail(
            ctx.path, line, "input_len", "missing (and no `prompt` text)", "give input_len (tokens) or prompt", ctx.spec
        )
    text = raw["prompt"]
    if not isinstance(text, str) or not text:
        what = "empty" if text == "" else f"a {type(text).__name__}"
        raise _fail(
            ctx.path, line, "prompt", f"{what}, not a non-empty text", "give the prompt text, or input_len", ctx.spec
        )
    n = int(ctx.count_tokens(text)) if ctx.count_tokens else math.ceil(len(text.encode()) / BYTES_PER_TOKEN)
    return max(n, 1)


def _output_len(ctx: _Ctx, line: int, raw: dict[str, Any]) -> int:
    if ctx.spec.name == "burstgpt" and _number(ctx, line, raw, "output_len", integer=False, lo=None, hi=None) == 0:
        raise _fail(
            ctx.path,
            line,
            "output_len",
            "0 response tokens (BurstGPT's mark of a failed request)",
            "replay BurstGPT_without_fails_*.csv, or drop the failed rows",
            ctx.spec,
        )
    return _required(ctx, line, raw, "output_len", integer=True, lo=1, hi=MAX_TOKENS)


def _name(ctx: _Ctx, line: int, raw: dict[str, Any], field: str, default: str | None) -> str | None:
    """A short name (tenant, session_id): text, or a whole number written as one (ids often are)."""
    value = raw.get(field, default)
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if value is not None and (not isinstance(value, str) or not value.strip() or len(value) > 200):
        raise _fail(
            ctx.path, line, field, f"{_show(value)} is not a name", f"write the {field} as a short string", ctx.spec
        )
    return value


def _session(ctx: _Ctx, line: int, raw: dict[str, Any]) -> tuple[str | None, int | None]:
    session = _name(ctx, line, raw, "session_id", None)
    turn = _number(ctx, line, raw, "turn", integer=True, lo=0, hi=MAX_INT)
    for field, value in (("session_id", session), ("turn", turn)):
        if value is None and (field in ctx.spec.required or (session, turn) != (None, None)):
            other = "turn" if field == "session_id" else "session_id"
            raise _fail(
                ctx.path,
                line,
                field,
                "missing",
                f"give every row of a session trace a {field} (with {other})",
                ctx.spec,
            )
    return session, turn


def _hash_ids(ctx: _Ctx, line: int, raw: dict[str, Any], input_len: int) -> tuple[int, ...] | None:
    """The row's block hashes (Mooncake `hash_ids`; in a CSV a JSON list), checked against its input length."""
    if "hash_ids" not in raw:
        return None
    value = raw["hash_ids"]
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            value = None
    fix = "write hash_ids as a list of block ids (non-negative integers), e.g. [0, 1, 2]"
    if not isinstance(value, list) or not value:
        raise _fail(ctx.path, line, "hash_ids", f"{_show(raw['hash_ids'])} is not a non-empty list", fix, ctx.spec)
    bad = [h for h in value if isinstance(h, bool) or not isinstance(h, int) or not 0 <= h <= MAX_INT]
    if bad:
        raise _fail(ctx.path, line, "hash_ids", f"holds {_show(bad[0])}, not a block id", fix, ctx.spec)
    most = math.ceil(input_len / ctx.block_tokens)
    if len(value) > most:
        raise _fail(
            ctx.path,
            line,
            "hash_ids",
            f"{len(value)} blocks of {ctx.block_tokens} tokens, more than input_len {input_len} fills (at most {most})",
            "set trace.block_tokens to the trace's block size, or correct the row's hash_ids / input_len",
            ctx.spec,
        )
    return tuple(value)


def _row(ctx: _Ctx, line: int, raw: dict[str, Any]) -> tuple[TraceRow, tuple[int, ...] | None]:
    """One checked row (and its block hashes), read through the format's column mapping."""
    r = {field: raw[col] for field, col in ctx.spec.columns.items() if col in raw}
    ts = _timestamp_s(ctx, line, r)
    input_len = _input_len(ctx, line, r)
    output_len = _output_len(ctx, line, r)
    tenant = _name(ctx, line, r, "tenant", "default")
    priority = _number(ctx, line, r, "priority", integer=True, lo=-(2**31), hi=2**31) or 0
    group = _number(ctx, line, r, "prefix_group", integer=True, lo=-1, hi=MAX_INT)
    group = -1 if group is None else group
    plen = _number(ctx, line, r, "prefix_len", integer=True, lo=0, hi=MAX_TOKENS)
    plen = 0 if group < 0 else (ctx.default_prefix_len if plen is None else plen)
    session, turn = _session(ctx, line, r)
    row = TraceRow(
        line, ts, input_len, output_len, group, min(plen, input_len - 1), str(tenant), priority, session, turn
    )
    return row, _hash_ids(ctx, line, r, input_len)


def _checked_path(cfg: TraceConfig) -> Path:
    path = Path(cfg.path).expanduser()
    if path.is_dir():
        raise TraceError(f"{path}: is a directory, not a trace file; fix: set trace.path to the .jsonl/.csv in it")
    if not path.is_file():
        raise TraceError(
            f"{path}: no such trace file; fix: correct trace.path (relative paths resolve against the config file)"
        )
    return path


def _read(
    path: Path, cfg: TraceConfig, default_prefix_len: int, count_tokens: Callable[[str], int] | None
) -> tuple[list[TraceRow], list[tuple[int, ...] | None], set[str]]:
    """The rows (up to `cfg.limit`), their block hashes, and every column name seen."""
    syntax = _syntax(path, cfg.format)
    ctx = _Ctx(path, _spec(path, cfg, _keys(path, syntax), syntax), default_prefix_len, cfg.block_tokens, count_tokens)
    rows: list[TraceRow] = []
    hashes: list[tuple[int, ...] | None] = []
    seen: set[str] = set()
    for line, raw in (_csv_rows if syntax == "csv" else _jsonl_rows)(path):
        if cfg.limit is not None and len(rows) >= cfg.limit:
            break
        seen.update(raw)
        row, h = _row(ctx, line, raw)
        rows.append(row)
        hashes.append(h)
    return rows, hashes, seen


def _with_block_prefixes(rows: list[TraceRow], hashes: list[tuple[int, ...] | None], block: int) -> list[TraceRow]:
    """Rows that carry hash_ids take their prefix group and length from them (they win over prefix_* columns)."""
    out = []
    for row, derived in zip(rows, shared_prefixes(hashes, block), strict=True):
        if derived is not None:
            group, plen = derived
            row = dataclasses.replace(row, prefix_group=group, prefix_len=min(plen, row.input_len - 1))
        out.append(row)
    return out


def _check_sessions(path: Path, rows: list[TraceRow]) -> None:
    first: dict[tuple[str, int], int] = {}
    for r in rows:
        if r.session_id is None or r.turn is None:
            continue
        key = (r.session_id, r.turn)
        if key in first:
            raise _fail(
                path,
                r.line,
                "turn",
                f"session {_show(r.session_id)} has turn {r.turn} twice (first at line {first[key]})",
                "give each turn of a session its own index",
            )
        first[key] = r.line


def read_trace_rows(
    cfg: TraceConfig, default_prefix_len: int, count_tokens: Callable[[str], int] | None = None
) -> tuple[TraceRow, ...]:
    """The first `cfg.limit` rows of the trace (file order), every one checked; see the module docstring."""
    path = _checked_path(cfg)
    try:
        rows, hashes, seen = _read(path, cfg, default_prefix_len, count_tokens)
    except OSError as exc:
        raise TraceError(
            f"{path}: cannot be read ({exc.strerror or type(exc).__name__}); fix: check trace.path"
        ) from None
    if not rows:
        raise TraceError(f"{path}: no requests in the trace; fix: add rows (timestamp, input_len, output_len)")
    for field, col in cfg.columns.items():
        if col not in seen:
            raise TraceError(
                f"{path}: trace.columns.{field} maps to {col[:40]!r}, which no row has; fix: map {field} to the "
                "name the rows use (case-sensitive), or drop the mapping"
            )
    _check_sessions(path, rows)
    rows = _with_block_prefixes(rows, hashes, cfg.block_tokens)
    check_replay_span(path, rows, cfg.time_scale)
    return tuple(rows)


def check_replay_span(path: Path | str, rows: tuple[TraceRow, ...] | list[TraceRow], time_scale: float) -> None:
    """Refuse timestamps that read as epoch milliseconds, and a replay longer than a day (ms read as s, or
    one stray epoch among offsets)."""
    first = min(rows, key=lambda r: r.ts)
    last = max(rows, key=lambda r: r.ts)
    if first.ts >= EPOCH_MS_FROM and time_scale >= 0.01:
        raise TraceError(
            f"{path}: row at line {first.line}, field 'timestamp': every timestamp is >= {EPOCH_MS_FROM:g}, which "
            "reads as epoch milliseconds (as seconds, beyond the year 5000); fix: write seconds, or set "
            "trace.timestamp_unit: ms (or trace.time_scale: 0.001) to replay milliseconds"
        )
    span_s = (last.ts - first.ts) * time_scale
    if span_s > MAX_SECONDS:
        raise TraceError(
            f"{path}: field 'timestamp': the replay would last {span_s:.3g} s (rows at lines {first.line} and "
            f"{last.line}, x time_scale {time_scale:g}), more than {MAX_SECONDS:g} s; fix: write timestamps in "
            "seconds (not ms), one clock for every row, or shorten the trace (trace.limit, time_scale)"
        )
