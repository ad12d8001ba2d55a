"""Trace replay (V1): a recorded request log (JSONL or CSV) -> the same workload table `build.py` makes.

One request per row (JSONL: one JSON object per line; CSV: a header line, then rows; empty cells are missing
values): `timestamp` (seconds), `input_len` or `prompt` (text, used only for its length), `output_len`, and
optional `tenant`, `priority`, `prefix_group`, `prefix_len`; `load_trace` says what each column means. Every
row is checked before anything else runs; the first bad one raises `TraceError` naming the file, the row (line
number) and the field, with the fix.

Deliberately not here: synthesising arrivals or lengths (`arrivals.py`, `lengths.py`) and reading the traces of
a particular gateway's log format (convert them to these columns first).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from inferopt.config import TraceConfig, WorkloadConfig
from inferopt.workload.columns import WORKLOAD_COLUMNS

BYTES_PER_TOKEN = 4


class TraceError(ValueError):
    """A trace file is unreadable or has a bad row; the message names the file, the row and the field."""


def _fail(path: Path, line: int, field: str, problem: str, fix: str) -> TraceError:
    return TraceError(f"{path}: row at line {line}, field {field!r}: {problem}; fix: {fix}")


def _rows(path: Path, fmt: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, raw row) for every data row."""
    if fmt == "auto":
        suffix = path.suffix.lower()
        fmt = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv"}.get(suffix, "")
        if not fmt:
            raise TraceError(
                f"{path}: cannot tell the format from the suffix {suffix!r}; fix: name it .jsonl or .csv, "
                "or set trace.format"
            )
    with path.open(encoding="utf-8", newline="") as fh:
        if fmt == "csv":
            reader = csv.DictReader(fh)
            if not reader.fieldnames or "timestamp" not in reader.fieldnames:
                raise TraceError(
                    f"{path}: the CSV header {reader.fieldnames} has no `timestamp` column; "
                    "fix: the first line must name the columns, e.g. timestamp,input_len,output_len"
                )
            for row in reader:
                if None in row:
                    raise _fail(
                        path,
                        reader.line_num,
                        "(row)",
                        f"{len(row[None]) + len(reader.fieldnames)} cells, the header has {len(reader.fieldnames)}",
                        "one cell per header column",
                    )
                yield reader.line_num, {k: v for k, v in row.items() if v not in (None, "")}
            return
        for line_no, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise _fail(
                    path, line_no, "(line)", f"not valid JSON ({exc.msg})", "one JSON object per line"
                ) from None
            if not isinstance(obj, dict):
                raise _fail(
                    path, line_no, "(line)", f"a {type(obj).__name__}, not an object", "one JSON object per line"
                )
            yield line_no, {k: v for k, v in obj.items() if v is not None}


def _number(
    path: Path,
    line: int,
    row: dict[str, Any],
    field: str,
    *,
    integer: bool,
    minimum: float | None,
    default: Any = None,
    required: bool = False,
) -> Any:
    if field not in row:
        if required:
            raise _fail(path, line, field, "missing", f"give every row a {field}")
        return default
    raw = row[field]
    if isinstance(raw, bool):
        raise _fail(path, line, field, f"{raw!r} is not a number", f"write {field} as a number")
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise _fail(path, line, field, f"{raw!r} is not a number", f"write {field} as a number") from None
    if not math.isfinite(value):
        raise _fail(path, line, field, f"{raw!r} is not finite", f"write {field} as a finite number")
    if integer:
        if value != int(value):
            raise _fail(path, line, field, f"{raw!r} is not a whole number", f"{field} counts tokens: write an integer")
        value = int(value)
    if minimum is not None and value < minimum:
        raise _fail(path, line, field, f"{raw!r} is below {minimum:g}", f"{field} must be >= {minimum:g}")
    return value


def load_trace(
    cfg: TraceConfig,
    workload: WorkloadConfig,
    num_requests: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
) -> pd.DataFrame:
    """The workload table (columns of `WORKLOAD_COLUMNS`) for a trace.

    - `timestamp` (required, seconds): absolute epoch or relative; rows are ordered by it (stable) and shifted
      so the first is 0, then gaps are multiplied by `trace.time_scale`.
    - `input_len` (tokens) — or `prompt` (text), used only for its length: `count_tokens(prompt)` when given
      (e.g. the served model's tokenizer), else `ceil(UTF-8 bytes / 4)`, the usual ~4 bytes per token of BPE
      tokenizers on English text. The text is not sent: like every workload, prompts are synthetic token ids
      of that length (`prompt_token_ids`). When both are present `input_len` wins.
    - `output_len` (required, tokens): the generation budget (`max_tokens`); the model may stop earlier.
    - optional `tenant` (default `default`), `priority` (int, default 0, lower runs first), `prefix_group`
      (int, -1 = none) and `prefix_len` (tokens shared in the group; default the workload's
      `prefix.prefix_len`, clipped to leave one unique token). Other columns are ignored.

    Rows: the first `trace.limit` of the file (file order), then at most `num_requests` of them when given
    explicitly (this argument, or `num_requests` set in the config). Request ids are `<workload name>-<index>`
    as for synthetic loads (the server-side join keys on them)."""
    path = Path(cfg.path).expanduser()
    if not path.is_file():
        raise TraceError(
            f"{path}: no such trace file; fix: correct trace.path (relative paths resolve against the config file)"
        )
    rows: list[dict[str, Any]] = []
    for line, raw in _rows(path, cfg.format):
        if cfg.limit is not None and len(rows) >= cfg.limit:
            break
        ts = _number(path, line, raw, "timestamp", integer=False, minimum=None, required=True)
        if "input_len" in raw:
            input_len = _number(path, line, raw, "input_len", integer=True, minimum=1)
        elif "prompt" in raw:
            if not isinstance(raw["prompt"], str) or not raw["prompt"]:
                raise _fail(
                    path,
                    line,
                    "prompt",
                    f"{raw['prompt']!r} is not a non-empty text",
                    "give the prompt text, or input_len",
                )
            text = raw["prompt"]
            input_len = int(count_tokens(text)) if count_tokens else math.ceil(len(text.encode()) / BYTES_PER_TOKEN)
            input_len = max(input_len, 1)
        else:
            raise _fail(
                path, line, "input_len", "missing (and no `prompt` text)", "give input_len (tokens) or prompt (text)"
            )
        output_len = _number(path, line, raw, "output_len", integer=True, minimum=1, required=True)
        tenant = raw.get("tenant", "default")
        if not isinstance(tenant, str) or not tenant.strip():
            raise _fail(path, line, "tenant", f"{tenant!r} is not a name", "write the tenant as a non-empty string")
        priority = _number(path, line, raw, "priority", integer=True, minimum=None, default=0)
        group = _number(path, line, raw, "prefix_group", integer=True, minimum=-1, default=-1)
        plen = _number(
            path,
            line,
            raw,
            "prefix_len",
            integer=True,
            minimum=0,
            default=workload.prefix.prefix_len if group >= 0 else 0,
        )
        if group < 0:
            plen = 0
        rows.append(
            {
                "ts": ts,
                "input_len": input_len,
                "output_len": output_len,
                "prefix_group": group,
                "prefix_len": min(plen, input_len - 1),
                "tenant": tenant,
                "priority": priority,
            }
        )
    if not rows:
        raise TraceError(f"{path}: no requests in the trace; fix: add rows (timestamp, input_len, output_len)")
    cap = (
        num_requests
        if num_requests is not None
        else (workload.num_requests if "num_requests" in workload.model_fields_set else None)
    )
    if cap is not None:
        rows = rows[:cap]
    frame = pd.DataFrame(rows)
    order = np.argsort(frame["ts"].to_numpy(dtype=float), kind="stable")
    frame = frame.iloc[order].reset_index(drop=True)
    ts = frame["ts"].to_numpy(dtype=float)
    n = len(frame)
    table = pd.DataFrame(
        {
            "request_id": [f"{workload.name}-{i:05d}" for i in range(n)],
            "arrival_offset_s": (ts - ts[0]) * cfg.time_scale,
            "input_len": frame["input_len"].astype(int),
            "output_len": frame["output_len"].astype(int),
            "prefix_group": frame["prefix_group"].astype(int),
            "prefix_len": frame["prefix_len"].astype(int),
            "tenant": frame["tenant"].astype(str),
            "priority": frame["priority"].astype(int),
        },
        columns=list(WORKLOAD_COLUMNS),
    )
    table.attrs["source"] = str(path)
    return table
