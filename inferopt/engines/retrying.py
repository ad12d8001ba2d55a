"""`RetryingEngine(engine, policy)`: any engine behind the client retry policy of `inferopt.transport.retry`.

Each attempt is an `AttemptRecord` in `RetryingEngine.attempts`; when an attempt is rejected before any token
arrived, the policy's wait (`retry_wait_s`) is slept and the request is sent again (see `inferopt.transport.retry`
for the policy, the waits and what the request's record carries).

Deliberately not here: the policy and its waits (`inferopt.transport.retry`), retrying anything but rejections.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

from inferopt.engines.base import GenRequest, RequestRejected, TokenEvent
from inferopt.records import now_s
from inferopt.transport.retry import AttemptRecord, RetryPolicy, retry_wait_s

__all__ = ["RetryingEngine"]


class RetryingEngine:
    """Wraps an engine with a `RetryPolicy` (see the module docstring); everything else is delegated."""

    def __init__(self, inner: Any, policy: RetryPolicy) -> None:
        self.inner = inner
        self.policy = policy
        self.attempts: list[AttemptRecord] = []

    def __getattr__(self, name: str) -> Any:  # start, stop, info, server_metrics, prepare, server_timings...
        return getattr(self.inner, name)

    def info(self) -> dict[str, Any]:
        return {**self.inner.info(), "client_retry": vars(self.policy).copy()}

    def _send(self, request: GenRequest) -> AsyncIterator[Any]:
        """One attempt's events, through the inner engine's `fire` (an HTTP engine sends now; others stream)."""
        return self.inner.fire(request)

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
