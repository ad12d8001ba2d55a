"""Bytes that a loaded model's weights and a KV-cache object really hold, counted from their tensors.

Why not `model.get_memory_footprint()` or `numel * element_size` of the parameters: quantizers store weights
as tensor subclasses (quanto's QBytesTensor, torchao's Int8Tensor) or as packed bytes plus side tensors
(bitsandbytes' absmax / quant_map / nested constants live in the state dict, not in `.parameters()`), and
those counts miss or misread them. Here every tensor is flattened into its plain inner tensors
(`__tensor_flatten__`, recursively) and each storage is counted once (tied or shared tensors are not
double-counted), so a quantized model or cache shows the bytes it actually keeps.

A KV cache (transformers 5.x `Cache`) is walked layer by layer: every tensor reachable from a layer's
attributes (full-precision keys/values, a quantized cache's packed tensors, scales, zero points, its
full-precision residual) is counted. A StaticCache counts its whole preallocated buffer — what it holds.
Deliberately not here: when to measure (the engine decides), process RSS (`inferopt.measure.resources`),
and GPU allocator statistics (torch.cuda).
"""

from __future__ import annotations

from typing import Any

import torch


def _plain_tensors(t: torch.Tensor) -> list[torch.Tensor]:
    """The plain tensors a (possibly subclassed, possibly nested) tensor is made of."""
    inner = t.data if isinstance(t, torch.nn.Parameter) else t
    if type(inner) is not torch.Tensor and hasattr(inner, "__tensor_flatten__"):
        names, _ = inner.__tensor_flatten__()
        out: list[torch.Tensor] = []
        for name in names:
            child = getattr(inner, name)
            if isinstance(child, torch.Tensor):
                out.extend(_plain_tensors(child))
        return out
    return [inner]


def _count(t: torch.Tensor, seen: set[tuple[int, int, str]]) -> int:
    total = 0
    for p in _plain_tensors(t):
        if p.device.type == "meta":
            continue
        nbytes = p.numel() * p.element_size()
        key = (p.data_ptr(), nbytes, str(p.device))
        if nbytes == 0 or key in seen:
            continue
        seen.add(key)
        total += nbytes
    return total


def tensor_bytes(obj: Any, seen: set[tuple[int, int, str]] | None = None) -> int:
    """Bytes of every tensor in `obj` (a tensor, or lists / tuples / dicts of them, nested), each storage
    view counted once per `seen` set."""
    seen = set() if seen is None else seen
    if isinstance(obj, torch.Tensor):
        return _count(obj, seen)
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(x, seen) for x in obj)
    if isinstance(obj, dict):
        return sum(tensor_bytes(x, seen) for x in obj.values())
    return 0


def weight_bytes(model: Any) -> int:
    """Bytes of the model's state dict as loaded (parameters and buffers, quantization side tensors included)."""
    seen: set[tuple[int, int, str]] = set()
    return sum(_count(v, seen) for v in model.state_dict().values() if isinstance(v, torch.Tensor))


def cache_bytes(cache: Any) -> int:
    """Bytes held by a transformers KV cache object now (every tensor reachable from its layers)."""
    seen: set[tuple[int, int, str]] = set()
    layers = getattr(cache, "layers", None)
    if layers is None:  # legacy tuple-of-tuples caches
        return tensor_bytes(cache, seen)
    return sum(tensor_bytes(list(vars(layer).values()), seen) for layer in layers)


def kv_bytes_per_token(kv_bytes: float, positions: float) -> float:
    """KV bytes per cached position (rows x sequence length, left padding included); NaN with no positions."""
    return float(kv_bytes) / float(positions) if positions > 0 else float("nan")


class KVMeter:
    """The KV-cache bytes an engine held over a trial: `note(cache, positions)` after each batch; `summary()`
    gives the peak, bytes per cached position over all batches, and peak memory.

    When: at the end of every batch (after its last token went out, so no token waits for it). That is a
    batch's longest point for dynamic and static caches; a quantized cache's full-precision residual may have
    been up to `kv_residual_length` tokens larger mid-batch. Peak memory: CUDA's max allocated since the
    engine reset it (weights, KV, activations) on a GPU; on CPU weights as loaded + peak KV (activations not
    counted)."""

    def __init__(self) -> None:
        self.peak_bytes = 0
        self._bytes_sum = 0
        self._positions_sum = 0

    def note(self, cache: Any, positions: int) -> None:
        kv = cache_bytes(cache)
        self.peak_bytes = max(self.peak_bytes, kv)
        self._bytes_sum += kv
        self._positions_sum += positions

    def summary(self, weights_bytes: int, cuda: bool) -> dict[str, Any]:
        """Empty on CPU until a batch was noted (a serving path that does not note its cache reports no KV bytes,
        rather than zero bytes that would read as a saving)."""
        out: dict[str, Any] = {}
        if self._positions_sum:
            out = {
                "kv_peak_bytes": self.peak_bytes,
                "kv_bytes_per_token": kv_bytes_per_token(self._bytes_sum, self._positions_sum),
            }
        if cuda:
            out["peak_memory_bytes"] = int(torch.cuda.max_memory_allocated())
            out["peak_memory_source"] = "torch.cuda.max_memory_allocated since start (weights, KV, activations)"
        elif self._positions_sum:
            out["peak_memory_bytes"] = int(weights_bytes) + self.peak_bytes
            out["peak_memory_source"] = "weight bytes as loaded + peak KV-cache bytes (cpu; activations not counted)"
        return out
