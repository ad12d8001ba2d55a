"""Counted FLOPs (SPEC L2): `torch.utils.flop_counter.FlopCounterMode` on a real forward, made to see CPU sdpa, and
the cross-check of the analytic cost model (`roofline.prefill_flops` / `decode_flops`) against it.

FlopCounterMode has formulas for the CUDA sdpa kernels but none for
`aten._scaled_dot_product_flash_attention_for_cpu`, so on CPU it silently counts 0 FLOPs for attention
(torch.profiler's `with_flops` misses it too). `register_cpu_sdpa_flops()` registers torch's own sdpa formula
for it — 4 x b x h_q x s_q x s_k x d (GQA: the kernel broadcasts KV heads, so h_q counts), the full s_q x s_k
rectangle as for the CUDA kernels — once per process (FlopCounterMode copies the registry when constructed, so
register before creating the counter; `count_flops` does). `flops_check` puts counted next to analytic FLOPs,
one tidy row per (phase, context, batch) with the relative error.

What this module deliberately does not do: count bytes (FlopCounterMode cannot; they are analytic only, see
roofline.py), or count non-matmul FLOPs (norms, rotary, softmax: neither side counts them).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from inferopt.locate.roofline import ModelDims, decode_flops, prefill_flops

FLOPS_CHECK_COLUMNS = (
    "phase",
    "context_len",
    "batch",
    "analytic_flops",
    "counted_flops",
    "rel_err",
    "counted_sdpa_flops",
)
_SDPA_CPU_OPS = ("_scaled_dot_product_flash_attention_for_cpu",)


def register_cpu_sdpa_flops() -> list[str]:
    """Register the sdpa FLOP formula for the CPU sdpa kernel(s) torch lacks one for. Idempotent: an op
    that already has a formula (registered by us earlier, or by a newer torch) is left alone. Returns the
    names of the ops registered by this call."""
    import torch
    from torch.utils import flop_counter

    done = []
    for name in _SDPA_CPU_OPS:
        packet = getattr(torch.ops.aten, name, None)
        if packet is None or packet in flop_counter.flop_registry:
            continue

        def _cpu_sdpa_flop(
            query_shape, key_shape, value_shape, *args: Any, out_shape: Any = None, **kwargs: Any
        ) -> int:
            return flop_counter.sdpa_flop_count(query_shape, key_shape, value_shape)

        flop_counter.register_flop_formula(packet)(_cpu_sdpa_flop)
        done.append(name)
    return done


def count_flops(fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, int, dict[str, int]]:
    """Run `fn(*args, **kwargs)` under FlopCounterMode (CPU sdpa registered first). Returns the result,
    the total FLOPs and the FLOPs per aten op name."""
    from torch.utils.flop_counter import FlopCounterMode

    register_cpu_sdpa_flops()
    with FlopCounterMode(display=False) as counter:
        out = fn(*args, **kwargs)
    per_op = {str(k): int(v) for k, v in counter.get_flop_counts().get("Global", {}).items()}
    return out, int(counter.get_total_flops()), per_op


def _sdpa_flops(per_op: dict[str, int]) -> int:
    return sum(v for k, v in per_op.items() if "scaled_dot_product" in k)


def flops_check(model: Any, context_lens: Iterable[int], batches: Iterable[int], *, seed: int = 0) -> pd.DataFrame:
    """Analytic vs counted FLOPs for a prefill of `context_len` tokens per sequence and one decode step
    on that cache (the next token attends to `context_len` cached tokens + itself), for every context
    length x batch. The forwards are the engine's (`inferopt.engines.hf.loop.GreedyBatch`: `logits_to_keep=1`,
    DynamicCache, no padding). Columns: FLOPS_CHECK_COLUMNS; rel_err = |analytic - counted| / counted."""
    import torch

    from inferopt.engines.hf.loop import GreedyBatch  # lazy: imports torch and transformers

    dims = ModelDims.from_hf_config(model.config)
    device = next(model.parameters()).device
    vocab = int(model.config.vocab_size)
    gen = torch.Generator().manual_seed(seed)
    rows = []
    for ctx in context_lens:
        for batch in batches:
            ids = torch.randint(3, vocab, (int(batch), int(ctx)), generator=gen).to(device)
            run = GreedyBatch(model, ids, None, 2)
            _, prefill_counted, prefill_ops = count_flops(run.prefill)
            _, decode_counted, decode_ops = count_flops(run.step)
            for phase, analytic, counted, ops in (
                ("prefill", prefill_flops(dims, int(ctx), int(batch)), prefill_counted, prefill_ops),
                ("decode", decode_flops(dims, int(ctx), int(batch)), decode_counted, decode_ops),
            ):
                rows.append(
                    {
                        "phase": phase,
                        "context_len": int(ctx),
                        "batch": int(batch),
                        "analytic_flops": float(analytic),
                        "counted_flops": float(counted),
                        "rel_err": abs(analytic - counted) / counted if counted else float("inf"),
                        "counted_sdpa_flops": float(_sdpa_flops(ops)),
                    }
                )
    return pd.DataFrame(rows, columns=list(FLOPS_CHECK_COLUMNS))
