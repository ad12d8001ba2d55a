"""Step observations read off measured request records, and the cost-model fits over them (issue 18 item 1).

hf engine (static batches): the members of one batch share `admitted_s`, `prefill_start_s`, `prefill_end_s` and
every step's `token_s`, so each batch gives one prefill observation (left-padded: every row computes the widest
prompt) and one decode observation per step (every row stays in the forward until the batch ends). vLLM (span
join: per-request phases only): one prefill observation per request (scheduled -> first token, net of the
decode work sharing its step) and one decode observation per request (its mean client token gap against the
time-averaged number of requests decoding beside it and their context). Each fit's measured / predicted
ratios and the overheads' samples go on the model (`costs.Spread`); vLLM's decode ratios are of per-request
mean gaps, so narrower than one step's spread.

Deliberately not here: the cost model's own math (`simulate.costs`), any engine or run.
"""

from __future__ import annotations

import bisect
import itertools
import json
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from inferopt.locate.roofline import kv_bytes_per_token
from inferopt.locate.step import model_dims
from inferopt.records import RequestRecord
from inferopt.simulate.bound import BYTES_PER_ELEM
from inferopt.simulate.costs import (
    DECODE_FEATURES,
    PREFILL_FEATURES,
    CostModel,
    Fit,
    Overheads,
    Spread,
    cost_fields,
    fit_nnls,
    fit_ratios,
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


def _live_after(batches: Sequence[Sequence[RequestRecord]]) -> dict[tuple[str, str, int], Counter]:
    """Per run, each token stamp -> the requests stamped then that had more to generate: the sequences the
    next decode step computed (one batch runs at a time, so a stamp is one step's, resumed members included)."""
    out: dict[tuple[str, str, int], Counter] = defaultdict(Counter)
    for b in batches:
        for r in b:
            out[_run_key(r)].update(r.token_s[:-1])
    return out


def static_observations(records: Sequence[RequestRecord], live_rows: bool = False) -> dict[str, list]:
    """Prefill and decode rows (features, seconds) of every measured static batch. The decode steps are read
    off the batch's longest member that no other batch interrupted; a member without a stamp at a step that
    stamps later was preempted there (a fixed KV cache, the fake engine's) and leaves that step's count.
    `live_rows`: a step computes only the sequences still generating (the fake engine, as the simulator
    charges it: `Capabilities.finished_rows_compute`), not every row until the longest ends (hf's padded batch)."""
    px, py, dx, dy = [], [], [], []
    batches = _batches(records)
    starts = defaultdict(list)
    live = _live_after(batches) if live_rows else {}
    for b in batches:
        starts[_run_key(b[0])].append(b[0].prefill_start_s)
    for batch in batches:
        size = _batch_size(batch)
        lens = [r.input_len for r in batch] + [max(r.input_len for r in batch)] * (size - len(batch))
        cached = [r.cached_tokens for r in batch] + [0] * (size - len(batch))
        new, cache = padded_rows(lens, cached)
        if size == len(batch):  # else it held rows no record shows (resumed after a preemption): their work unknown
            px.append(prefill_features(new, cache))
            py.append(batch[0].prefill_end_s - batch[0].prefill_start_s)
        others = sorted(t for t in starts[_run_key(batch[0])] if t != batch[0].prefill_start_s)
        whole = [r for r in batch if not _interrupted(r, others)]
        if not whole:
            continue
        longest = max(whole, key=lambda r: len(r.token_s))
        width = new[0] + max(cache)
        stamped = [set(r.token_s) for r in batch]
        for k, (a_s, b_s) in enumerate(itertools.pairwise(longest.token_s), start=1):
            seqs = live[_run_key(batch[0])][a_s] if live_rows else size - _gone(batch, stamped, b_s)
            dx.append((1.0, float(seqs), seqs * (width + k) / 1000.0))
            dy.append(float(b_s - a_s))
    return {"px": px, "py": py, "dx": dx, "dy": dy}


def _gone(batch: Sequence[RequestRecord], stamped: Sequence[set[float]], b_s: float) -> int:
    """Members without a stamp at `b_s` that stamp later: preempted there (a fixed KV cache)."""
    return sum(1 for r, st in zip(batch, stamped, strict=True) if b_s not in st and r.token_s[-1] > b_s)


def _admitted_here(batch: Sequence[RequestRecord]) -> list[RequestRecord]:
    """The members first admitted in this batch (one preempted before its first token shows its first
    admission's stamp, not this batch's)."""
    last = max((r.admitted_s for r in batch if r.admitted_s is not None), default=None)
    return [r for r in batch if last is None or (r.admitted_s is not None and abs(r.admitted_s - last) < 1e-9)]


def _batch_size(batch: Sequence[RequestRecord]) -> int:
    return max(len(batch), max(r.batch_size_at_admit or 0 for r in _admitted_here(batch)))


def _run_key(r: RequestRecord) -> tuple[str, str, int]:
    return r.run_tag, r.scenario, r.trial


def _interrupted(r: RequestRecord, other_starts: Sequence[float]) -> bool:
    """Whether another batch's prefill began between this record's first and last token (it was preempted)."""
    i = bisect.bisect_right(other_starts, r.token_s[0])
    return i < len(other_starts) and other_starts[i] < r.token_s[-1]


def _median(values: Sequence[float]) -> float:
    vals = [v for v in values if v is not None and math.isfinite(v)]
    return float(np.median(vals)) if vals else 0.0


def static_overhead_samples(records: Sequence[RequestRecord], batch_wait_s: float) -> dict[str, list[float]]:
    """Every measured sample of the per-step and per-request constants (see `Overheads`) of hf records."""
    batches = _batches(records)
    ok = [r for b in batches for r in b]
    fresh = [  # batches without a member resumed after a preemption (its admission is an earlier batch's)
        b for b in batches if len(_admitted_here(b)) == len(b) == _batch_size(b) and b[0].admitted_s is not None
    ]
    fresh_starts = {id(b[0]) for b in fresh}
    gaps = []
    for prev, nxt in zip(batches, batches[1:], strict=False):  # a resumed batch's admission is an earlier one's
        end_s = max(r.token_s[-1] for r in prev)
        ready_s = max(max(r.arrival_s or 0.0 for r in nxt), min(r.arrival_s or 0.0 for r in nxt) + batch_wait_s)
        if _same_run(prev[0], nxt[0]) and ready_s <= end_s and id(nxt[0]) in fresh_starts:
            gaps.append(nxt[0].admitted_s - end_s)
    return {
        "admit_s": [b[0].prefill_start_s - b[0].admitted_s for b in fresh],
        "first_token_s": [r.token_s[0] - r.prefill_end_s for r in ok],
        "batch_gap_s": gaps,
        "send_lag_s": [r.arrival_s - r.intended_s for r in ok if r.arrival_s is not None],
        "deliver_s": [c - s for r in ok for s, c in zip(r.token_s, r.client_token_s, strict=False)],
    }


def static_overheads(records: Sequence[RequestRecord], batch_wait_s: float) -> Overheads:
    """Medians of the per-step and per-request constants (see `Overheads`) of hf records."""
    samples = static_overhead_samples(records, batch_wait_s)
    return Overheads(
        admit_s=_median(samples["admit_s"]),
        first_token_s=_median(samples["first_token_s"]),
        batch_gap_s=max(0.0, _median(samples["batch_gap_s"])),
        send_lag_s=_median(samples["send_lag_s"]),
        deliver_s=max(0.0, _median(samples["deliver_s"])),
    )


def fit_static(records: Sequence[RequestRecord], system: Any) -> CostModel:
    """The hf engine's cost model from its measured records (any number of runs; `trial` keeps them apart)."""
    obs = static_observations(records, live_rows=not system.capabilities.finished_rows_compute)
    if len(obs["py"]) < 3 or len(obs["dy"]) < 3:
        raise ValueError(
            f"fit_static: {len(obs['py'])} measured batches and {len(obs['dy'])} decode steps are too few to fit "
            "(need >= 3 of each); fix: records of ok requests with server timings from the hf engine"
        )
    wait_s = system.batching.batch_wait_ms / 1000.0
    px, py, dx, dy = (np.array(obs[k], float) for k in ("px", "py", "dx", "dy"))
    prefill, decode = fit_nnls(px, py, PREFILL_FEATURES), fit_nnls(dx, dy, DECODE_FEATURES)
    samples = static_overhead_samples(records, wait_s)
    spread = Spread(
        prefill_ratio=fit_ratios(prefill, px, py),
        decode_ratio=fit_ratios(decode, dx, dy),
        **{k: tuple(float(v) for v in samples[k]) for k in ("admit_s", "first_token_s", "batch_gap_s", "deliver_s")},
    )
    return CostModel(
        engine=system.engine,
        fingerprint=system_fingerprint(system),
        fields_json=json.dumps(cost_fields(system), sort_keys=True, default=str),
        system_name=system.name,
        prefill=prefill,
        decode=decode,
        overheads=static_overheads(records, wait_s),
        spread=spread,
        notes=("fitted per step from the hf engine's batch timestamps",),
        stats={"batches": float(len(obs["py"])), "decode_steps": float(len(obs["dy"]))},
    )


def fitter_for(system: Any) -> Callable[[Sequence[RequestRecord], Any], CostModel] | None:
    """The fit that reads this system's records: per-step batch timestamps (hf, fake: in-process engines that
    stamp every step), per-request phases (a paged-KV server, vLLM), else None."""
    caps = system.capabilities
    if caps.kv_budget is None:
        return fit_static if hasattr(system, "batching") else None
    dims = model_dims(system) if caps.model is not None else None
    per_token = kv_bytes_per_token(dims, BYTES_PER_ELEM.get(str(getattr(system, "dtype", "")), 2.0)) if dims else None
    return lambda records, sys_: fit_phases(records, sys_, per_token)


def _running_profile(
    records: Sequence[RequestRecord], t0_s: float, t1_s: float, samples: int = 24
) -> tuple[float, float]:
    """Time-averaged (requests decoding, their total context) over [t0, t1]: a request decodes from its first
    token to its done time, its context growing linearly from its prompt to prompt + output."""
    seqs, ctx = 0.0, 0.0
    for t in np.linspace(t0_s, t1_s, samples):
        for r in records:
            if r.prefill_end_s <= t < r.done_s:
                seqs += 1.0
                ctx += r.input_len + (t - r.prefill_end_s) / (r.done_s - r.prefill_end_s) * r.output_len
    return seqs / samples, ctx / samples


def _peer_prefill(records: Sequence[RequestRecord], t0_s: float, t1_s: float) -> tuple[float, float]:
    """Prompt tokens and attention pairs (/1000) other requests prefilled within [t0, t1], each spread evenly
    over its own scheduled -> first-token window."""
    tokens, pairs = 0.0, 0.0
    for r in records:
        span = r.prefill_end_s - r.admitted_s
        overlap = min(t1_s, r.prefill_end_s) - max(t0_s, r.admitted_s)
        if overlap > 0 and span > 0:
            _, tok, kp = prefill_features([max(1, r.input_len - r.cached_tokens)], [r.cached_tokens])
            tokens += tok * overlap / span
            pairs += kp * overlap / span
    return tokens, pairs


def phase_observations(records: Sequence[RequestRecord]) -> dict[str, list]:
    """vLLM (span join): one decode row per request (its mean server token gap vs the requests decoding beside
    it and the prompt work sharing its steps) and one prefill row (scheduled -> first token vs the prompt work
    of its steps: its own and that of the requests prefilling beside it, which the same steps computed)."""
    ok = [r for r in records if r.outcome == "ok" and not r.warmup and r.admitted_s is not None and r.done_s]
    ok = [r for r in ok if r.prefill_end_s is not None]
    dx, dy, pre = [], [], []
    for r in ok:
        peers = [p for p in ok if _same_run(p, r) and p is not r]
        steps = r.output_len - 1
        if steps >= 2 and r.done_s > r.prefill_end_s:
            seqs, ctx = _running_profile([*peers, r], r.prefill_end_s, r.done_s)
            tok, kp = _peer_prefill(peers, r.prefill_end_s, r.done_s)
            dx.append((1.0, seqs, ctx / 1000.0, tok / steps, kp / steps))
            dy.append((r.done_s - r.prefill_end_s) / steps)
        new = max(1, r.input_len - r.cached_tokens)
        seqs, ctx = _running_profile(peers, r.admitted_s, r.prefill_end_s, 4)
        one, tok, kp = prefill_features([new], [r.cached_tokens])
        peer_tok, peer_kp = _peer_prefill(peers, r.admitted_s, r.prefill_end_s)
        pre.append(((one, tok + peer_tok, kp + peer_kp), r.prefill_end_s - r.admitted_s, seqs, ctx))
    return {"dx": dx, "dy": dy, "pre": pre}


def first_delivery(records: Sequence[RequestRecord]) -> tuple[Fit, np.ndarray, np.ndarray] | None:
    """vLLM's first-token delivery (client first token - server first token) against the streams in flight
    then (requests of the same run past their first token and not done, itself included): the API server
    serialises every stream's output, so the first token waits longer beside more of them."""
    ok = [r for r in records if r.outcome == "ok" and not r.warmup and r.client_token_s and r.prefill_end_s]
    runs: dict[tuple[str, str, int], list[RequestRecord]] = defaultdict(list)
    for r in ok:
        if r.done_s is not None:
            runs[_run_key(r)].append(r)
    x, y = [], []
    for run in runs.values():
        for r in run:
            t = r.prefill_end_s
            streams = sum(1 for p in run if p.prefill_end_s <= t < p.done_s)
            x.append((1.0, float(max(streams, 1))))
            y.append(r.client_token_s[0] - t)
    if len(y) < 3:
        return None
    xa, ya = np.array(x, float), np.array(y, float)
    return fit_nnls(xa, ya, ("first_deliver_s", "first_per_stream_s")), xa, ya


def fit_phases(records: Sequence[RequestRecord], system: Any, kv_bytes_per_token: float | None = None) -> CostModel:
    """A continuous-batching engine's cost model from per-request phases (vLLM's span join)."""
    obs = phase_observations(records)
    if len(obs["dy"]) < 3 or len(obs["pre"]) < 3:
        raise ValueError(
            f"fit_phases: {len(obs['pre'])} requests with phases and {len(obs['dy'])} with 3+ tokens are too few "
            "(need >= 3 of each); fix: records joined with server spans (vLLM tracing: true)"
        )
    jx, jy = np.array(obs["dx"], float), np.array(obs["dy"], float)
    joint = fit_nnls(jx, jy, (*DECODE_FEATURES, "peer_token_s", "peer_kpair_s"))
    n = len(DECODE_FEATURES)
    decode = Fit(DECODE_FEATURES, joint.coef[:n], joint.residuals_s, joint.r2, joint.n)
    px, py = [], []
    for x, y, seqs, ctx in obs["pre"]:  # the step that produced the first token also decoded its peers
        shared = decode.predict_s((1.0, seqs, ctx / 1000.0)) - decode.coef[0] if seqs >= 0.5 else 0.0
        px.append(x)
        py.append(max(0.0, y - shared))
    ok = [r for r in records if r.outcome == "ok" and not r.warmup]
    stats = {"requests": float(len(ok))}
    if kv_bytes_per_token:
        stats["kv_bytes_per_token"] = float(kv_bytes_per_token)
    px, py = np.array(px, float), np.array(py, float)
    prefill = fit_nnls(px, py, PREFILL_FEATURES)
    first = first_delivery(records)  # None (too few): the first token is delivered like the others
    stream_lag = [r.client_token_s[-1] - r.done_s for r in ok if r.client_token_s and r.done_s is not None]
    spread = Spread(
        prefill_ratio=fit_ratios(prefill, px, py),
        decode_ratio=fit_ratios(joint, jx, jy),
        deliver_s=tuple(float(max(0.0, v)) for v in stream_lag),
        first_deliver_ratio=fit_ratios(*first) if first else (),
    )
    return CostModel(
        engine=system.engine,
        fingerprint=system_fingerprint(system),
        fields_json=json.dumps(cost_fields(system), sort_keys=True, default=str),
        system_name=system.name,
        prefill=prefill,
        decode=decode,
        spread=spread,
        overheads=Overheads(
            send_lag_s=_median([r.arrival_s - r.intended_s for r in ok if r.arrival_s is not None]),
            deliver_s=max(0.0, _median(stream_lag)),  # a stream's last token: its others arrive like it
            first_deliver_s=float(first[0].coef[0]) if first else None,
            first_per_stream_s=float(first[0].coef[1]) if first else 0.0,
        ),
        notes=("fitted per request from span phases: decode vs the requests running beside it",),
        stats=stats,
    )
