"""Roofline per phase (SPEC L2): analytic FLOPs and bytes moved for a Llama-style decoder's prefill and decode,
arithmetic intensity, the compute/bandwidth ceiling, and what a measurement achieved.

    AI = FLOPs / BytesIO          Perf_max = min(ComputePeak, AI x Bandwidth)
    ridge = ComputePeak / Bandwidth;  AI >= ridge -> compute-bound, else bandwidth-bound
    t_min = max(FLOPs / ComputePeak, BytesIO / Bandwidth)   (the fastest the hardware could do it)

Counting conventions (docs/method.md, L2, states each so a reader can disagree precisely): matmul FLOPs only,
2 per multiply-add, causal attention as the full s_q x s_k rectangle unless `count_masked=False`; bytes a lower
bound on DRAM/HBM traffic, with `materialize_scores=True` adding eager attention's score passes (C2, K3).

What this module deliberately does not do: predict a kernel's time (a roofline locates, it does not predict;
L2), model MoE, cross-attention, tensor parallel communication or caches between HBM and SRAM, or import
torch. Hardware numbers come from `inferopt.locate.hardware`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd

Phase = Literal["prefill", "decode"]
Bound = Literal["compute", "bandwidth"]

ROOFLINE_COLUMNS = (
    "phase",
    "n_tokens",
    "context_len",
    "batch",
    "flops",
    "bytes",
    "ai_flop_per_byte",
    "ridge_flop_per_byte",
    "perf_max_flop_per_s",
    "bound",
    "t_compute_s",
    "t_memory_s",
    "t_min_s",
)


@dataclass(frozen=True)
class ModelDims:
    """The dimensions of a Llama-style decoder that FLOPs and bytes depend on.

    `gated_mlp` (SwiGLU: gate, up, down = 3 matrices) is True for Llama/Mistral/Qwen; set False for a
    2-matrix MLP.
    """

    n_layers: int
    hidden: int
    intermediate: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab: int
    tie_embeddings: bool = False
    gated_mlp: bool = True

    @classmethod
    def from_hf_config(cls, cfg: Any) -> "ModelDims":
        """From a transformers config object or its `to_dict()` (a multimodal config's `text_config` is
        used when present). Missing `num_key_value_heads` means MHA; missing `head_dim` means
        hidden // n_heads."""
        text = _get(cfg, "text_config", None)
        if text is not None:
            cfg = text
        missing = [
            k
            for k in ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "vocab_size")
            if _get(cfg, k, None) is None
        ]
        if missing:
            raise ValueError(f"config lacks {missing}: only Llama-style decoder configs are supported")
        n_heads = int(_get(cfg, "num_attention_heads"))
        hidden = int(_get(cfg, "hidden_size"))
        head_dim = _get(cfg, "head_dim", None)
        n_kv = _get(cfg, "num_key_value_heads", None)
        return cls(
            n_layers=int(_get(cfg, "num_hidden_layers")),
            hidden=hidden,
            intermediate=int(_get(cfg, "intermediate_size")),
            n_heads=n_heads,
            n_kv_heads=int(n_kv) if n_kv is not None else n_heads,
            head_dim=int(head_dim) if head_dim is not None else hidden // n_heads,
            vocab=int(_get(cfg, "vocab_size")),
            tie_embeddings=bool(_get(cfg, "tie_word_embeddings", False)),
        )

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def layer_matmul_params(self) -> int:
        """Weights of one layer's matmuls: q, k, v, o projections and the MLP."""
        attn = self.hidden * self.q_dim + 2 * self.hidden * self.kv_dim + self.q_dim * self.hidden
        mlp = (3 if self.gated_mlp else 2) * self.hidden * self.intermediate
        return attn + mlp

    @property
    def n_params(self) -> int:
        """All parameters: layers (matmuls + 2 RMSNorm weights each), final norm, embedding, LM head
        unless tied."""
        layers = self.n_layers * (self.layer_matmul_params + 2 * self.hidden)
        embed = self.vocab * self.hidden
        head = 0 if self.tie_embeddings else self.vocab * self.hidden
        return layers + self.hidden + embed + head


def weight_bytes(dims: ModelDims, bytes_per_elem: float) -> int:
    """Bytes of all weights at `bytes_per_elem` (e.g. 2 for bf16; quantization scales not included)."""
    return math.ceil(dims.n_params * bytes_per_elem)


def kv_bytes_per_token(dims: ModelDims, bytes_per_elem: float) -> float:
    """KV-cache bytes per token over all layers (K and V), unrounded (see analysis.kv for the table)."""
    return 2.0 * dims.n_layers * dims.kv_dim * bytes_per_elem


# --------------------------------------------------------------------------- FLOPs


def prefill_flops(
    dims: ModelDims,
    n_tokens: int,
    batch: int,
    *,
    past_len: int = 0,
    logits_to_keep: int = 1,
    count_masked: bool = True,
) -> float:
    """Matmul FLOPs of one forward over `n_tokens` new tokens per sequence for `batch` sequences.

    `past_len`: tokens already in the KV cache (a prefix-cache hit, or earlier chunks of a chunked
    prefill) that the new tokens attend to. `logits_to_keep`: LM-head positions computed per sequence
    (1 = only the last, what generation needs; 0 = all). `count_masked` (default True): causal attention counts
    the full s_q x s_k rectangle, exactly as `torch.utils.flop_counter.FlopCounterMode` does for eager attention
    and sdpa; False counts about half of the square in a from-scratch prefill, what a causal kernel that skips
    masked tiles (FlashAttention) does. Norms, rotary, softmax and activations are not counted (O(hidden) per
    token, < 1 % here).
    """
    _check_shape(n_tokens=n_tokens, batch=batch, past_len=past_len)
    linear = 2.0 * batch * n_tokens * dims.n_layers * dims.layer_matmul_params
    kept = n_tokens if logits_to_keep == 0 else min(logits_to_keep, n_tokens)
    head = 2.0 * batch * kept * dims.hidden * dims.vocab
    if count_masked:
        key_positions = float(n_tokens) * (past_len + n_tokens)  # the full rectangle
    else:
        key_positions = float(n_tokens) * past_len + n_tokens * (n_tokens + 1) / 2.0
    attn = 4.0 * dims.n_layers * batch * dims.n_heads * key_positions * dims.head_dim
    return linear + head + attn


def decode_flops(dims: ModelDims, context_len: int, batch: int, *, logits_to_keep: int = 1) -> float:
    """Matmul FLOPs of one decode step: one new token per sequence attending to `context_len` cached
    tokens plus itself, for `batch` sequences."""
    return prefill_flops(dims, 1, batch, past_len=context_len, logits_to_keep=logits_to_keep)


# --------------------------------------------------------------------------- bytes


def prefill_bytes(
    dims: ModelDims,
    n_tokens: int,
    batch: int,
    weight_bytes_per_elem: float = 2.0,
    kv_bytes_per_elem: float = 2.0,
    act_bytes_per_elem: float = 2.0,
    *,
    past_len: int = 0,
    logits_to_keep: int = 1,
    materialize_scores: bool = False,
) -> float:
    """Lower-bound bytes moved to/from device memory by one forward over `n_tokens` new tokens per
    sequence (conventions: docs/method.md, L2). Every weight read once per forward (shared by the batch), the
    embedding rows gathered, the past KV read once, the new K and V written once, activations read/written once
    per matmul boundary (norms, rotary, activations, residual adds assumed fused into neighbours), the kept
    logits; with `materialize_scores` four more passes per layer over the s_q x s_k scores (write S, read S,
    write P, read P)."""
    _check_shape(n_tokens=n_tokens, batch=batch, past_len=past_len)
    # weights: every matmul weight and norm once; the LM head matrix (== embedding matrix when tied)
    # once; the embedding rows the batch gathers.
    w_elems = dims.n_layers * (dims.layer_matmul_params + 2 * dims.hidden) + dims.hidden + dims.vocab * dims.hidden
    weights = w_elems * weight_bytes_per_elem + batch * n_tokens * dims.hidden * weight_bytes_per_elem
    per_tok_kv = kv_bytes_per_token(dims, kv_bytes_per_elem)
    kv_read = batch * past_len * per_tok_kv
    kv_write = batch * n_tokens * per_tok_kv
    # each matmul reads its input and writes its output once (k/v outputs are the KV write above):
    # qkv in (h) + q out (q) + attn in q (q) + attn out (q) + o in (q) + o out (h) + mlp in (h)
    # + gate/up out (2i) + down in (i) + down out (h)
    n_mlp_out = 2 if dims.gated_mlp else 1
    act_elems_tok_layer = 4 * dims.hidden + 4 * dims.q_dim + (n_mlp_out + 1) * dims.intermediate
    acts = batch * n_tokens * dims.n_layers * act_elems_tok_layer * act_bytes_per_elem
    kept = n_tokens if logits_to_keep == 0 else min(logits_to_keep, n_tokens)
    acts += batch * kept * (dims.hidden + dims.vocab) * act_bytes_per_elem
    if materialize_scores:
        acts += 4.0 * dims.n_layers * batch * dims.n_heads * n_tokens * (past_len + n_tokens) * act_bytes_per_elem
    return float(weights + kv_read + kv_write + acts)


def decode_bytes(
    dims: ModelDims,
    context_len: int,
    batch: int,
    weight_bytes_per_elem: float = 2.0,
    kv_bytes_per_elem: float = 2.0,
    act_bytes_per_elem: float = 2.0,
    *,
    materialize_scores: bool = False,
) -> float:
    """Bytes of one decode step: weights once, the KV of `context_len` cached tokens read per
    sequence, one new token's K and V written per sequence, small activations."""
    return prefill_bytes(
        dims,
        1,
        batch,
        weight_bytes_per_elem,
        kv_bytes_per_elem,
        act_bytes_per_elem,
        past_len=context_len,
        logits_to_keep=1,
        materialize_scores=materialize_scores,
    )


# --------------------------------------------------------------------------- the roofline


def arithmetic_intensity(flops: float, bytes_: float) -> float:
    """FLOPs per byte moved (inf when nothing is moved)."""
    return math.inf if bytes_ <= 0 else flops / bytes_


def perf_max_flops_per_s(ai: float, peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """The attainable FLOP/s at intensity `ai`: min(ComputePeak, AI x Bandwidth)."""
    return min(peak_flops_per_s, ai * bandwidth_bytes_per_s)


def ridge_point(peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> float:
    """The intensity (FLOP/byte) where the bandwidth roof meets the compute roof."""
    return peak_flops_per_s / bandwidth_bytes_per_s


def bound(ai: float, peak_flops_per_s: float, bandwidth_bytes_per_s: float) -> Bound:
    """'compute' when `ai` is at or right of the ridge point, else 'bandwidth'."""
    return "compute" if ai >= ridge_point(peak_flops_per_s, bandwidth_bytes_per_s) else "bandwidth"


@dataclass(frozen=True)
class PhasePoint:
    """One operating point to put on the roofline.

    prefill: `n_tokens` prompt tokens per sequence (after any prefix-cache hit), `context_len` tokens
    already cached (default 0). decode: `context_len` cached tokens per sequence, one new token.
    """

    phase: Phase
    batch: int = 1
    n_tokens: int | None = None
    context_len: int = 0


def roofline_table(
    dims: ModelDims,
    hardware_peak_flops_per_s: float,
    bandwidth_bytes_per_s: float,
    phases: Iterable[PhasePoint | Mapping[str, Any]],
    *,
    weight_bytes_per_elem: float = 2.0,
    kv_bytes_per_elem: float = 2.0,
    act_bytes_per_elem: float = 2.0,
    logits_to_keep: int = 1,
    materialize_scores: bool = False,
) -> pd.DataFrame:
    """A tidy row per operating point (columns: ROOFLINE_COLUMNS). `phases` holds PhasePoints or
    mappings with the same keys, e.g. {"phase": "decode", "context_len": 512, "batch": 8}.
    `n_tokens` is the new tokens per sequence in that forward (1 for decode); `context_len` the tokens
    already in the cache."""
    ridge = ridge_point(hardware_peak_flops_per_s, bandwidth_bytes_per_s)
    rows = []
    for raw in phases:
        point = raw if isinstance(raw, PhasePoint) else PhasePoint(**dict(raw))
        if point.phase == "prefill":
            if point.n_tokens is None:
                raise ValueError(f"prefill point needs n_tokens: {point}")
            n_tok = int(point.n_tokens)
            flops = prefill_flops(dims, n_tok, point.batch, past_len=point.context_len, logits_to_keep=logits_to_keep)
            bytes_ = prefill_bytes(
                dims,
                n_tok,
                point.batch,
                weight_bytes_per_elem,
                kv_bytes_per_elem,
                act_bytes_per_elem,
                past_len=point.context_len,
                logits_to_keep=logits_to_keep,
                materialize_scores=materialize_scores,
            )
        elif point.phase == "decode":
            n_tok = 1
            flops = decode_flops(dims, point.context_len, point.batch)
            bytes_ = decode_bytes(
                dims,
                point.context_len,
                point.batch,
                weight_bytes_per_elem,
                kv_bytes_per_elem,
                act_bytes_per_elem,
                materialize_scores=materialize_scores,
            )
        else:
            raise ValueError(f"phase must be 'prefill' or 'decode', got {point.phase!r}")
        ai = arithmetic_intensity(flops, bytes_)
        t_compute = flops / hardware_peak_flops_per_s
        t_memory = bytes_ / bandwidth_bytes_per_s
        rows.append(
            {
                "phase": point.phase,
                "n_tokens": n_tok,
                "context_len": int(point.context_len),
                "batch": int(point.batch),
                "flops": flops,
                "bytes": bytes_,
                "ai_flop_per_byte": ai,
                "ridge_flop_per_byte": ridge,
                "perf_max_flop_per_s": perf_max_flops_per_s(ai, hardware_peak_flops_per_s, bandwidth_bytes_per_s),
                "bound": bound(ai, hardware_peak_flops_per_s, bandwidth_bytes_per_s),
                "t_compute_s": t_compute,
                "t_memory_s": t_memory,
                "t_min_s": max(t_compute, t_memory),
            }
        )
    return pd.DataFrame(rows, columns=list(ROOFLINE_COLUMNS))


def achieved(flops: float, bytes_: float, measured_s: float, peak: float, bw: float) -> dict[str, float]:
    """What a measured phase achieved against the roofs.

    Returns achieved_flop_per_s, achieved_bytes_per_s, mfu (model FLOPs utilisation = achieved / peak),
    mbu (memory bandwidth utilisation = achieved bytes/s / bandwidth) and roofline_efficiency
    (t_min / measured_s: 1.0 = at the roof; far below 1 = something other than the roofs dominates,
    e.g. host overhead).
    """
    if measured_s <= 0:
        raise ValueError(f"measured_s must be > 0, got {measured_s}")
    flop_s = flops / measured_s
    byte_s = bytes_ / measured_s
    t_min = max(flops / peak, bytes_ / bw)
    return {
        "achieved_flop_per_s": flop_s,
        "achieved_bytes_per_s": byte_s,
        "mfu": flop_s / peak,
        "mbu": byte_s / bw,
        "roofline_efficiency": t_min / measured_s,
    }


def _get(cfg: Any, key: str, default: Any = ...) -> Any:
    if isinstance(cfg, Mapping):
        if key in cfg:
            return cfg[key]
    elif hasattr(cfg, key):
        return getattr(cfg, key)
    if default is ...:
        raise KeyError(key)
    return default


def _check_shape(**values: int) -> None:
    if values.get("n_tokens", 1) < 1 or values.get("batch", 1) < 1:
        raise ValueError(f"n_tokens and batch must be >= 1: {values}")
    if values.get("past_len", 0) < 0:
        raise ValueError(f"past_len must be >= 0: {values}")
