"""The hf engine's prefix cache: KV blocks of earlier requests, keyed by chained hashes of token-id blocks.

Like vLLM's automatic prefix caching: a prompt is cut into whole blocks of `block_tokens` ids; block i's key is
a hash of block i-1's key and block i's ids, so a key names the whole prefix up to it and a growing multi-turn
history hits on every earlier block without any prefix-group coordination. A lookup returns the longest chain
of cached blocks, leaving at least one token to prefill (the next token's logits come from it). Memory is
bounded by `max_bytes` (the blocks' tensor bytes); the least recently used block goes first, and a chain is
touched tail first so its tail is evicted before its root. Counters are monotonic (vLLM's
`prefix_cache_queries_total` / `prefix_cache_hits_total`, in prompt tokens); `reset()` empties the blocks only.

Deliberately not here: laying blocks out in a batch or reading them out of one (`loop.py`, `engine.py`),
quantized or static caches (the config refuses them with the prefix cache).
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

BlockKV = tuple[tuple[torch.Tensor, torch.Tensor], ...]  # per layer (keys, values): (kv_heads, block, head_dim)

__all__ = ["BlockKV", "PrefixKVCache", "PrefixStats", "block_hashes", "kv_nbytes"]


def block_hashes(token_ids: Sequence[int], block_tokens: int) -> list[bytes]:
    """One chained key per whole block of `token_ids` (a partial last block has none)."""
    out: list[bytes] = []
    prev = b""
    for start in range(0, len(token_ids) - block_tokens + 1, block_tokens):
        h = hashlib.blake2b(prev, digest_size=16)
        h.update(array("q", token_ids[start : start + block_tokens]).tobytes())
        prev = h.digest()
        out.append(prev)
    return out


def kv_nbytes(kv: BlockKV) -> int:
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)


@dataclass
class PrefixStats:
    """Monotonic counters (prompt tokens, blocks) and the peak bytes held."""

    queries_tokens: int = 0
    hit_tokens: int = 0
    stored_blocks: int = 0
    evicted_blocks: int = 0
    resets: int = 0
    peak_bytes: int = 0


class PrefixKVCache:
    """Block KV keyed by `block_hashes`, LRU-evicted under `max_bytes` (see the module docstring)."""

    def __init__(self, block_tokens: int, max_bytes: int) -> None:
        if block_tokens < 1 or max_bytes < 1:
            raise ValueError(f"prefix cache: block_tokens ({block_tokens}) and max_bytes ({max_bytes}) must be >= 1")
        self.block_tokens = block_tokens
        self.max_bytes = max_bytes
        self._blocks: OrderedDict[bytes, tuple[BlockKV, int]] = OrderedDict()  # LRU first
        self.bytes = 0
        self.stats = PrefixStats()

    def __len__(self) -> int:
        return len(self._blocks)

    def _touch(self, keys: Sequence[bytes]) -> None:
        for key in reversed(keys):  # the root ends most recently used: tails are evicted first
            self._blocks.move_to_end(key)

    def lookup(self, token_ids: Sequence[int]) -> list[BlockKV]:
        """The longest cached chain of `token_ids`' blocks that leaves >= 1 token uncached; counted."""
        most = (len(token_ids) - 1) // self.block_tokens
        keys = block_hashes(token_ids[: most * self.block_tokens], self.block_tokens)
        hit: list[bytes] = []
        for key in keys:
            if key not in self._blocks:
                break
            hit.append(key)
        self._touch(hit)
        self.stats.queries_tokens += len(token_ids)
        self.stats.hit_tokens += len(hit) * self.block_tokens
        return [self._blocks[k][0] for k in hit]

    def store(self, token_ids: Sequence[int], kv_of: Callable[[int, int], BlockKV]) -> int:
        """Store the blocks of `token_ids` not cached yet; `kv_of(start, end)` reads one block's KV. Evicts
        least recently used blocks of other chains to make room; stops when the rest does not fit. Returns the
        number of blocks stored."""
        keys = block_hashes(token_ids, self.block_tokens)
        chain = set(keys)
        stored = 0
        for i, key in enumerate(keys):
            if key in self._blocks:
                continue
            kv = kv_of(i * self.block_tokens, (i + 1) * self.block_tokens)
            size = kv_nbytes(kv)
            if not self._make_room(size, chain):
                keys = keys[:i]
                break
            self._blocks[key] = (kv, size)
            self.bytes += size
            stored += 1
        self.stats.stored_blocks += stored
        self.stats.peak_bytes = max(self.stats.peak_bytes, self.bytes)
        self._touch([k for k in keys if k in self._blocks])
        return stored

    def _make_room(self, size: int, keep: set[bytes]) -> bool:
        while self.bytes + size > self.max_bytes:
            victim = next((k for k in self._blocks if k not in keep), None)
            if victim is None:
                return False
            self.bytes -= self._blocks.pop(victim)[1]
            self.stats.evicted_blocks += 1
        return True

    def reset(self) -> None:
        """Drop every block (vLLM's reset_prefix_cache); the counters stay monotonic."""
        self._blocks.clear()
        self.bytes = 0
        self.stats.resets += 1
