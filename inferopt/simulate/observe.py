"""Step observations read off measured request records, and the cost-model fits over them (issue 18 item 1).

hf engine (static batches): the members of one batch share `admitted_s`, `prefill_start_s`, `prefill_end_s` and
every step's `token_s`, so each batch gives one prefill observation (left-padded: every row computes the widest
prompt) and one decode observation per step (every row stays in the forward until the batch ends). vLLM (span
join: per-request phases only): one prefill observation per request (scheduled -> first token, net of the
decode work sharing its step) and one decode observation per request (its mean client token gap against the
time-averaged number of requests decoding beside it and their context).

Deliberately not here: the cost model's own math (`simulate.costs`), any engine or run.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from inferopt.records import RequestRecord
from inferopt.simulate.costs import (
    DECODE_FEATURES,
    PREFILL_FEATURES,
    CostModel,
    Overheads,
    fit_nnls,
    padded_rows,
    prefill_features,
    system_fingerprint,
)


def _batches(records: Sequence[RequestRecord]) -> list[list[RequestRecord]]:
    """Measured static batches (members share their prefill start), in time order."""
    groups: dict[tuple[str, str, int, float], list[RequestRecord]] = defaultdict(list)
    for r in records:
        if r.warmup or r.prefill_start_s is None or r.prefill_end_s is None or not r.token_s:
            continue
        groups[(r.run_tag, r.scenario, r.trial, round(r.prefill_start_s, 6))].append(r)
    return [groups[k] for k in sorted(groups)]


def _same_run(a: RequestRecord, b: RequestRecord) -> bool:
    return (a.run_tag, a.scenario, a.trial) == (b.run_tag, b.scenario, b.trial)


def static_observations(records: Sequence[RequestRecord]) -> dict[str, list]:
    """Prefill and decode rows (features, seconds) of every measured hf batch."""
    px, py, dx, dy = [], [], [], []
    for batch in _batches(records):
        size = max(len(batch), max(r.batch_size_at_admit or 0 for r in batch))
        lens = [r.input_len for r in batch] + [max(r.input_len for r in batch)] * (size - len(batch))
        cached = [r.cached_tokens for r in batch] + [0] * (size - len(batch))
        new, cache = padded_rows(lens, cached)
        px.append(prefill_features(new, cache))
        py.append(batch[0].prefill_end_s - batch[0].prefill_start_s)
        longest = max(batch, key=lambda r: len(r.token_s))
        width = new[0] + max(cache)
        for k, gap_s in enumerate(np.diff(longest.token_s), start=1):
            dx.append((1.0, float(size), size * (width + k) / 1000.0))
            dy.append(float(gap_s))
    return {"px": px, "py": py, "dx": dx, "dy": dy}


def _median(values: Sequence[float]) -> float:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.median(vals)) if vals else 0.0


def static_overheads(records: Sequence[RequestRecord], batch_wait_s: float) -> Overheads:
    """Medians of the per-step and per-request constants (see `Overheads`) of hf records."""
    batches = _batches(records)
    gaps = []
    for prev, nxt in zip(batches, batches[1:], strict=False):
        end_s = max(r.token_s[-1] for r in prev)
        ready_s = max(max(r.arrival_s or 0.0 for r in nxt), min(r.arrival_s or 0.0 for r in nxt) + batch_wait_s)
        if _same_run(prev[0], nxt[0]) and ready_s <= end_s and nxt[0].admitted_s is not None:
            gaps.append(nxt[0].admitted_s - end_s)
    ok = [r for b in batches for r in b]
    return Overheads(
        admit_s=_median([r.prefill_start_s - r.admitted_s for r in ok if r.admitted_s is not None]),
        first_token_s=_median([r.token_s[0] - r.prefill_end_s for r in ok]),
        batch_gap_s=max(0.0, _median(gaps)),
        send_lag_s=_median([r.arrival_s - r.intended_s for r in ok if r.arrival_s is not None]),
        deliver_s=_deliver_s(ok),
    )


def _deliver_s(records: Sequence[RequestRecord]) -> float:
    gaps = [c - s for r in records for s, c in zip(r.token_s, r.client_token_s, strict=False)]
    return max(0.0, _median(gaps))


def fit_static(records: Sequence[RequestRecord], system: Any) -> CostModel:
    """The hf engine's cost model from its measured records (any number of runs; `trial` keeps them apart)."""
    obs = static_observations(records)
    if len(obs["py"]) < 3 or len(obs["dy"]) < 3:
        raise ValueError(
            f"fit_static: {len(obs['py'])} measured batches and {len(obs['dy'])} decode steps are too few to fit "
            "(need >= 3 of each); fix: records of ok requests with server timings from the hf engine"
        )
    wait_s = system.batching.batch_wait_ms / 1000.0
    return CostModel(
        engine=system.engine,
        fingerprint=system_fingerprint(system),
        system_name=system.name,
        prefill=fit_nnls(np.array(obs["px"]), np.array(obs["py"]), PREFILL_FEATURES),
        decode=fit_nnls(np.array(obs["dx"]), np.array(obs["dy"]), DECODE_FEATURES),
        overheads=static_overheads(records, wait_s),
        notes=("fitted per step from the hf engine's batch timestamps",),
        stats={"batches": float(len(obs["py"])), "decode_steps": float(len(obs["dy"]))},
    )


def fitter_for(system: Any) -> Any:
    """The fit that reads this system's records: per-step batch timestamps (hf, fake: in-process engines that
    stamp every step), else None (an engine whose records carry per-request phases only)."""
    return fit_static if system.capabilities.kv_budget is None and hasattr(system, "batching") else None
