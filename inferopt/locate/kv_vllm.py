"""Our KV math next to what vLLM reports about its KV cache (SPEC L3, "compared with what vLLM reports").

vLLM states its KV cache three ways:
- its start-up log's KV size line and
- the `vllm:cache_config_info` gauge's labels on /metrics (both parsed by `inferopt.engines.vllm.kv_report`);
- during the run: `vllm:kv_cache_usage_perc` (a 0..1 fraction despite the name; its peak is sampled),
  `vllm:num_requests_running` (peak, sampled) and `vllm:num_preemptions_total` (counter delta).
`kv_comparison` puts our numbers beside them, one row per quantity.

What this module deliberately does not do: read files or HTTP (the caller passes text / parsed metrics), or
decide the cause (kv_rules.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

AGREE_REL_TOL = 0.01
COMPARISON_COLUMNS = ("quantity", "ours", "vllm", "unit", "agree", "note")


def kv_comparison(
    *,
    kv_bytes_per_token: float,
    budget_bytes: float,
    block_size: int,
    max_model_len: int | None,
    context_len_tok: float,
    reported: Mapping[str, Any],
) -> pd.DataFrame:
    """Our KV math vs vLLM's report, one row per quantity. `reported` keys, all optional: num_gpu_blocks,
    kv_cache_tokens, max_concurrency (at max_model_len), block_size, kv_cache_memory_bytes,
    num_requests_running_max, kv_cache_usage_frac_max, num_preemptions.

    Rows: KV bytes per token and per block, the blocks and tokens the budget holds, the concurrency ceiling at
    max_model_len (vLLM's own "Maximum concurrency": cache tokens / max_model_len) and at the run's long
    context (whole blocks per request), then what the run showed (peak running sequences, peak KV usage,
    preemptions). `agree` is True when both sides are present and within AGREE_REL_TOL, None when one is
    missing."""
    if kv_bytes_per_token <= 0 or block_size <= 0:
        raise ValueError(f"kv_bytes_per_token and block_size must be > 0, got {kv_bytes_per_token}, {block_size}")
    r = {k: v for k, v in reported.items() if v is not None}
    block_bytes = kv_bytes_per_token * block_size
    blocks = math.floor(budget_bytes / block_bytes)
    tokens = blocks * block_size
    blocks_per_req = math.ceil(max(context_len_tok, 1.0) / block_size)
    ceil_ctx = blocks // blocks_per_req
    v_blocks = r.get("num_gpu_blocks")
    v_mem = r.get("kv_cache_memory_bytes")
    v_block_bytes = v_mem / v_blocks if v_mem and v_blocks else None
    v_tokens = r.get("kv_cache_tokens", v_blocks * r.get("block_size", block_size) if v_blocks else None)
    rows = [
        _cmp(
            "kv_bytes_per_token",
            kv_bytes_per_token,
            v_block_bytes / r.get("block_size", block_size) if v_block_bytes else None,
            "bytes",
            "vLLM: kv_cache_memory_bytes / num_gpu_blocks / block_size",
        ),
        _cmp("kv_bytes_per_block", block_bytes, v_block_bytes, "bytes", f"{block_size} tokens per block"),
        _cmp(
            "kv_budget_bytes",
            budget_bytes,
            v_mem,
            "bytes",
            "ours: the configured KV budget (or device memory x utilization - weights - workspace)",
        ),
        _cmp("num_blocks", blocks, v_blocks, "blocks", "vLLM: cache_config_info num_gpu_blocks"),
        _cmp("kv_cache_tokens", tokens, v_tokens, "tokens", "vLLM: start-up log 'KV cache size'"),
        _cmp(
            "max_concurrency_at_max_model_len",
            tokens / max_model_len if max_model_len else None,
            r.get("max_concurrency"),
            "sequences",
            f"cache tokens / max_model_len {max_model_len} (vLLM's 'Maximum concurrency')",
        ),
        _cmp(
            "max_concurrency_at_context",
            ceil_ctx,
            None,
            "sequences",
            f"whole blocks: {blocks} // ceil({context_len_tok:g} tok / {block_size}) = {ceil_ctx} "
            "at the run's long context",
        ),
        _cmp(
            "peak_running_sequences",
            None,
            r.get("num_requests_running_max"),
            "sequences",
            "vLLM num_requests_running, peak sampled during the run",
        ),
        _cmp(
            "kv_cache_usage_frac_max",
            None,
            r.get("kv_cache_usage_frac_max"),
            "fraction",
            "vLLM kv_cache_usage_perc, peak sampled during the run",
        ),
        _cmp(
            "preemptions", None, r.get("num_preemptions"), "sequences", "vLLM num_preemptions_total, delta over the run"
        ),
    ]
    return pd.DataFrame(rows, columns=list(COMPARISON_COLUMNS))


def _cmp(quantity: str, ours: float | None, vllm: float | None, unit: str, note: str) -> dict[str, Any]:
    agree = None
    if ours is not None and vllm is not None:
        scale = max(abs(float(ours)), abs(float(vllm)), 1e-12)
        agree = abs(float(ours) - float(vllm)) / scale <= AGREE_REL_TOL
    return {
        "quantity": quantity,
        "ours": None if ours is None else float(ours),
        "vllm": None if vllm is None else float(vllm),
        "unit": unit,
        "agree": agree,
        "note": note,
    }
