"""Session records: one row per multi-turn session, from its turns' records — the user's *task*, its time and outcome.

    task_ms   = last turn complete - first turn due                   (what the user waited, think time included)
              = sum over turns of (TTFT + (N-1) x TPOT + T_external) + think_ms + residual_ms
    think_ms  = sum of (turn k+1 due - turn k complete)               (the user's own time between turns)
    tool_ms   = sum of the turns' measured tool calls (T_external); history_ms = their history reads (C_context)

A session fails when any of its turns failed or missed its per-request SLO, or when some planned turn was never sent
(a failed turn ends its session; a stopped run leaves sessions unfinished). `session_check` says whether the
per-session decomposition adds up, as `decomposition_check` does per request (SPEC M3).

Deliberately not here: running sessions (`agentic.py`) or pricing them (`inferopt.gate.judge`).
"""

from __future__ import annotations

from typing import Iterable, Literal

import numpy as np
import pandas as pd

from inferopt.measure.phases import gil_handoff_ms
from inferopt.records import RequestRecord

SessionOutcome = Literal["ok", "failed"]
SESSION_TABLE_COLUMNS = (
    "session_id", "arm", "trial", "tenant", "priority", "turns_planned", "turns_sent", "turns_ok", "task_ms",
    "model_ms", "tool_ms", "history_ms", "think_ms", "residual_ms", "outcome", "reason",
)  # fmt: skip


def has_session_rows(phases: pd.DataFrame) -> bool:
    return "session_id" in phases and bool((phases["session_id"].astype(str) != "").any())


def _reason(turns: pd.DataFrame, met: pd.Series, planned: int) -> str:
    for _, t in turns.iterrows():
        if t["outcome"] != "ok":
            return f"turn {int(t['turn'])} {t['outcome']}"
        if not met.loc[t.name]:
            return f"turn {int(t['turn'])} missed its SLO"
    if len(turns) < planned:
        return f"{planned - len(turns)} of {planned} turns never sent"
    return ""


def session_outcomes(phases: pd.DataFrame, meets_slo: np.ndarray) -> pd.DataFrame:
    """Per session (and arm/trial): planned, sent and ok turns, the outcome and why (see the module docstring)."""
    mask = (phases["session_id"].astype(str) != "").to_numpy()
    rows = phases[mask].assign(_met=np.asarray(meets_slo, dtype=bool)[mask])
    out = []
    keys = [k for k in ("arm", "trial") if k in rows] + ["session_id"]
    for key, turns in rows.sort_values("turn").groupby(keys, sort=False):
        planned = max(int(turns["session_turns"].max()), len(turns))
        reason = _reason(turns, turns["_met"], planned)
        out.append(
            dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True))
            | {
                "tenant": str(turns["tenant"].iloc[0]),
                "priority": int(turns["priority"].iloc[0]),
                "turns_planned": planned,
                "turns_sent": len(turns),
                "turns_ok": int((turns["outcome"] == "ok").sum()),
                "outcome": "failed" if reason else "ok",
                "reason": reason,
            }
        )
    return pd.DataFrame(out)


def _timing(records: Iterable[RequestRecord]) -> pd.DataFrame:
    """Per session: first due, last completion and the think time between turns (from the records' clocks)."""
    rows = []
    by: dict[tuple[str, str, int], list[RequestRecord]] = {}
    for r in records:
        if r.session_id and not r.warmup:
            by.setdefault((r.arm, r.session_id, r.trial), []).append(r)
    for (arm, sid, trial), turns in by.items():
        turns.sort(key=lambda r: r.turn)
        done = [r.client_done_s if r.client_done_s is not None else np.nan for r in turns]
        think = sum(nxt.intended_s - prev_done for prev_done, nxt in zip(done[:-1], turns[1:], strict=True))
        rows.append(
            {"arm": arm, "trial": trial, "session_id": sid, "task_ms": 1000.0 * (done[-1] - turns[0].intended_s),
             "think_ms": 1000.0 * think}
        )  # fmt: skip
    return pd.DataFrame(rows, columns=["arm", "trial", "session_id", "task_ms", "think_ms"])


def session_table(records: Iterable[RequestRecord], phases: pd.DataFrame, meets_slo: np.ndarray) -> pd.DataFrame:
    """The session records (columns `SESSION_TABLE_COLUMNS`) of a run's turn records and their phase rows."""
    outcomes = session_outcomes(phases, meets_slo)
    if outcomes.empty:
        return pd.DataFrame(columns=list(SESSION_TABLE_COLUMNS))
    p = phases[phases["session_id"].astype(str) != ""].copy()
    n = pd.to_numeric(p["output_len"]).fillna(0)
    p["_model"] = pd.to_numeric(p["ttft_ms"]) + np.where(n > 1, (n - 1) * pd.to_numeric(p["tpot_ms"]), 0.0)
    sums = p.groupby(["arm", "trial", "session_id"]).agg(
        model_ms=("_model", lambda s: s.sum(min_count=len(s))),
        tool_ms=("external_ms", "sum"),
        history_ms=("history_ms", "sum"),
    )
    out = outcomes.merge(sums.reset_index(), on=["arm", "trial", "session_id"], how="left").merge(
        _timing(records), on=["arm", "trial", "session_id"], how="left"
    )
    out["residual_ms"] = out["task_ms"] - (out["model_ms"] + out["tool_ms"] + out["think_ms"])
    return out[list(SESSION_TABLE_COLUMNS)].sort_values(["arm", "trial", "session_id"], ignore_index=True)


def session_check(
    sessions: pd.DataFrame, abs_tol_ms: float | None = None, rel_tol: float = 0.05, min_share: float = 0.9
) -> dict[str, float | bool]:
    """Does task_ms = sum of the turns' (TTFT + (N-1) x TPOT + T_external) + think time add up on the sessions whose
    turns all finished ok? Tolerance per session: max(abs_tol_ms x its turns, rel_tol x task_ms)."""
    abs_tol_ms = gil_handoff_ms() if abs_tol_ms is None else abs_tol_ms
    done = sessions[(sessions["turns_ok"] == sessions["turns_planned"]) & sessions["residual_ms"].notna()]
    out: dict[str, float | bool] = {"sessions_checked": int(len(done))}
    if done.empty:
        return out | {"session_adds_up": False}
    res = done["residual_ms"].astype(float)
    tol = np.maximum(abs_tol_ms * done["turns_planned"].astype(float), rel_tol * done["task_ms"].astype(float))
    share = float((res.abs() <= tol).mean())
    return out | {
        "session_residual_ms_p50": float(res.median()),
        "session_residual_ms_max_abs": float(res.abs().max()),
        "session_share_within_tol": share,
        "session_adds_up": bool(share >= min_share and abs(float(res.median())) <= float(np.median(tol))),
    }


def session_headline(sessions: pd.DataFrame) -> dict[str, float]:
    """Session-level figures for the summary: count, success rate, task time and its tool/history parts."""
    if sessions.empty:
        return {}
    ok = sessions["outcome"] == "ok"
    task = sessions["task_ms"].astype(float)
    p50, p95, p99 = (float(task.quantile(q)) for q in (0.5, 0.95, 0.99))
    return {
        "sessions": float(len(sessions)),
        "session_success_rate": float(ok.mean()),
        "session_task_ms_p50": p50,
        "session_task_ms_p95": p95,
        "session_task_ms_p99": p99,
        "session_tool_ms_p50": float(sessions["tool_ms"].astype(float).median()),
        "session_history_ms_p50": float(sessions["history_ms"].astype(float).median()),
        "session_turns_mean": float(sessions["turns_sent"].mean()),
    }
