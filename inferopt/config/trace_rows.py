"""A trace file's rows, read and checked: `read_trace_rows(cfg, default_prefix_len)` -> `TraceRow`s, or a
`TraceError` (a `ConfigError`) naming the file, the row (line number), the field and the fix. The pre-run
check and the replay (`inferopt.workload.trace.load_trace`) read through this one function, so a trace that
passes the check cannot fail in step 1.

JSONL (one object per line) or CSV (a header, then rows; empty cells are missing). Columns: `timestamp`
(s, finite; rows are replayed in its order, shifted to start at 0), `input_len` (tokens) or `prompt` (text,
for its length: `count_tokens`, else ceil(UTF-8 bytes / 4)), `output_len` (tokens); optional `tenant`,
`priority`, `prefix_group` (-1 = none), `prefix_len`. Other columns are ignored. Only the first
`trace.limit` rows are read. The replayed span (last - first timestamp, x `time_scale`) is at most a day.

Errors show a field's value cut short, never a whole line (a trace may hold prompts or secrets).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferopt.config.bounds import MAX_INT, MAX_SECONDS, MAX_TOKENS
from inferopt.config.models import TraceConfig
from inferopt.config.systems import ConfigError

BYTES_PER_TOKEN = 4
EPOCH_MS_FROM = 1e11  # as seconds: the year 5138; as epoch milliseconds: 1973 onwards
_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv"}


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


def _fail(path: Path, line: int, field: str, problem: str, fix: str) -> TraceError:
    return TraceError(f"{path}: row at line {line}, field {field!r}: {problem}; fix: {fix}")


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


def _format(path: Path, fmt: str) -> str:
    if fmt != "auto":
        return fmt
    suffix = path.suffix.lower()
    if suffix not in _FORMATS:
        raise TraceError(
            f"{path}: cannot tell the format from the suffix {suffix!r}; fix: name it .jsonl or .csv, "
            "or set trace.format"
        )
    return _FORMATS[suffix]


def _csv_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    lines = _lines(path)
    current = [0]

    def text() -> Iterator[str]:
        for n, line in lines:
            current[0] = n
            yield line

    reader = csv.DictReader(text())
    try:
        names = reader.fieldnames
        if not names or "timestamp" not in names:
            shown = [str(c)[:20] for c in (names or [])][:12]
            raise TraceError(
                f"{path}: the CSV header {shown} has no `timestamp` column; "
                "fix: the first line must name the columns, e.g. timestamp,input_len,output_len"
            )
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
    path: Path, line: int, row: dict[str, Any], field: str, *, integer: bool, lo: float | None, hi: float | None
) -> float | int | None:
    """The row's `field` as a checked number (None when absent)."""
    if field not in row:
        return None
    raw = row[field]
    bad = f"{_show(raw)} is not a number"
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise _fail(path, line, field, bad, f"write {field} as a number")
    try:
        value = float(raw)
    except (TypeError, ValueError, OverflowError):
        raise _fail(path, line, field, bad, f"write {field} as a number") from None
    if not math.isfinite(value):
        raise _fail(path, line, field, f"{_show(raw)} is not finite", f"write {field} as a finite number")
    if integer:
        if value != int(value):
            raise _fail(path, line, field, f"{_show(raw)} is not a whole number", f"{field}: write an integer")
        value = int(value)
    if lo is not None and value < lo:
        raise _fail(path, line, field, f"{_show(raw)} is below {lo:g}", f"{field} must be >= {lo:g}")
    if hi is not None and value > hi:
        raise _fail(path, line, field, f"{_show(raw)} is above {hi:g}", f"{field} must be <= {hi:g}")
    return value


def _required(path: Path, line: int, row: dict[str, Any], field: str, **kw: Any) -> Any:
    value = _number(path, line, row, field, **kw)
    if value is None:
        raise _fail(path, line, field, "missing", f"give every row a {field}")
    return value


def _input_len(path: Path, line: int, raw: dict[str, Any], count_tokens: Callable[[str], int] | None) -> int:
    if "input_len" in raw:
        return _required(path, line, raw, "input_len", integer=True, lo=1, hi=MAX_TOKENS)
    if "prompt" not in raw:
        raise _fail(path, line, "input_len", "missing (and no `prompt` text)", "give input_len (tokens) or prompt")
    text = raw["prompt"]
    if not isinstance(text, str) or not text:
        what = "empty" if text == "" else f"a {type(text).__name__}"
        raise _fail(path, line, "prompt", f"{what}, not a non-empty text", "give the prompt text, or input_len")
    n = int(count_tokens(text)) if count_tokens else math.ceil(len(text.encode()) / BYTES_PER_TOKEN)
    return max(n, 1)


def _row(
    path: Path, line: int, raw: dict[str, Any], default_prefix_len: int, count_tokens: Callable[[str], int] | None
) -> TraceRow:
    ts = _required(path, line, raw, "timestamp", integer=False, lo=None, hi=None)
    input_len = _input_len(path, line, raw, count_tokens)
    output_len = _required(path, line, raw, "output_len", integer=True, lo=1, hi=MAX_TOKENS)
    tenant = raw.get("tenant", "default")
    if not isinstance(tenant, str) or not tenant.strip() or len(tenant) > 200:
        raise _fail(path, line, "tenant", f"{_show(tenant)} is not a name", "write the tenant as a short string")
    priority = _number(path, line, raw, "priority", integer=True, lo=-(2**31), hi=2**31) or 0
    group = _number(path, line, raw, "prefix_group", integer=True, lo=-1, hi=MAX_INT)
    group = -1 if group is None else group
    plen = _number(path, line, raw, "prefix_len", integer=True, lo=0, hi=MAX_TOKENS)
    plen = 0 if group < 0 else (default_prefix_len if plen is None else plen)
    return TraceRow(line, ts, input_len, output_len, group, min(plen, input_len - 1), tenant, priority)


def read_trace_rows(
    cfg: TraceConfig, default_prefix_len: int, count_tokens: Callable[[str], int] | None = None
) -> tuple[TraceRow, ...]:
    """The first `cfg.limit` rows of the trace (file order), every one checked; see the module docstring."""
    path = Path(cfg.path).expanduser()
    if path.is_dir():
        raise TraceError(f"{path}: is a directory, not a trace file; fix: set trace.path to the .jsonl/.csv in it")
    if not path.is_file():
        raise TraceError(
            f"{path}: no such trace file; fix: correct trace.path (relative paths resolve against the config file)"
        )
    fmt = _format(path, cfg.format)
    rows: list[TraceRow] = []
    try:
        for line, raw in (_csv_rows if fmt == "csv" else _jsonl_rows)(path):
            if cfg.limit is not None and len(rows) >= cfg.limit:
                break
            rows.append(_row(path, line, raw, default_prefix_len, count_tokens))
    except OSError as exc:
        raise TraceError(
            f"{path}: cannot be read ({exc.strerror or type(exc).__name__}); fix: check trace.path"
        ) from None
    if not rows:
        raise TraceError(f"{path}: no requests in the trace; fix: add rows (timestamp, input_len, output_len)")
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
            "trace.time_scale: 0.001 to replay milliseconds"
        )
    span_s = (last.ts - first.ts) * time_scale
    if span_s > MAX_SECONDS:
        raise TraceError(
            f"{path}: field 'timestamp': the replay would last {span_s:.3g} s (rows at lines {first.line} and "
            f"{last.line}, x time_scale {time_scale:g}), more than {MAX_SECONDS:g} s; fix: write timestamps in "
            "seconds (not ms), one clock for every row, or shorten the trace (trace.limit, time_scale)"
        )
