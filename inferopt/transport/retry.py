"""An opt-in client retry policy for rejected requests (HTTP 429/503, admission control), as a real caller behaves:
bounded attempts, the server's `Retry-After` honoured when it sends one, otherwise exponential backoff with full
jitter — and every attempt kept.

`RetryingEngine(engine, policy)` wraps any engine and is driven by the load runner like the engine itself. The
request's own record carries the *final* outcome, with latency still counted from the intended send time, so
the waiting shows up in TTFT; each attempt is an `AttemptRecord`, so no attempt's outcome is lost.
`retry_wait_s` chooses each wait; the jitter draws from an rng seeded by (seed, request id), so a replay waits
the same. The load runner's per-request timeout still holds.

Deliberately not here: retrying errors other than rejections (a broken stream may have had side effects;
failover across replicas is the load balancer's job), and the HTTP transport (`inferopt.engines.openai`).
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

from inferopt.engines.base import GenRequest, RequestRejected, TokenEvent
from inferopt.records import now_s

__all__ = ["AttemptRecord", "RetryPolicy", "RetryingEngine", "attempts_frame", "parse_retry_after_s", "retry_wait_s"]


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


class RetryingEngine:
    """Wraps an engine with a `RetryPolicy`; everything else is delegated.

    For each request it calls the inner engine's `fire` (send now; HTTP engines have it) or `stream`; when an
    attempt ends in `RequestRejected` before any token arrived it waits (`retry_wait_s`) and tries again, up to
    `max_attempts`. The last attempt's `SentEvent` is the request's send time, so the waiting shows as send lag.
    `attempts` holds one `AttemptRecord` per attempt (request id, attempt number, outcome, error, start/end, the
    server's Retry-After, the wait chosen)."""

    def __init__(self, inner: Any, policy: RetryPolicy) -> None:
        self.inner = inner
        self.policy = policy
        self.attempts: list[AttemptRecord] = []

    def __getattr__(self, name: str) -> Any:  # start, stop, info, server_metrics, prepare, server_timings...
        return getattr(self.inner, name)

    def info(self) -> dict[str, Any]:
        return {**self.inner.info(), "client_retry": vars(self.policy).copy()}

    def _send(self, request: GenRequest) -> AsyncIterator[Any]:
        """One attempt's events: through the inner engine's `fire` (sends now) when it has one."""
        fire = getattr(self.inner, "fire", None)
        return fire(request) if fire is not None else self.inner.stream(request)

    def fire(self, request: GenRequest) -> AsyncIterator[Any]:
        """The load runner's send-now entry: the first attempt leaves at once, retries when they are due."""
        return self._attempts(request, self._send(request))

    def stream(self, request: GenRequest) -> AsyncIterator[Any]:
        return self._attempts(request, None)

    async def _attempts(self, request: GenRequest, first: AsyncIterator[Any] | None) -> AsyncIterator[Any]:
        rng = random.Random(f"{self.policy.seed}:{request.request_id}")
        waited_s = 0.0
        attempt = 0
        while True:
            attempt += 1
            rec = AttemptRecord(request.request_id, attempt, start_s=now_s())
            self.attempts.append(rec)
            tokens_seen = False
            events = first if first is not None and attempt == 1 else self._send(request)
            try:
                async for event in events:
                    tokens_seen = tokens_seen or isinstance(event, TokenEvent)
                    yield event
                rec.outcome = "ok"
                return
            except RequestRejected as exc:
                rec.outcome, rec.error, rec.retry_after_s = "rejected", str(exc), exc.retry_after_s
                wait, why = retry_wait_s(self.policy, attempt, exc.retry_after_s, rng)
                if wait is not None and tokens_seen:
                    wait, why = None, "tokens already delivered"
                if wait is not None and self.policy.budget_s is not None and waited_s + wait > self.policy.budget_s:
                    wait, why = None, f"retry budget {self.policy.budget_s:g} s spent"
                if wait is None:
                    rec.gave_up = why
                    raise
                rec.wait_s = wait
            except (asyncio.CancelledError, GeneratorExit):
                rec.outcome, rec.error = "cancelled", "the request was stopped (timeout or end of run)"
                raise
            except Exception as exc:
                rec.outcome, rec.error = "error", f"{type(exc).__name__}: {exc}"
                raise
            finally:
                rec.end_s = now_s()
            await asyncio.sleep(wait)
            waited_s += wait


def attempts_frame(attempts: list[AttemptRecord]) -> Any:
    """The attempts as a table (one row per attempt)."""
    import pandas as pd

    cols = list(AttemptRecord.__dataclass_fields__)
    return pd.DataFrame([vars(a) for a in attempts], columns=cols)
