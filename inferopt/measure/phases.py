"""Records -> per-request phase metrics (M2, M3): pure functions of raw timestamps, in milliseconds, per request:

  TTFT      = client first token - intended send time          (what the user saw)
            = send_lag + Q + C_context + T_prefill + T_first + residual_ttft
  send_lag  = sent - intended - history    (client behind schedule)
  Q         = admitted - arrival           (engine queue)
  C_context = context_ready - admitted + history (prompt/context preparation; history = a session's store read)
  T_prefill = prefill_end - context_ready  (the prefill forward: all prompt tokens, builds KV)
  T_first   = first token emitted - prefill_end  (sampling + emission of the first token)
  residual  = what the engine did not see: transport to the engine and back to the client.
  TPOT      = mean gap between client tokens after the first; E2E = client done - intended
            = TTFT + (N-1) x TPOT + T_external + residual_e2e   (T_external: a turn's measured tool calls).
A residual is reported per request, never folded away; `decomposition_check` says whether it adds up (SPEC M3).
Deliberately not here: percentiles and slicing (`slices.py`), verdicts (`inferopt.locate`).
"""

from __future__ import annotations

import sys
from typing import Iterable

import numpy as np
import pandas as pd

from inferopt.records import ITL_COLUMNS, RequestRecord, records_to_frame

PHASE_COLUMNS = (
    "send_lag_ms",
    "queue_ms",
    "context_ms",
    "prefill_ms",
    "first_ms",
    "ttft_ms",
    "ttft_server_ms",
    "tpot_ms",
    "decode_ms",
    "e2e_ms",
    "external_ms",
    "history_ms",
    "ttft_residual_ms",
    "e2e_residual_ms",
)


def _ms(a: pd.Series, b: pd.Series) -> pd.Series:
    return (pd.to_numeric(a, errors="coerce") - pd.to_numeric(b, errors="coerce")) * 1000.0


def concurrency_at_arrival(start_s: np.ndarray, end_s: np.ndarray) -> np.ndarray:
    """For each request, how many requests (itself included) were in flight at its intended start."""
    start_s = np.asarray(start_s, dtype=float)
    end_s = np.where(np.isnan(np.asarray(end_s, dtype=float)), np.inf, end_s)
    starts_sorted = np.sort(start_s)
    ends_sorted = np.sort(end_s)
    started = np.searchsorted(starts_sorted, start_s, side="right")
    ended = np.searchsorted(ends_sorted, start_s, side="right")
    return (started - ended).astype(int)


def phase_table(records: Iterable[RequestRecord] | pd.DataFrame) -> pd.DataFrame:
    """One row per (non-warm-up) request with the phase metrics in ms; failed requests keep their row
    with NaN where a phase never happened."""
    df = records if isinstance(records, pd.DataFrame) else records_to_frame(records)
    df = df[~df["warmup"].astype(bool)].copy() if "warmup" in df else df.copy()
    out = df[
        [
            "request_id",
            "run_tag",
            "arm",
            "trial",
            "scenario",
            "outcome",
            "error",
            "tenant",
            "priority",
            "prefix_group",
            "input_len",
            "target_output_len",
            "output_len",
            "cached_tokens",
            "batch_size_at_admit",
            "finish_reason",
        ]
    ].copy()
    for col, missing in (("session_id", ""), ("turn", -1), ("session_turns", 0)):  # older records lack them
        out[col] = df[col] if col in df else missing
    # a tool-call turn's answer: 1 / 0 when scored (`inferopt.measure.tool_turns`), NaN when not asked or not applicable
    out["tool_args_ok"] = df["tool_args_ok"].map({True: 1.0, False: 0.0}) if "tool_args_ok" in df else np.nan
    history_ms = pd.to_numeric(df["history_s"]) * 1000.0 if "history_s" in df else pd.Series(0.0, index=df.index)
    out["history_ms"] = history_ms
    out["send_lag_ms"] = _ms(df["sent_s"], df["intended_s"]) - history_ms
    out["queue_ms"] = _ms(df["admitted_s"], df["arrival_s"])
    out["context_ms"] = _ms(df["context_ready_s"], df["admitted_s"]) + history_ms
    out["prefill_ms"] = _ms(df["prefill_end_s"], df["context_ready_s"])
    out["first_ms"] = _ms(df["first_token_s"], df["prefill_end_s"])
    out["ttft_ms"] = _ms(df["client_first_token_s"], df["intended_s"])
    out["ttft_server_ms"] = _ms(df["first_token_s"], df["arrival_s"])
    n = pd.to_numeric(df["n_client_tokens"])
    gaps_ms = _ms(df["client_last_token_s"], df["client_first_token_s"])
    out["tpot_ms"] = np.where(n > 1, gaps_ms / (n - 1).where(n > 1, 1), np.nan)
    out["decode_ms"] = _ms(df["last_token_s"], df["first_token_s"])
    # a server timeline with only the first token's time (a span join: `inferopt.measure.join`) while the
    # client got more tokens: decode runs from the first token to the server's done time, not zero
    span_only = (
        (pd.to_numeric(df["last_token_s"]) == pd.to_numeric(df["first_token_s"])) & (n > 1) & df["done_s"].notna()
    )
    out["decode_ms"] = out["decode_ms"].where(~span_only, _ms(df["done_s"], df["first_token_s"]))
    out["e2e_ms"] = _ms(df["client_done_s"], df["intended_s"])
    out["external_ms"] = pd.to_numeric(df["external_s"]) * 1000.0
    parts = out[["send_lag_ms", "queue_ms", "context_ms", "prefill_ms", "first_ms"]].sum(axis=1, min_count=5)
    out["ttft_residual_ms"] = out["ttft_ms"] - parts
    tpot_term = np.where(n > 1, (n - 1) * out["tpot_ms"], 0.0)
    out["e2e_residual_ms"] = out["e2e_ms"] - (out["ttft_ms"] + tpot_term + out["external_ms"])
    out["concurrency"] = concurrency_at_arrival(df["intended_s"].to_numpy(float), df["client_done_s"].to_numpy(float))
    out["cache_hit"] = pd.to_numeric(out["cached_tokens"]).fillna(0) > 0
    for col in ITL_COLUMNS:  # the request's inter-token gaps (client side) and its largest burst
        out[col] = pd.to_numeric(df[col]) if col in df else np.nan
    return out.reset_index(drop=True)


def gil_handoff_ms() -> float:
    """Two of Python's thread switch intervals (5 ms each by default): how late an in-process consumer can
    see an event while a worker thread runs Python code — transport cost of in-process serving, not a gap."""
    return 2000.0 * sys.getswitchinterval()


def decomposition_check(
    phases: pd.DataFrame, abs_tol_ms: float | None = None, rel_tol: float = 0.05, min_share: float = 0.9
) -> dict[str, float | bool]:
    """Does TTFT = send_lag + Q + C + T_prefill + T_first (+ transport) add up on the ok requests (M3)?

    A request is within tolerance when |residual| <= max(abs_tol_ms, rel_tol x its TTFT (E2E)); abs_tol_ms
    defaults to two GIL hand-offs (`gil_handoff_ms`). The join
    adds up when the median |residual| is within tolerance of the median request and at least `min_share`
    of requests are: a missing or double-counted phase moves the median by a whole phase, while the
    client's receive lag on a loaded host (thread wake-ups, GIL hand-offs: a few ms, occasionally tens)
    only fattens the tail — which is reported (p99, max), not hidden.
    """
    abs_tol_ms = gil_handoff_ms() if abs_tol_ms is None else abs_tol_ms
    ok = phases[phases["outcome"] == "ok"]
    out: dict[str, float | bool] = {"n_ok": int(len(ok)), "abs_tol_ms": abs_tol_ms, "rel_tol": rel_tol}
    adds_up = len(ok) > 0
    for name, total in (("ttft", "ttft_ms"), ("e2e", "e2e_ms")):
        res = ok[f"{name}_residual_ms"].astype(float)
        size = ok[total].astype(float).abs()
        within = res.abs() <= np.maximum(abs_tol_ms, rel_tol * size)
        share = float(within.mean()) if len(ok) else float("nan")
        median_abs = float(res.abs().median()) if len(ok) else float("nan")
        out[f"{name}_share_within_tol"] = share
        out[f"{name}_residual_ms_p50"] = float(res.median()) if len(ok) else float("nan")
        out[f"{name}_residual_ms_p99"] = float(res.quantile(0.99)) if len(ok) else float("nan")
        out[f"{name}_residual_ms_max_abs"] = float(res.abs().max()) if len(ok) else float("nan")
        adds_up &= bool(median_abs <= max(abs_tol_ms, rel_tol * float(size.median())) and share >= min_share)
    ext = ok["external_ms"].astype(float) if "external_ms" in ok else pd.Series(dtype=float)
    out["n_with_external"] = int((ext > 0).sum())  # requests whose E2E holds a measured T_external (tool calls)
    out["external_ms_p50_nonzero"] = float(ext[ext > 0].median()) if (ext > 0).any() else 0.0
    out["adds_up"] = bool(adds_up)
    return out


def littles_law(
    records: Iterable[RequestRecord], rel_tol: float = 0.10, trim: float = 0.10
) -> dict[str, float | bool | str]:
    """Little's law (L = lambda x W) with L and W on independent clocks, over the steady window (the arrivals
    between the `trim` and 1 - `trim` quantiles of the intended send times, so warm-up and drain are left out).

    L: the time-average number of requests inside the engine over the window, from the engine's own stamps
    (server arrival to server done; a request the engine never finished counts until the client gave up or the
    window closed). Only where fewer than half the requests carry engine stamps is L the client's (intended
    send to client done), and `littles_L_clock` says so. lambda x W: the client's arrival rate in the window
    times the mean client time in system (intended send to done) of those arrivals. `littles_status`: "not
    stationary" when departures in the window fall short of its arrivals by more than `rel_tol` (a queue that
    grows: the law does not apply, not a failed check), else "holds" within `rel_tol`, else "fails"."""
    recs = [r for r in records if not r.warmup]
    if len(recs) < 4:
        return {}
    start = np.array([r.intended_s for r in recs], dtype=float)
    client_end = np.array([np.nan if r.client_done_s is None else r.client_done_s for r in recs], dtype=float)
    w0, w1 = (float(x) for x in np.quantile(start, [trim, 1.0 - trim]))
    if w1 <= w0:
        return {}
    last = float(np.nanmax(np.concatenate([client_end, start])))
    client_end = np.where(np.isnan(client_end), last, client_end)
    served = np.array([r.arrival_s is not None for r in recs])
    server_clock = served.mean() >= 0.5
    if server_clock:
        enter = np.array([r.arrival_s if r.arrival_s is not None else np.nan for r in recs], dtype=float)
        leave = np.array([r.done_s if r.done_s is not None else np.nan for r in recs], dtype=float)
        leave = np.where(np.isnan(leave), client_end, leave)
    else:
        enter, leave = start, client_end
    inside = np.clip(np.minimum(leave, w1) - np.maximum(enter, w0), 0.0, None)
    mean_l = float(np.nansum(inside) / (w1 - w0))
    arrived = (start >= w0) & (start <= w1)
    lam_w = float(arrived.sum() / (w1 - w0) * np.mean(client_end[arrived] - start[arrived]))
    departed = int(((client_end >= w0) & (client_end <= w1)).sum())
    ratio = mean_l / lam_w if lam_w > 0 else float("nan")
    stationary = departed >= (1.0 - rel_tol) * int(arrived.sum())
    status = "not stationary" if not stationary else ("holds" if abs(ratio - 1.0) <= rel_tol else "fails")
    return {
        "littles_L": mean_l,
        "littles_lambda_W": lam_w,
        "littles_ratio": ratio,
        "littles_L_clock": "server" if server_clock else "client",
        "littles_departures_per_arrival": departed / max(int(arrived.sum()), 1),
        "littles_status": status,
        "littles_holds": status == "holds",
    }
