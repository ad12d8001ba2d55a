"""Trace replay (V1): a recorded request log (JSONL or CSV) -> the same workload table `build.py` makes.

One request per row, in our native columns or a public format (Azure LLM inference, BurstGPT, Mooncake,
multi-turn sessions: `inferopt.config.trace_formats`), with `trace.columns` mapping a file's own names to our
fields; `load_trace` says what each field means. Every row is read and checked by
`inferopt.config.trace_rows` (the reader the pre-run check uses too); the first bad one raises `TraceError`
(a `ConfigError`) naming the file, the row (line number) and the field, with the fix.

Deliberately not here: synthesising arrivals or lengths (`arrivals.py`, `lengths.py`), session semantics
(`session_id`/`turn` are carried as extra columns, not acted on), and a gateway log without a header.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from inferopt.config import TraceConfig, WorkloadConfig
from inferopt.config.trace_rows import BYTES_PER_TOKEN, TraceError, read_trace_rows
from inferopt.workload.columns import WORKLOAD_COLUMNS

__all__ = ["BYTES_PER_TOKEN", "TraceError", "load_trace"]


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
      `prefix.prefix_len`, clipped to leave one unique token). Mooncake `hash_ids` set prefix_group and
      prefix_len (the longest leading block run another row shares). `session_id` and `turn`, when the trace
      has them, become the extra columns of those names (not in `WORKLOAD_COLUMNS`, not hashed). Other
      columns are ignored.

    Rows: the first `trace.limit` of the file (file order), then at most `num_requests` of them when given
    explicitly (this argument, or `num_requests` set in the config). Request ids are `<workload name>-<index>`
    as for synthetic loads (the server-side join keys on them)."""
    path = Path(cfg.path).expanduser()
    rows = [
        {
            "ts": r.ts,
            "input_len": r.input_len,
            "output_len": r.output_len,
            "prefix_group": r.prefix_group,
            "prefix_len": r.prefix_len,
            "tenant": r.tenant,
            "priority": r.priority,
            "session_id": r.session_id,
            "turn": r.turn,
        }
        for r in read_trace_rows(cfg, workload.prefix.prefix_len, count_tokens)
    ]
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
    _carry_sessions(table, frame)
    table.attrs["source"] = str(path)
    return table


def _carry_sessions(table: pd.DataFrame, frame: pd.DataFrame) -> None:
    """`session_id` and `turn` as extra columns, when the trace has them (in place)."""
    if frame["session_id"].notna().any():
        table["session_id"] = frame["session_id"].to_numpy()
        table["turn"] = frame["turn"].astype("Int64").to_numpy()
