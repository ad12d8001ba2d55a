"""The trace formats a replay reads, as data: which column holds each of our fields, the timestamp's unit,
the file syntax, and how `auto` tells them apart by header. `resolve_spec` merges a format with the config's
`trace.columns` mapping; `shared_prefixes` turns Mooncake `hash_ids` into prefix groups and lengths.

Followed (headers as published): Azure LLM inference traces 2023/2024 (Azure/AzurePublicDataset,
`AzureLLMInferenceTrace_*.csv`: `TIMESTAMP,ContextTokens,GeneratedTokens`, an ISO date-time with up to 7
fractional digits, 2024 with a `+00:00` offset); BurstGPT (HPMLL/BurstGPT `BurstGPT_*.csv`: `Timestamp,Model,
Request tokens,Response tokens,Total tokens,Log Type`, seconds from the trace's start; failed rows have 0
response tokens); Mooncake (kvcache-ai/Mooncake `mooncake_trace.jsonl`: `timestamp` in ms since the first
request, `input_length`, `output_length`, `hash_ids` = one id per 512-token block, equal leading ids = a
shared prefix). `sessions` is our native columns plus `session_id` and `turn` (a multi-turn log).

Deliberately not here: reading or checking rows (`trace_rows.py`) and session semantics (the workload's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

TraceFormat = Literal["native", "azure", "burstgpt", "mooncake", "sessions"]
TimestampUnit = Literal["s", "ms", "us", "iso"]
Syntax = Literal["csv", "jsonl"]

# our fields a trace may give (trace.columns maps them to the file's own column names)
TRACE_FIELDS = (
    "timestamp",
    "input_len",
    "output_len",
    "prompt",
    "tenant",
    "priority",
    "prefix_group",
    "prefix_len",
    "session_id",
    "turn",
    "hash_ids",
)
SECONDS_PER_UNIT = {"s": 1.0, "ms": 1e-3, "us": 1e-6}
MOONCAKE_BLOCK_TOKENS = 512


@dataclass(frozen=True)
class FormatSpec:
    """One format: `columns` (our field -> the file's column), the timestamp unit, the file syntax (None:
    by the file's suffix), the fields every row needs, and the header columns that identify it."""

    name: TraceFormat
    columns: Mapping[str, str]
    timestamp_unit: TimestampUnit
    syntax: Syntax | None
    required: tuple[str, ...] = ("timestamp", "output_len")
    signature: frozenset[str] = frozenset()

    def label(self, field: str) -> str:
        """How an error names a field: the file's column, with ours when they differ."""
        col = self.columns.get(field, field)
        return repr(field) if col == field else f"{col!r} ({field})"


_NATIVE = {f: f for f in TRACE_FIELDS}
FORMATS: dict[str, FormatSpec] = {
    "native": FormatSpec("native", _NATIVE, "s", None),
    "sessions": FormatSpec("sessions", _NATIVE, "s", None, ("timestamp", "output_len", "session_id", "turn")),
    "azure": FormatSpec(
        "azure",
        {"timestamp": "TIMESTAMP", "input_len": "ContextTokens", "output_len": "GeneratedTokens"},
        "iso",
        "csv",
        signature=frozenset({"TIMESTAMP", "ContextTokens", "GeneratedTokens"}),
    ),
    "burstgpt": FormatSpec(
        "burstgpt",
        {"timestamp": "Timestamp", "input_len": "Request tokens", "output_len": "Response tokens"},
        "s",
        "csv",
        signature=frozenset({"Timestamp", "Request tokens", "Response tokens"}),
    ),
    "mooncake": FormatSpec(
        "mooncake",
        {"timestamp": "timestamp", "input_len": "input_length", "output_len": "output_length", "hash_ids": "hash_ids"},
        "ms",
        "jsonl",
        signature=frozenset({"input_length", "output_length"}),
    ),
}


def detect_format(keys: Sequence[str]) -> TraceFormat:
    """`auto`: the format whose signature columns the header (CSV) or first row (JSONL) has, else
    `sessions` when it has `session_id` and `turn`, else `native`."""
    have = set(keys)
    for spec in FORMATS.values():
        if spec.signature and spec.signature <= have:
            return spec.name
    return "sessions" if {"session_id", "turn"} <= have else "native"


def resolve_spec(fmt: TraceFormat, columns: Mapping[str, str], unit: TimestampUnit | None) -> FormatSpec:
    """The format with the config's mapping laid over it (a mapped field reads that column, whatever the
    format's own name for it) and its timestamp unit unless the config sets one."""
    base = FORMATS[fmt]
    taken = set(columns.values())
    merged = {f: c for f, c in base.columns.items() if f not in columns and c not in taken}
    merged.update(columns)
    return FormatSpec(base.name, merged, unit or base.timestamp_unit, base.syntax, base.required, base.signature)


def shared_prefixes(hash_ids: Sequence[tuple[int, ...] | None], block_tokens: int) -> list[tuple[int, int] | None]:
    """(prefix_group, shared blocks x `block_tokens`) per row from its leading block hashes: a row's shared
    prefix is the longest leading run of blocks that some other row also starts with, and rows whose longest
    shared run is the same run form one group. A row that shares nothing gets (-1, 0); a row without
    hash_ids gets None. Nested sharing (A and B share 3 blocks, C shares only the first with them) is kept
    only within each maximal run, so the replay never shares more than the trace did."""
    counts: dict[tuple[int, int], int] = {}  # (parent node, block hash) -> rows through that node
    nodes: dict[tuple[int, int], int] = {}
    paths: list[list[tuple[tuple[int, int], int]] | None] = []
    for hashes in hash_ids:
        if hashes is None:
            paths.append(None)
            continue
        node, path = 0, []  # path: ((parent, hash), node) per block
        for h in hashes:
            key = (node, h)
            node = nodes.setdefault(key, len(nodes) + 1)
            counts[key] = counts.get(key, 0) + 1
            path.append((key, node))
        paths.append(path)
    groups: dict[int, int] = {}
    out: list[tuple[int, int] | None] = []
    for path in paths:
        if path is None:
            out.append(None)
            continue
        shared = [node for key, node in path if counts[key] >= 2]
        if not shared:
            out.append((-1, 0))
            continue
        group = groups.setdefault(shared[-1], len(groups))
        out.append((group, len(shared) * block_tokens))
    return out
