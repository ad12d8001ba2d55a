"""A session workload as a table: one row per turn, the request columns plus the session's plan for that turn.

`build_sessions` samples (seeded, one generator per sampler) the sessions' arrivals (the workload's `arrival`
process), turns per session, tenant, each turn's lengths (the first message and every output budget from the joint
`lengths`, later messages from `sessions.new_message`), the think time after the turn and the tool calls the agent
makes after its answer (each call's sleep at the tool service, ms). A row's `input_len` is the turn's *new* message;
the prompt actually sent is the session's history plus it, known only at run time (it holds the real outputs).

Deliberately not here: running the sessions (`inferopt.measure.agentic`) and reading session traces.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from inferopt.config import DelayConfig, MessageLengthConfig, WorkloadConfig
from inferopt.workload.arrivals import arrival_offsets_s
from inferopt.workload.columns import SESSION_COLUMNS, WORKLOAD_COLUMNS
from inferopt.workload.lengths import sample_lengths


def sample_delay_ms(cfg: DelayConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """n delays in ms with mean `cfg.mean_ms` (lognormal: mu = ln(mean) - sigma^2/2), clipped to [0, max_ms]."""
    if cfg.kind == "constant" or cfg.mean_ms == 0.0:
        out = np.full(n, cfg.mean_ms)
    elif cfg.kind == "exponential":
        out = rng.exponential(cfg.mean_ms, size=n)
    else:
        out = rng.lognormal(np.log(cfg.mean_ms) - cfg.sigma**2 / 2.0, cfg.sigma, size=n)
    return np.clip(out, 0.0, cfg.max_ms)


def _message_lengths(cfg: MessageLengthConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    raw = np.exp(np.log(cfg.median) + cfg.sigma * rng.standard_normal(n))
    return np.clip(np.rint(raw), cfg.min, cfg.max).astype(int)


def _session_count(turns: np.ndarray, num_requests: int | None) -> int:
    """Whole sessions while their turns fit in `num_requests` (at least one); all of them when None."""
    if num_requests is None:
        return len(turns)
    return max(1, int(np.searchsorted(np.cumsum(turns), num_requests, side="right")))


def build_sessions(cfg: WorkloadConfig, num_requests: int | None = None) -> pd.DataFrame:
    """The turn table of `cfg.sessions` (see the module docstring); `num_requests` caps the turns (whole sessions)."""
    sc = cfg.sessions
    assert sc is not None and cfg.arrival is not None  # the config model guarantees both
    rngs = [np.random.default_rng(s) for s in np.random.SeedSequence([cfg.seed, 17]).spawn(7)]
    rng_arrival, rng_turns, rng_len, rng_msg, rng_think, rng_tool, rng_who = rngs
    turns = rng_turns.integers(sc.turns.min, sc.turns.max + 1, size=sc.num_sessions)
    n_sessions = _session_count(turns, num_requests)
    turns = turns[:n_sessions]
    offsets = arrival_offsets_s(cfg.arrival, n_sessions, rng_arrival)
    weights = np.array([t.weight for t in cfg.tenants], dtype=float)
    tenant_idx = rng_who.choice(len(cfg.tenants), size=n_sessions, p=weights / weights.sum())
    shared = rng_who.random(n_sessions) < cfg.prefix.share_fraction
    groups = np.where(shared, rng_who.integers(0, cfg.prefix.num_groups, size=n_sessions), -1)
    n = int(turns.sum())
    first_len, output_len = sample_lengths(cfg.lengths, n, rng_len)
    later_len = _message_lengths(sc.new_message, n, rng_msg)
    think_ms = sample_delay_ms(sc.think, n, rng_think)
    calls = rng_tool.random(n) < sc.tools.probability
    steps = np.where(calls, rng_tool.integers(1, sc.tools.max_steps + 1, size=n), 0)
    sleeps = sample_delay_ms(sc.tools.latency, int(steps.sum()), rng_tool)
    rows, at, k = [], 0, 0
    for i in range(n_sessions):
        sid = f"{cfg.name}-s{i:04d}"
        tenant = cfg.tenants[int(tenant_idx[i])]
        for turn in range(int(turns[i])):
            plen = cfg.prefix.prefix_len if (turn == 0 and groups[i] >= 0) else 0
            msg = int(first_len[k]) if turn == 0 else int(later_len[k])
            rows.append(
                {
                    "request_id": f"{sid}-t{turn:03d}",
                    "arrival_offset_s": float(offsets[i]),
                    "input_len": max(msg, plen + 1),
                    "output_len": int(output_len[k]),
                    "prefix_group": int(groups[i]) if plen else -1,
                    "prefix_len": int(plen),
                    "tenant": tenant.name,
                    "priority": tenant.priority,
                    "session_id": sid,
                    "turn": turn,
                    "session_turns": int(turns[i]),
                    "think_ms": float(think_ms[k]) if turn < turns[i] - 1 else 0.0,
                    "tool_sleep_ms": json.dumps([round(float(x), 3) for x in sleeps[at : at + steps[k]]]),
                    "tool_result_tokens": sc.tools.result_tokens,
                }
            )
            at += int(steps[k])
            k += 1
    return pd.DataFrame(rows, columns=[*WORKLOAD_COLUMNS, *SESSION_COLUMNS])


def has_sessions(table: pd.DataFrame) -> bool:
    """Whether a workload table drives the session runner (it carries `session_id` and `turn` columns)."""
    return {"session_id", "turn"} <= set(table.columns)


def tool_sleeps_ms(row: dict) -> list[float]:
    """A turn's planned tool calls (each one's sleep at the service, ms); none when the table has no plan."""
    text = row.get("tool_sleep_ms")
    if not isinstance(text, str) or not text:
        return []
    return [float(x) for x in json.loads(text)]


def expected_prompt_len(table: pd.DataFrame) -> pd.Series:
    """The prompt each turn will send, as planned: the session's earlier turns (their messages, their output
    budgets, their tool results) plus the turn's own message. A row's `input_len` is only the new message, so
    this is what input-length slice edges of a session load are drawn from; a turn whose answer stops before its
    budget sends less (the record's `input_len` is the real one). A table without sessions: its `input_len`."""
    if not has_sessions(table):
        return table["input_len"].astype(float)
    plans = table["tool_sleep_ms"] if "tool_sleep_ms" in table else pd.Series("", index=table.index)
    calls = plans.map(lambda t: len(tool_sleeps_ms({"tool_sleep_ms": t})))
    result_tokens = table["tool_result_tokens"].fillna(0) if "tool_result_tokens" in table else 0
    turn_total = table["input_len"] + table["output_len"] + calls * result_tokens
    earlier = turn_total.groupby(table["session_id"]).cumsum() - turn_total
    return (earlier + table["input_len"]).astype(float)
