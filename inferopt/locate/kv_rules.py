"""The KV-capacity rule of the locate verdict (SPEC L3; rule 1 of `inferopt.locate.bottleneck`): does the KV
cache, not compute, bandwidth or the queue, hold the load back? Every number it looks at is returned as an
evidence row, fired or not.

Signals (`kv_check` lists them): A, the KV the running batch needs against the budget; B, our concurrency
ceiling against the concurrency the load asks for; C, the engine's peak KV usage near full; D, preemptions.
It fires on A alone, on C and D together, or on B and D together (why B needs D: docs/method.md, L3).
Queued requests hold no KV, so A uses the running batch, not requests in flight; B states the demand.

What this module deliberately does not do: compute the KV table (kv.py), read the server (the engine and
`inferopt.locate.step` do), or decide between the other causes (bottleneck.py).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from inferopt.locate.evidence import confidence as _conf
from inferopt.locate.evidence import evidence_row as _row

KV_CONTEXT_QUANTILE = 0.95  # per-request context (input + output tokens) used for the KV need
KV_USAGE_FULL = 0.95  # server-reported KV usage at which the cache counts as full


def kv_check(
    phases: pd.DataFrame,
    ok: pd.DataFrame,
    kv: pd.DataFrame | None,
    knobs: dict[str, Any],
    evidence: list[dict[str, Any]],
) -> tuple[bool, float, str]:
    """(fired, confidence, rule text) of the KV-capacity rule; appends its evidence rows.

    `kv`: `inferopt.locate.kv.kv_table` (KV bytes per token, the KV budget). `knobs`, all optional:
    max_batch_size (vLLM: max_num_seqs); observed_concurrency (peak sequences the engine reported running,
    vLLM's num_requests_running sampled); kv_cache_usage_frac_max (peak KV usage 0..1, vLLM's
    kv_cache_usage_perc sampled); num_preemptions (vLLM's num_preemptions_total, counter delta). Signals:
    A. kv.needed_bytes — running concurrency (max of batch_size_at_admit and observed_concurrency) x the
       KV_CONTEXT_QUANTILE context (input + output tokens) x KV bytes per token, against the budget;
    B. kv.concurrency_ceiling — floor(budget / (context x bytes per token)) against the peak requests in
       flight (`concurrency`, at each arrival) capped at max_batch_size; evidence only on its own;
    C. kv.server_usage_frac_max — the engine's peak KV usage at or above KV_USAGE_FULL;
    D. kv.preemptions — the engine evicted at least one sequence.
    Confidence: A's margin (0.5 at the budget, 1.0 at twice it), 0.8 for C+D, 0.7 for B+D; +0.1 for each
    further fired signal that agrees, at most 1.0."""
    usage = knobs.get("kv_cache_usage_frac_max")
    preempt = knobs.get("num_preemptions")
    base = ok if not ok.empty else phases
    fired: list[tuple[str, float, str]] = []  # (signal, confidence, text)
    need_over = ceiling_over = False
    if kv is not None and not kv.empty and len(base):
        per_tok = kv_per_token(kv)
        budget = float(kv["budget_bytes"].iloc[0])
        ctx = float(np.quantile((base["input_len"] + base["output_len"]).to_numpy(dtype=float), KV_CONTEXT_QUANTILE))
        running = _max(base.get("batch_size_at_admit"))
        running = max(running, float(knobs.get("observed_concurrency") or 0.0))
        need = running * ctx * per_tok
        need_over = need > budget
        evidence.append(
            _row(
                "kv.needed_bytes",
                need,
                budget,
                "bytes",
                need_over,
                f"peak running concurrency {running:g} x p{KV_CONTEXT_QUANTILE * 100:g} context {ctx:g} tok x "
                f"{per_tok:g} B/token vs KV budget {budget:g} B",
            )
        )
        if need_over:
            ratio = need / budget if budget > 0 else math.inf
            conf = _conf(math.log2(ratio)) if math.isfinite(ratio) else 1.0
            fired.append(
                (
                    "A",
                    conf,
                    (
                        f"KV needed for the running concurrency ({need / 1e9:.3g} GB = {running:g} x "
                        f"{ctx:g} tok x {per_tok:g} B) exceeds the KV budget ({budget / 1e9:.3g} GB)"
                    ),
                )
            )
        ceiling = math.floor(budget / (ctx * per_tok)) if ctx * per_tok > 0 else math.inf
        demand = _max(base.get("concurrency"))
        cap = knobs.get("max_batch_size")
        if cap:
            demand = min(demand, float(cap))
        demand = max(demand, running)
        ceiling_over = demand > ceiling
        evidence.append(
            _row(
                "kv.concurrency_ceiling",
                float(ceiling),
                demand,
                "sequences (threshold = demand)",
                ceiling_over,
                f"our KV math: {budget:g} B / ({ctx:g} tok x {per_tok:g} B/token) = {ceiling:g} sequences "
                f"at the p{KV_CONTEXT_QUANTILE * 100:g} context; the load asks for {demand:g} (peak in "
                f"flight{f', capped at max batch {cap}' if cap else ''})",
            )
        )
    if usage is not None:
        full = float(usage) >= KV_USAGE_FULL
        evidence.append(
            _row(
                "kv.server_usage_frac_max",
                float(usage),
                KV_USAGE_FULL,
                "fraction",
                full,
                "the engine's peak KV usage during the run (sampled)",
            )
        )
    else:
        full = False
    if preempt is not None:
        evicted = float(preempt) > 0
        evidence.append(
            _row(
                "kv.preemptions",
                float(preempt),
                0.0,
                "sequences",
                evicted,
                "sequences the engine preempted (evicted from the KV cache) during the run",
            )
        )
    else:
        evicted = False
    if full and evicted:
        fired.append(
            (
                "CD",
                0.8,
                (
                    f"the engine reported its KV cache {float(usage):.0%} full and preempted "
                    f"{float(preempt):g} sequences"
                ),
            )
        )
    if ceiling_over and evicted:
        fired.append(
            (
                "BD",
                0.7,
                (f"the load asks for more sequences than our KV math fits and the engine preempted {float(preempt):g}"),
            )
        )
    if not fired:
        return False, 0.0, ""
    signals = {"A": need_over, "B": ceiling_over, "C": full, "D": evicted}
    best = max(fired, key=lambda f: f[1])
    extra = sum(1 for s, on in signals.items() if on and s not in best[0])
    conf = round(min(1.0, best[1] + 0.1 * extra), 3)
    agree = [f[2] for f in fired if f is not best]
    rule = best[2] + "".join(f"; and {a}" for a in agree) + " -> kv_capacity"
    return True, conf, rule


def kv_per_token(kv: pd.DataFrame) -> float:
    """KV bytes per token from a kv_table (its column, else the first non-empty row's ratio)."""
    if "kv_bytes_per_token" in kv:
        return float(kv["kv_bytes_per_token"].iloc[0])
    row = kv[kv["context_len_tok"] > 0].iloc[0]
    return float(row["kv_bytes_per_request"]) / float(row["context_len_tok"])


def _max(values: pd.Series | None) -> float:
    if values is None:
        return 0.0
    arr = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)
    arr = arr[np.isfinite(arr)]
    return float(arr.max()) if arr.size else 0.0
