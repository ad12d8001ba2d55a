"""A workload is a table: one row per request (arrival offset, lengths, prefix group, tenant, priority).

A workload is synthetic (`arrival` + `lengths` + `prefix` + `tenants`; with `sessions`, one row per turn of
multi-turn sessions: `sessions.py`) or a replayed trace (`trace`, read
by `inferopt.workload.trace` into the same columns). The same `WorkloadConfig` always gives the same table (each sampler
has its own seeded generator, derived from the workload seed), and the table carries a content hash so runs can prove
they replayed the same load. Prompts are materialised separately (`prompt_token_ids`), deterministically from the table
and the vocabulary, so one workload serves any tokenizer.

Deliberately not here: sending anything (the load runner does that).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import numpy as np
import pandas as pd

from inferopt.config import WorkloadConfig
from inferopt.workload.arrivals import arrival_offsets_s
from inferopt.workload.columns import SESSION_COLUMNS, WORKLOAD_COLUMNS
from inferopt.workload.lengths import sample_lengths
from inferopt.workload.output_lengths import declared_default, mark
from inferopt.workload.sessions import build_sessions
from inferopt.workload.trace import load_trace


def _child_rngs(seed: int, n: int) -> list[np.random.Generator]:
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(n)]


def build_workload(
    cfg: WorkloadConfig, num_requests: int | None = None, count_tokens: Callable[[str], int] | None = None
) -> pd.DataFrame:
    """The request table for `cfg` (optionally with a different request count, same seeds). A trace
    workload is read from its file (`count_tokens` turns a row's prompt text into its length). The table's
    `attrs["output_lengths"]` is the workload's mode (`output_lengths.declared_default`)."""
    if cfg.trace is not None:
        table = load_trace(cfg.trace, cfg, num_requests, count_tokens)
        table.attrs["content_hash"] = workload_hash(table)
        return mark(table, declared_default(cfg))
    if cfg.sessions is not None:  # one row per turn (workload/sessions.py)
        table = build_sessions(cfg, num_requests)
        table.attrs["content_hash"] = workload_hash(table)
        return mark(table, declared_default(cfg))
    n = num_requests or cfg.num_requests
    rng_arrival, rng_len, rng_prefix, rng_tenant = _child_rngs(cfg.seed, 4)
    offsets = arrival_offsets_s(cfg.arrival, n, rng_arrival)
    input_len, output_len = sample_lengths(cfg.lengths, n, rng_len)
    shared = rng_prefix.random(n) < cfg.prefix.share_fraction
    groups = np.where(shared, rng_prefix.integers(0, cfg.prefix.num_groups, size=n), -1)
    prefix_len = np.where(shared, cfg.prefix.prefix_len, 0)
    # a shared prefix must leave at least one unique token after it
    input_len = np.maximum(input_len, prefix_len + 1)
    weights = np.array([t.weight for t in cfg.tenants], dtype=float)
    tenant_idx = rng_tenant.choice(len(cfg.tenants), size=n, p=weights / weights.sum())
    table = pd.DataFrame(
        {
            "request_id": [f"{cfg.name}-{i:05d}" for i in range(n)],
            "arrival_offset_s": offsets.astype(float),
            "input_len": input_len.astype(int),
            "output_len": output_len.astype(int),
            "prefix_group": groups.astype(int),
            "prefix_len": prefix_len.astype(int),
            "tenant": [cfg.tenants[i].name for i in tenant_idx],
            "priority": [cfg.tenants[i].priority for i in tenant_idx],
        },
        columns=list(WORKLOAD_COLUMNS),
    )
    table.attrs["content_hash"] = workload_hash(table)
    return mark(table, declared_default(cfg))


def workload_hash(table: pd.DataFrame) -> str:
    """sha256 (16 hex) over the table's values in canonical column order — independent of pandas attrs. A
    session table's plan columns count too (a table without them hashes as before)."""
    columns = list(WORKLOAD_COLUMNS) + [c for c in SESSION_COLUMNS if c in table.columns]
    canon = table.loc[:, columns].reset_index(drop=True)
    digest = hashlib.sha256(pd.util.hash_pandas_object(canon, index=True).values.tobytes())
    digest.update(",".join(columns).encode())
    return digest.hexdigest()[:16]


def prompt_token_ids(row: pd.Series | dict, vocab_size: int, seed: int = 0, reserved_ids: int = 3) -> list[int]:
    """Deterministic prompt ids for one request: a shared prefix (same ids for the whole group) followed
    by ids unique to the request. Ids avoid the first `reserved_ids` (pad/bos/eos)."""
    n, plen, group = int(row["input_len"]), int(row["prefix_len"]), int(row["prefix_group"])
    ids: list[int] = []
    if group >= 0 and plen > 0:
        g = np.random.default_rng([seed, 1, group])
        ids.extend(g.integers(reserved_ids, vocab_size, size=plen).tolist())
    r = np.random.default_rng([seed, 2, int(hashlib.sha256(str(row["request_id"]).encode()).hexdigest()[:8], 16)])
    ids.extend(r.integers(reserved_ids, vocab_size, size=n - len(ids)).tolist())
    return ids
