"""What vLLM reports about its KV cache, parsed (pure functions over text / parsed metrics; SPEC L3).

- its start-up log: `CPU KV cache size: 768 tokens, Maximum concurrency for 512 tokens per request: 1.50x`
  ("GPU KV cache size" on CUDA) — `parse_kv_log`;
- the `vllm:cache_config_info` gauge on /metrics, whose labels carry the cache config (`num_gpu_blocks`,
  `block_size`, `cache_dtype`, `kv_cache_memory_bytes`, ...) — `cache_config_from_metrics`.

The vLLM engine puts both into `info()["kv_cache_report"]`. Deliberately not here: reading files or HTTP (the
caller passes text / parsed metrics), or comparing with our KV math (`inferopt.locate.kv_vllm`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from inferopt.transport.prometheus import split_key

__all__ = ["cache_config_from_metrics", "parse_kv_log"]

_KV_LOG = re.compile(
    r"(?P<device>\w+(?: \+ host)?) KV cache size: (?P<tokens>[\d,]+) tokens, Maximum concurrency for "
    r"(?P<len>[\d,]+) tokens per request: (?P<conc>[\d.]+)x"
)


def parse_kv_log(text: str) -> dict[str, float | str]:
    """vLLM's start-up KV line -> {kv_cache_tokens, max_model_len, max_concurrency, device}; {} if absent
    (the last such line wins: a restarted server logs again)."""
    found = list(_KV_LOG.finditer(text))
    if not found:
        return {}
    m = found[-1]
    return {
        "kv_cache_tokens": float(m["tokens"].replace(",", "")),
        "max_model_len": float(m["len"].replace(",", "")),
        "max_concurrency": float(m["conc"]),
        "device": m["device"],
    }


def cache_config_from_metrics(raw: Mapping[str, float]) -> dict[str, Any]:
    """The labels of `vllm:cache_config_info` (parsed /metrics keys, `inferopt.transport.prometheus`) with the
    numeric ones as numbers: num_gpu_blocks, block_size, kv_cache_memory_bytes, ... {} when absent."""
    for key in raw:
        name, labels = split_key(key)
        if name == "vllm:cache_config_info":
            out: dict[str, Any] = {}
            for k, v in labels.items():
                out[k] = _number(v)
            return out
    return {}


def _number(text: str) -> Any:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return text
    return int(value) if value.is_integer() and "." not in text and "e" not in text.lower() else value
