"""An opt-in client retry policy for rejected requests (HTTP 429/503, admission control), as a real caller behaves:
bounded attempts, the server's `Retry-After` honoured when it sends one, otherwise exponential backoff with full
jitter — and every attempt kept.

`RetryingEngine(engine, policy)` (`inferopt.engines.retrying`) wraps any engine and is driven by the load
runner like the engine itself. The request's own record carries the *final* outcome, with latency still counted
from the intended send time, so the waiting shows up in TTFT; each attempt is an `AttemptRecord`, so no
attempt's outcome is lost. `retry_wait_s` chooses each wait; the jitter draws from an rng seeded by (seed,
request id), so a replay waits the same. The load runner's per-request timeout still holds.

Deliberately not here: retrying errors other than rejections (a broken stream may have had side effects;
failover across replicas is the load balancer's job), and the HTTP transport (`inferopt.engines.openai`).
"""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass
from typing import Literal

import pandas as pd

__all__ = ["AttemptRecord", "RetryPolicy", "attempts_frame", "parse_retry_after_s", "retry_wait_s"]


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 3  # attempts in all (1 = no retry)
    base_backoff_s: float = 0.25
    max_backoff_s: float = 4.0
    jitter: Literal["full", "none"] = "full"
    honour_retry_after: bool = True
    max_retry_after_s: float = 30.0
    budget_s: float | None = None  # total waiting across one request's retries
    seed: int = 0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}; fix: 1 = no retries")
        if self.base_backoff_s < 0 or self.max_backoff_s < 0:
            raise ValueError("backoff times must be >= 0")


@dataclass
class AttemptRecord:
    """One attempt of one request (a sub-record of the request's `RequestRecord`)."""

    request_id: str
    attempt: int  # 1-based
    outcome: str = "error"  # ok | rejected | error | cancelled
    error: str | None = None
    start_s: float = 0.0
    end_s: float | None = None
    retry_after_s: float | None = None  # what the server asked for (None = no header)
    wait_s: float | None = None  # waited after this attempt before the next (None = no next attempt)
    gave_up: str | None = None  # why no further attempt followed a rejection


def parse_retry_after_s(value: str | None, now_epoch_s: float | None = None) -> float | None:
    """`Retry-After` as seconds from now: delta-seconds or an HTTP-date (RFC 9110); None if absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    now = time.time() if now_epoch_s is None else now_epoch_s
    return max(0.0, when.timestamp() - now)


def retry_wait_s(
    policy: RetryPolicy, attempt: int, retry_after_s: float | None, rng: random.Random
) -> tuple[float | None, str | None]:
    """(wait before the next attempt, None) after attempt `attempt` (1-based) was rejected, or
    (None, why not) when the policy gives up.

    The server's `Retry-After` when it sent one and the policy honours it (one beyond `max_retry_after_s` ends
    the retries: the caller will not wait that long), else `uniform(0, min(max_backoff_s, base_backoff_s *
    2**(attempt-1)))` (AWS's "full jitter"; `jitter: none` waits the cap itself). `budget_s` bounds the total
    waiting of one request (the caller's)."""
    if attempt >= policy.max_attempts:
        return None, f"max_attempts={policy.max_attempts} reached"
    if retry_after_s is not None and policy.honour_retry_after:
        if retry_after_s > policy.max_retry_after_s:
            return None, f"Retry-After {retry_after_s:g} s exceeds max_retry_after_s={policy.max_retry_after_s:g}"
        return retry_after_s, None
    cap_s = min(policy.max_backoff_s, policy.base_backoff_s * 2.0 ** (attempt - 1))
    return (rng.uniform(0.0, cap_s) if policy.jitter == "full" else cap_s), None


def attempts_frame(attempts: list[AttemptRecord]) -> pd.DataFrame:
    """The attempts as a table (one row per attempt)."""
    cols = list(AttemptRecord.__dataclass_fields__)
    return pd.DataFrame([vars(a) for a in attempts], columns=cols)
