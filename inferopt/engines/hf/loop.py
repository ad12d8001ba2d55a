"""The greedy forward loop we own over transformers 5.x: left-padded prefill, then one token per step.

One module holds the math so that the bare loop (`greedy_generate`, what benchmarks compare against) and the
serving engine (`inferopt.engines.hf.engine.HFEngine`) run exactly the same forward calls (`GreedyBatch` lists
them). Every step ends with `.tolist()` (a host copy, which also synchronizes a CUDA stream): a streaming server
must look at each token, so the bare loop pays that too. The KV cache is one of `make_cache`'s kinds (dynamic,
static, quantized); `GreedyBatch.cache` and `context_len` let the engine measure the bytes it holds
(`inferopt.model.memory.cache_bytes`). With the prefix cache, `batched_past` lays each row's cached blocks out
left-padded in a dynamic cache and `GreedyBatch(past=...)` prefills only the suffixes on it; `row_kv` reads a
row's fed tokens back out block by block.

Deliberately not here: queues, threads, timestamps (the engine adds them), sampling, continuous batching.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import DynamicCache

from inferopt.model.loading import quantized_cache_kwargs


def pad_token_id_of(model: Any) -> int:
    """The id fed to finished rows and used for left padding (generation config, then config, then 0)."""
    for source in (getattr(model, "generation_config", None), getattr(model, "config", None)):
        pid = getattr(source, "pad_token_id", None) if source is not None else None
        if isinstance(pid, int):
            return pid
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(eos, int):
        return eos
    if isinstance(eos, (list, tuple)) and eos:
        return int(eos[0])
    return 0


def make_cache(
    model: Any, kv_cache: str = "dynamic", max_cache_len: int | None = None, residual_length: int = 128
) -> Any:
    """A fresh KV cache for one batch: `dynamic` (full precision, grows; sliding-window layers when the model's
    config has a window), `static` (preallocated for `max_cache_len` positions), or quantized
    (`quanto-int2|int4`, `hqq-int2|int4|int8`, `fp8`; see `inferopt.model.loading.QUANTIZED_KV`)."""
    if kv_cache == "dynamic":
        return DynamicCache(config=model.config)
    if kv_cache == "static":
        if max_cache_len is None:
            raise ValueError("kv_cache static needs max_cache_len (prompt length + max new tokens)")
        from transformers import StaticCache

        return StaticCache(config=model.config, max_cache_len=max_cache_len)
    qkw = quantized_cache_kwargs(kv_cache, residual_length)
    if qkw is not None:
        from transformers import QuantizedCache

        return QuantizedCache(config=model.config, **qkw)
    raise ValueError(
        f"kv_cache {kv_cache!r}: unknown; fix: dynamic, static, quanto-int2|int4, hqq-int2|int4|int8 or fp8"
    )


def left_pad(
    prompts: Sequence[Sequence[int]], pad_token_id: int, device: str | torch.device = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token-id lists into (input_ids, attention_mask), both int64 on `device`."""
    width = max(len(p) for p in prompts)
    ids = [[pad_token_id] * (width - len(p)) + list(p) for p in prompts]
    mask = [[0] * (width - len(p)) + [1] * len(p) for p in prompts]
    return (torch.tensor(ids, dtype=torch.long, device=device), torch.tensor(mask, dtype=torch.long, device=device))


class GreedyBatch:
    """Incremental greedy decoding of one static batch. `prefill()` once, then `step()` per token.

    Both return the new token of every row as a Python list (row order = input order). `finish_row(i)`
    makes row i be fed the pad token from the next step on (its outputs are then meaningless).

    - prefill: one forward over the whole left-padded batch with the cache, `logits_to_keep=1` and explicit
      `position_ids` (cumsum of the mask − 1, pads at 0 — what `generate` computes);
    - decode: one forward per step for every row, the attention mask covering past + new tokens, positions
      advancing by one; a finished row is fed the pad token (as `generate` does) and its output ignored;
    - greedy: argmax of the last logits. Like `generate`, the mask is dropped when the batch has no padding.
    """

    def __init__(
        self,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None,
        max_new_tokens: int,
        pad_token_id: int | None = None,
        kv_cache: str = "dynamic",
        kv_residual_length: int = 128,
        past: tuple[Any, torch.Tensor] | None = None,
    ) -> None:
        """`past`: (a dynamic cache already holding KV for some columns, their (B, P) mask) from `batched_past`;
        `input_ids` then holds each row's uncached suffix, and positions continue after the row's cached ones."""
        self.model = model
        self.input_ids = input_ids
        self.batch_size, self.prompt_len = input_ids.shape
        self.pad_token_id = pad_token_id_of(model) if pad_token_id is None else pad_token_id
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        past_mask = attention_mask[:, :0] if past is None else past[1].to(attention_mask.dtype)
        full_mask = torch.cat([past_mask, attention_mask], dim=1)
        self._past_len = past_mask.shape[1]
        total = self._past_len + self.prompt_len
        # position ids as generate computes them (counting the cached columns); no mask when there is no padding
        pos = full_mask.long().cumsum(-1) - 1
        self._prefill_pos = pos.masked_fill(full_mask == 0, 0)[:, self._past_len :]
        self._next_pos = self._prefill_pos[:, -1:] + 1
        self._has_padding = not bool((full_mask == 1).all())
        if self._has_padding:
            # preallocated past+new mask; each step uses a prefix view of it (no per-step cat)
            full = torch.ones(
                (self.batch_size, total + max(max_new_tokens, 1)),
                dtype=attention_mask.dtype,
                device=attention_mask.device,
            )
            full[:, :total] = full_mask
            self._mask = full
        else:
            self._mask = None
        self._prompt_mask = full_mask
        self._cur_len = total
        if past is not None:
            self.cache = past[0]
        else:
            self.cache = make_cache(
                model, kv_cache, max_cache_len=total + max(max_new_tokens, 1), residual_length=kv_residual_length
            )
        qc = getattr(getattr(model, "config", None), "quantization_config", None)
        self._quanto = (
            kv_cache not in ("dynamic", "static") or "quanto" in str(getattr(qc, "quant_method", qc) or "").lower()
        )
        self._next: torch.Tensor | None = None  # (B, 1) ids to feed on the next step
        self._done: torch.Tensor | None = None  # (B, 1) bool: rows fed the pad token

    @property
    def context_len(self) -> int:
        """Positions fed to the model so far per row (prompt, left padding included, plus decode steps): what the
        cache holds keys and values for."""
        return self._cur_len

    def _mask_now(self) -> torch.Tensor | None:
        return None if self._mask is None else self._mask[:, : self._cur_len]

    def _mode(self) -> Any:
        # quanto's weight tensors cannot run under inference_mode (version counters); no_grad is equivalent here
        return torch.no_grad() if self._quanto else torch.inference_mode()

    def prefill(self) -> list[int]:
        with self._mode():
            return self._prefill()

    def step(self) -> list[int]:
        with self._mode():
            return self._step()

    def _prefill(self) -> list[int]:
        out = self.model(
            input_ids=self.input_ids,
            attention_mask=self._mask_now(),
            position_ids=self._prefill_pos,
            cache=self.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        self.cache = out.cache
        nxt = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
        self._next = nxt
        return nxt.view(-1).tolist()

    def _step(self) -> list[int]:
        if self._done is not None:
            self._next.masked_fill_(self._done, self.pad_token_id)
        self._cur_len += 1
        pos = self._next_pos
        out = self.model(
            input_ids=self._next,
            attention_mask=self._mask_now(),
            position_ids=pos,
            cache=self.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        self.cache = out.cache
        self._next_pos = pos + 1
        nxt = out.logits[:, -1, :].argmax(dim=-1, keepdim=True)
        self._next = nxt
        return nxt.view(-1).tolist()

    def fed_columns(self, row: int, fed_decode_tokens: int) -> torch.Tensor:
        """Cache columns of row `row`'s fed tokens in order: its prompt (cached part and suffix, pads skipped),
        then its first `fed_decode_tokens` decode inputs."""
        prompt_cols = self._prompt_mask[row].nonzero().view(-1)
        start = self._prompt_mask.shape[1]
        decode = torch.arange(start, start + fed_decode_tokens, device=prompt_cols.device)
        return torch.cat([prompt_cols, decode])

    def row_kv(self, row: int, columns: torch.Tensor) -> tuple[tuple[torch.Tensor, torch.Tensor], ...]:
        """Per layer (keys, values) of one row at `columns`, copied out: (kv_heads, len(columns), head_dim)."""
        return tuple(
            (layer.keys[row].index_select(1, columns), layer.values[row].index_select(1, columns))
            for layer in self.cache.layers
        )

    def finish_row(self, row: int) -> None:
        if self._done is None:
            self._done = torch.zeros((self.batch_size, 1), dtype=torch.bool, device=self.input_ids.device)
        self._done[row, 0] = True


def batched_past(
    model: Any, blocks: Sequence[Sequence[tuple[tuple[torch.Tensor, torch.Tensor], ...]]], device: str | torch.device
) -> tuple[Any, torch.Tensor] | None:
    """Rows' cached prefix blocks as one left-padded dynamic cache and its (B, P) mask; None when no row has any.

    `blocks[row]` is that row's chain (per block, per layer (keys, values) of shape (kv_heads, block, head_dim));
    a row with fewer cached tokens is left-padded with zero keys/values under a 0 mask."""
    lens = [sum(b[0][0].shape[1] for b in row) for row in blocks]
    width = max(lens, default=0)
    if width == 0:
        return None
    cache = DynamicCache(config=model.config)
    mask = torch.zeros((len(blocks), width), dtype=torch.long, device=device)
    first = next(row for row in blocks if row)[0]
    for layer, (k0, v0) in enumerate(first):
        keys = k0.new_zeros((len(blocks), k0.shape[0], width, k0.shape[2]))
        values = v0.new_zeros((len(blocks), v0.shape[0], width, v0.shape[2]))
        for r, row in enumerate(blocks):
            if row:
                keys[r, :, width - lens[r] :] = torch.cat([b[layer][0] for b in row], dim=1)
                values[r, :, width - lens[r] :] = torch.cat([b[layer][1] for b in row], dim=1)
        cache.update(keys, values, layer)
    for r, n in enumerate(lens):
        mask[r, width - n :] = 1
    return cache, mask


def greedy_generate(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    max_new_tokens: int,
    eos_token_id: int | None = None,
) -> list[list[int]]:
    """The bare loop: greedy tokens per row (a row stops after its EOS, which is included).

    Same math as `model.generate(do_sample=False)` on the same left-padded batch; no queue, no clocks.
    """
    batch = GreedyBatch(model, input_ids, attention_mask, max_new_tokens)
    rows = batch.batch_size
    out: list[list[int]] = [[] for _ in range(rows)]
    if max_new_tokens <= 0:
        return out
    live = rows
    done = [False] * rows
    tokens = batch.prefill()
    for step in range(max_new_tokens):
        if step:
            tokens = batch.step()
        for i, tok in enumerate(tokens):
            if done[i]:
                continue
            out[i].append(tok)
            if tok == eos_token_id:
                done[i] = True
                live -= 1
                batch.finish_row(i)
        if not live:
            break
    return out
