"""Slicing (M4) and distributions (M5): bucket requests by input length, output length, concurrency and
cache hit, then summarise TTFT / TPOT / E2E and the phases as p50 / p95 / p99 in a long, tidy table.

Bucket edges are fixed from the *workload* (not from each arm's measurements), so two arms replaying the
same workload are sliced identically and their tables concatenate.

Deliberately not here: statistical comparison between arms (`inferopt.stats.inference`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from inferopt.measure.slo import RequestSLO
from inferopt.stats.inference import quantile
from inferopt.workload.sessions import expected_prompt_len

SLICE_DIMS = ("input_bucket", "output_bucket", "concurrency_bucket", "cache_hit")
LATENCY_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms", "queue_ms", "prefill_ms", "decode_ms", "itl_ms_p99", "itl_ms_max")
QUANTILES = (0.5, 0.95, 0.99)


@dataclass(frozen=True)
class SliceEdges:
    input_len: tuple[float, ...]
    output_len: tuple[float, ...]
    concurrency: tuple[float, ...] = (1, 2, 4, 8, 16, 32, 64)


def edges_from_workload(workload: pd.DataFrame) -> SliceEdges:
    """Tercile edges of the workload's own input and output lengths (short / medium / long). For a session load
    the input edges come from each turn's planned prompt (history + new message, `expected_prompt_len`), the
    length its record will carry, not from the new message alone."""

    def terciles(values: pd.Series) -> tuple[float, ...]:
        qs = np.unique(np.quantile(values.to_numpy(float), [1 / 3, 2 / 3]))
        return tuple(float(q) for q in qs)

    return SliceEdges(input_len=terciles(expected_prompt_len(workload)), output_len=terciles(workload["output_len"]))


def _bucket(values: pd.Series, edges: tuple[float, ...], names: tuple[str, ...] | None = None) -> pd.Series:
    bins = [-np.inf, *edges, np.inf]
    if names is None or len(names) != len(bins) - 1:
        labels = (
            [f"<={edges[0]:g}"]
            + [f"({a:g},{b:g}]" for a, b in zip(edges, edges[1:], strict=False)]
            + [f">{edges[-1]:g}"]
            if edges
            else ["all"]
        )
    else:
        labels = list(names)
    return pd.cut(values.astype(float), bins=bins, labels=labels).astype(str)


NO_CACHE = "not applicable"  # the cache-hit slice of an engine without a prefix cache: not a miss


def add_slices(phases: pd.DataFrame, edges: SliceEdges, prefix_cache: bool | None = True) -> pd.DataFrame:
    """The four slice columns; `prefix_cache` False (the engine declares none) makes every request's cache-hit
    slice "not applicable" rather than "miss"."""
    out = phases.copy()
    size_names = ("short", "medium", "long")
    out["input_bucket"] = _bucket(out["input_len"], edges.input_len, size_names if len(edges.input_len) == 2 else None)
    out["output_bucket"] = _bucket(
        out["target_output_len"], edges.output_len, size_names if len(edges.output_len) == 2 else None
    )
    out["concurrency_bucket"] = _bucket(out["concurrency"], edges.concurrency)
    out["cache_hit"] = out["cache_hit"].map({True: "hit", False: "miss"}) if prefix_cache is not False else NO_CACHE
    return out


def summarize(
    phases: pd.DataFrame,
    group: tuple[str, ...] = ("arm",),
    metrics: tuple[str, ...] = LATENCY_METRICS,
    slice_dims: tuple[str, ...] = SLICE_DIMS,
    slo: RequestSLO | None = None,
    duration_s: float | None = None,
) -> pd.DataFrame:
    """Long table: group cols…, slice_dim, slice_value, metric, stat, value, unit.

    slice_dim 'all' is the whole run; latency stats are over ok requests only; counts and rates of every
    outcome are over all requests (failures are in the denominator). With `slo` and `duration_s`: per view
    the share meeting each SLO bound and all of them, and goodput (req/s, tok/s), also per tenant.
    """
    rows: list[dict] = []
    group = tuple(g for g in group if g in phases.columns)
    dims = (*slice_dims, "tenant") if slo is not None else slice_dims
    views = [("all", "all", phases)] + [
        (dim, str(value), sub)
        for dim in dims
        if dim in phases.columns
        for value, sub in phases.groupby(dim, observed=True)
    ]
    for dim, value, view in views:
        for keys, sub in view.groupby(list(group), observed=True) if group else [((), view)]:
            keys = keys if isinstance(keys, tuple) else (keys,)
            base = dict(zip(group, keys, strict=False), slice_dim=dim, slice_value=value)
            ok = sub[sub["outcome"] == "ok"]
            rows.append({**base, "metric": "requests", "stat": "count", "value": float(len(sub)), "unit": "req"})
            if slo is not None and duration_s is not None:
                rows += _slo_rows(base, slo.attainment(sub, duration_s))
            for outcome in ("ok", "timeout", "rejected", "error"):
                rate = float((sub["outcome"] == outcome).mean()) if len(sub) else float("nan")
                rows.append({**base, "metric": f"{outcome}_rate", "stat": "mean", "value": rate, "unit": "fraction"})
            for metric in metrics:
                vals = ok[metric].dropna().to_numpy(float) if metric in ok else np.array([])
                for q in QUANTILES:
                    rows.append(
                        {
                            **base,
                            "metric": metric,
                            "stat": f"p{int(q * 100)}",
                            "value": quantile(vals, q),
                            "unit": "ms",
                        }
                    )
                rows.append(
                    {
                        **base,
                        "metric": metric,
                        "stat": "mean",
                        "value": float(vals.mean()) if len(vals) else float("nan"),
                        "unit": "ms",
                    }
                )
    return pd.DataFrame(rows, columns=[*group, "slice_dim", "slice_value", "metric", "stat", "value", "unit"])


def _slo_rows(base: dict, attainment: dict[str, float]) -> list[dict]:
    units = {"goodput_req_per_s": "req/s", "goodput_tok_per_s": "tok/s"}
    return [
        {**base, "metric": k, "stat": "rate" if k in units else "mean", "value": v, "unit": units.get(k, "fraction")}
        for k, v in attainment.items()
    ]


def throughput(phases: pd.DataFrame, duration_s: float) -> dict[str, float]:
    """Run-level rates over the measured window: output tokens/s and successful requests/s."""
    ok = phases[phases["outcome"] == "ok"]
    d = max(duration_s, 1e-9)
    return {
        "output_tok_per_s": float(ok["output_len"].sum()) / d,
        "ok_req_per_s": float(len(ok)) / d,
        "offered_req_per_s": float(len(phases)) / d,
    }


def headline(phases: pd.DataFrame, duration_s: float, slo: RequestSLO | None = None) -> dict[str, float]:
    """The flat per-run metrics logged to MLflow: p50/p95/p99 of the user-facing latencies, rates, throughput;
    with `slo`, the share meeting each SLO bound and all of them and goodput (failures in the denominator)."""
    ok = phases[phases["outcome"] == "ok"]
    out: dict[str, float] = {"requests": float(len(phases))}
    for metric in ("ttft_ms", "tpot_ms", "e2e_ms", "queue_ms", "prefill_ms"):
        vals = ok[metric].dropna().to_numpy(float)
        for q in QUANTILES:
            out[f"{metric}_p{int(q * 100)}"] = quantile(vals, q)
    for outcome in ("ok", "timeout", "rejected", "error"):
        out[f"{outcome}_rate"] = float((phases["outcome"] == outcome).mean()) if len(phases) else float("nan")
    out.update(throughput(phases, duration_s))
    if slo is not None:
        out.update(slo.attainment(phases, duration_s))
    return out


def cache_hits(phases: pd.DataFrame, server_metrics: dict[str, float] | None) -> dict[str, float]:
    """The prefix cache seen two ways: the engine's own counters over the run (prompt tokens hit / queried,
    vLLM's `prefix_cache_hits_total` / `prefix_cache_queries_total` deltas) and our per-request records (the
    share of ok requests' prompt tokens served from cache, and of requests with any). Empty when neither has it."""
    out: dict[str, float] = {}
    sm = server_metrics or {}
    hits, queries = sm.get("prefix_cache_hits_total"), sm.get("prefix_cache_queries_total")
    if hits is not None and queries:
        out["engine_cache_hit_rate"] = float(hits) / float(queries)
    ok = phases[phases["outcome"] == "ok"]
    if "cached_tokens" in ok and len(ok):
        cached = pd.to_numeric(ok["cached_tokens"]).fillna(0)
        out["cached_token_share"] = float(cached.sum()) / max(float(ok["input_len"].sum()), 1.0)
        out["cache_hit_request_share"] = float((cached > 0).mean())
    return out
