"""KV-cache memory: bytes per token, per request, per batch, the budget left after weights, and the concurrency
ceiling that budget allows (SPEC L3).

    M_KV = N_layer x N_KVhead x d_head x N_token x B x bytes_per_elem x 2      (K and V)

Worked example (SPEC L3, a test): 32 layers, 8 KV heads, d 128, FP16, 8,000 tokens -> 1.048576e9 bytes
(~1.05 GB) per request; 16 concurrent -> ~16.8 GB before weights, activations and workspace.

Closed-form arithmetic on model dimensions, returned as numbers or one tidy table (a row per context length)
that the locate step compares with the observed concurrency. What it deliberately does not do: measure memory,
know about paging block granularity or allocator fragmentation (a paged cache rounds each request up to whole
blocks; pass the rounded token count if that matters), or import torch. Sliding-window or compressed caches
are modelled by passing the number of tokens actually kept.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

KV_TABLE_COLUMNS = (
    "context_len_tok",
    "batch",
    "kv_bytes_per_token",
    "kv_bytes_per_request",
    "kv_bytes_batch",
    "budget_bytes",
    "max_concurrency",
    "fits",
)


def kv_bytes_per_token(n_layers: int, n_kv_heads: int, head_dim: int, bytes_per_elem: float) -> int:
    """KV-cache bytes one token occupies across all layers: K and V, hence the factor 2.

    `bytes_per_elem` may be fractional (0.5 for a 4-bit cache); the result is rounded up to whole bytes.
    """
    _check_positive(n_layers=n_layers, n_kv_heads=n_kv_heads, head_dim=head_dim, bytes_per_elem=bytes_per_elem)
    return math.ceil(n_layers * n_kv_heads * head_dim * bytes_per_elem * 2)


def kv_bytes(n_layers: int, n_kv_heads: int, head_dim: int, n_tokens: int, batch: int, bytes_per_elem: float) -> int:
    """SPEC L3: M_KV = N_layer x N_KVhead x d x N_token x B x b x 2, in bytes (rounded up)."""
    _check_positive(n_layers=n_layers, n_kv_heads=n_kv_heads, head_dim=head_dim, bytes_per_elem=bytes_per_elem)
    if n_tokens < 0 or batch < 0:
        raise ValueError(f"n_tokens and batch must be >= 0, got n_tokens={n_tokens}, batch={batch}")
    return math.ceil(n_layers * n_kv_heads * head_dim * n_tokens * batch * bytes_per_elem * 2)


def kv_budget_bytes(memory_bytes: float, weight_bytes: float, workspace_fraction: float = 0.1) -> int:
    """Bytes left for the KV cache: device memory minus a workspace reserve (activations, allocator
    slack, CUDA context; `workspace_fraction` of the total) minus the weights. Never negative."""
    if not 0.0 <= workspace_fraction < 1.0:
        raise ValueError(f"workspace_fraction must be in [0, 1), got {workspace_fraction}")
    if memory_bytes < 0 or weight_bytes < 0:
        raise ValueError("memory_bytes and weight_bytes must be >= 0")
    return max(0, math.floor(memory_bytes * (1.0 - workspace_fraction) - weight_bytes))


def max_concurrency(budget_bytes: float, per_request_bytes: float) -> int:
    """How many requests of `per_request_bytes` KV each fit in `budget_bytes` at once (floor)."""
    if per_request_bytes <= 0:
        raise ValueError(f"per_request_bytes must be > 0, got {per_request_bytes}")
    return max(0, math.floor(budget_bytes / per_request_bytes))


def kv_table(
    model_dims: Any,
    context_lens_tok: Sequence[int],
    batch: int,
    bytes_per_elem: float,
    memory_bytes: float,
    weight_bytes: float,
    workspace_fraction: float = 0.1,
    budget_bytes: float | None = None,
) -> pd.DataFrame:
    """One row per context length: KV bytes per request and for `batch` requests, the KV budget, the
    concurrency ceiling at that length and whether `batch` requests fit. `budget_bytes`, when given, is the
    KV budget as configured (e.g. vLLM's --kv-cache-memory-bytes) instead of memory - workspace - weights.

    `model_dims` is anything with `n_layers`, `n_kv_heads`, `head_dim` (e.g. roofline.ModelDims) or a
    mapping with those keys. Columns: see KV_TABLE_COLUMNS. When `fits` is False the batch would OOM
    (or, in a paged engine, be capped/preempted): that is the kv_capacity cause.
    """
    n_layers, n_kv_heads, head_dim = (_dim(model_dims, k) for k in ("n_layers", "n_kv_heads", "head_dim"))
    per_tok = kv_bytes_per_token(n_layers, n_kv_heads, head_dim, bytes_per_elem)
    budget = (
        int(budget_bytes)
        if budget_bytes is not None
        else kv_budget_bytes(memory_bytes, weight_bytes, workspace_fraction)
    )
    rows = []
    for n_tok in context_lens_tok:
        per_req = kv_bytes(n_layers, n_kv_heads, head_dim, int(n_tok), 1, bytes_per_elem)
        per_batch = kv_bytes(n_layers, n_kv_heads, head_dim, int(n_tok), batch, bytes_per_elem)
        rows.append(
            {
                "context_len_tok": int(n_tok),
                "batch": int(batch),
                "kv_bytes_per_token": per_tok,
                "kv_bytes_per_request": per_req,
                "kv_bytes_batch": per_batch,
                "budget_bytes": budget,
                "max_concurrency": max_concurrency(budget, per_req) if per_req > 0 else None,
                "fits": per_batch <= budget,
            }
        )
    return pd.DataFrame(rows, columns=list(KV_TABLE_COLUMNS))


def _dim(model_dims: Any, key: str) -> int:
    value = model_dims[key] if isinstance(model_dims, Mapping) else getattr(model_dims, key)
    return int(value)


def _check_positive(**values: float) -> None:
    bad = {k: v for k, v in values.items() if not v > 0}
    if bad:
        raise ValueError(f"must be > 0: {bad}")
