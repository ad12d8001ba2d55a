"""How far the fitted step costs sit from the roofline: predicted step time / the roofline's lower bound.

For each step shape the bound is max(FLOPs / peak, bytes / bandwidth) from `inferopt.locate.roofline` (the same
math step 2 uses) on the hardware profile's roofs; the ratio says how many times slower than the bound the engine
runs that step (1 = at the roof). Deliberately not here: using the bound as a fitting prior — the fit has every
step's measured time, and on a CPU this small the tiny model runs tens of times above the bound, so a prior
centred on it would only bias the fit; the ratio is reported beside the fit instead.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from inferopt.locate.hardware import HardwareProfile
from inferopt.locate.roofline import ModelDims, decode_bytes, decode_flops, prefill_bytes, prefill_flops
from inferopt.simulate.costs import CostModel, attn_pairs

BYTES_PER_ELEM = {"float32": 4.0, "bfloat16": 2.0, "float16": 2.0}


def _t_min_s(flops: float, bytes_: float, hw: HardwareProfile) -> float:
    return max(flops / hw.peak_flops_per_s, bytes_ / hw.mem_bandwidth_bytes_per_s)


def bound_ratios(
    cost: CostModel,
    dims: ModelDims,
    hw: HardwareProfile,
    decode_shapes: Sequence[tuple[int, int]] = ((1, 128), (4, 128), (8, 512)),
    prefill_shapes: Sequence[tuple[int, int]] = ((1, 64), (4, 128), (1, 512)),
) -> pd.DataFrame:
    """One row per step shape ((batch, context) for decode, (batch, prompt tokens) for prefill): the fitted
    time, the roofline bound and their ratio."""
    b = BYTES_PER_ELEM.get(hw.dtype, 2.0)
    rows = []
    for batch, ctx in decode_shapes:
        t = cost.decode_s(batch, batch * ctx)
        t_min = _t_min_s(decode_flops(dims, ctx, batch), decode_bytes(dims, ctx, batch, b, b, b), hw)
        rows.append({"phase": "decode", "batch": batch, "tokens": ctx, "fitted_s": t, "bound_s": t_min})
    for batch, n in prefill_shapes:
        t = cost.prefill_s(batch * n, attn_pairs([n] * batch, [0] * batch))
        t_min = _t_min_s(prefill_flops(dims, n, batch), prefill_bytes(dims, n, batch, b, b, b), hw)
        rows.append({"phase": "prefill", "batch": batch, "tokens": n, "fitted_s": t, "bound_s": t_min})
    df = pd.DataFrame(rows)
    df["x_bound"] = df["fitted_s"] / df["bound_s"]
    return df
