"""What a node failure did to a run (SPEC V2), as pure functions of its per-request table and the kill time.

Input: one row per request with `intended_s`, `client_done_s` (epoch s), `outcome` and `ttft_ms`, plus the moment
the replica was killed (`kill_s`). `failover_summary` gives the failed requests (before / in flight / after the
kill), the baseline failure rate, the recovery time and the first success after the kill (it defines each);
`segment_table` the p99 TTFT and failures before, during and after the failure.

Deliberately not here: running anything (`node_failure.py`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from inferopt.stats.inference import quantile

__all__ = ["failover_summary", "segment_table"]


def _recovery_index(failed: np.ndarray, baseline: float) -> int | None:
    """First i with mean(failed[i:]) <= baseline (failed is in send order); None if none."""
    n = len(failed)
    if n == 0:
        return None
    tail_fail = np.cumsum(failed[::-1])[::-1]  # failures in failed[i:]
    tail_n = np.arange(n, 0, -1)
    ok = tail_fail / tail_n <= baseline + 1e-12
    idx = np.flatnonzero(ok)
    return int(idx[0]) if len(idx) else None


def failover_summary(frame: pd.DataFrame, kill_s: float) -> dict[str, float | None]:
    """Failures, baseline, recovery and first success after the kill, all times from the kill:

    - `failed_requests`: requests whose outcome is not ok (error, timeout or rejected), also split by when they
      were sent (before the kill / in flight at it / after it);
    - `baseline_failure_rate`: the failure rate of the requests that finished before the kill;
    - `recovery_s`: from the kill to the intended send time of the first request, sent after the kill, from
      which on the failure rate of every later-sent request stays at or below the baseline — the error rate
      has returned to baseline and stays there. With a failure-free baseline: the send time of the first
      request after which nothing failed. None = it never returned within the run (not recovered);
    - `first_ok_after_kill_s`: from the kill to the completion of the first request sent after the kill that
      succeeded (the first success routed to a survivor)."""
    f = frame.sort_values("intended_s")
    failed = (f["outcome"] != "ok").to_numpy()
    done = pd.to_numeric(f["client_done_s"], errors="coerce").to_numpy(float)
    sent = f["intended_s"].to_numpy(float)
    before = done < kill_s
    post = sent >= kill_s
    in_flight = ~before & ~post
    base = float(failed[before].mean()) if before.any() else 0.0
    i = _recovery_index(failed[post], base)
    recovery = (float(sent[post][i] - kill_s) if i is not None else None) if post.any() else None
    ok_post = post & ~failed
    first_ok = float(np.nanmin(done[ok_post]) - kill_s) if ok_post.any() else None
    return {
        "requests": float(len(f)),
        "failed_requests": float(failed.sum()),
        "failed_before_kill": float(failed[before].sum()),
        "failed_in_flight_at_kill": float(failed[in_flight].sum()),
        "failed_sent_after_kill": float(failed[post].sum()),
        "in_flight_at_kill": float(in_flight.sum()),
        "sent_after_kill": float(post.sum()),
        "baseline_failure_rate": base,
        "recovery_s": recovery,
        "first_ok_after_kill_s": first_ok,
    }


def segment_table(frame: pd.DataFrame, kill_s: float, recovery_s: float | None) -> pd.DataFrame:
    """Requests, failures and TTFT p50/p99 of the served ones, before / during / after the failure: `before` =
    finished before the kill; `during` = in flight at the kill or sent before recovery; `after` = sent at or
    after recovery."""
    done = pd.to_numeric(frame["client_done_s"], errors="coerce")
    sent = frame["intended_s"]
    rec_at = kill_s + recovery_s if recovery_s is not None else float("inf")
    seg = np.where(done < kill_s, "before", np.where(sent >= rec_at, "after", "during"))
    rows = []
    for name in ("before", "during", "after"):
        g = frame[seg == name]
        ok = g[g["outcome"] == "ok"]
        rows.append(
            {
                "segment": name,
                "requests": len(g),
                "ok": len(ok),
                "failed": int((g["outcome"] != "ok").sum()),
                "ttft_ms_p50": float(pd.to_numeric(ok["ttft_ms"]).median()) if len(ok) else float("nan"),
                "ttft_ms_p99": quantile(pd.to_numeric(ok["ttft_ms"], errors="coerce"), 0.99),
            }
        )
    return pd.DataFrame(rows)
