"""The one engine protocol every engine implements (hf, fake, vllm, openai).

`start() / stop() / stream(request) -> events / info() / server_metrics()`. `stream` yields `TokenEvent`s
as tokens are produced and ends with exactly one `FinishEvent` carrying the engine's own timings
(`ServerTimings`). An engine whose transport can delay the send (HTTP: waiting for a pooled connection,
a busy loop) may also yield one `SentEvent` saying when the request really left; without it the runner
takes the time it called `stream` as the send time. Admission refusal is `RequestRejected`; anything else
raised is an error outcome — the load runner turns both into records, never into exceptions out of the run.
Three parts are optional, with defaults on `EngineBase` (every engine subclasses it): `prepare(requests)`
(every request before the clock starts, to encode payloads off it), `fire(request)` (send now, from the
runner's timer callback; the default is `stream`) and `server_timings(request_ids)` (per-request timings that
arrive after the stream; the default, None, means the engine has none).

Deliberately not here: timing from the client side (the load runner owns that) and engine-specific knobs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from inferopt.records import ServerTimings


@dataclass(frozen=True)
class GenRequest:
    request_id: str
    prompt_token_ids: list[int]
    max_new_tokens: int
    tenant: str = "default"
    priority: int = 0
    prefix_group: int = -1
    prefix_len: int = 0
    force_length: bool = False  # run to max_new_tokens, past EOS (workload.output_lengths: forced)


@dataclass(frozen=True)
class TokenEvent:
    token_ids: tuple[int, ...]  # one chunk may carry several tokens
    server_s: float | None = None
    received_s: float | None = None  # when the client read it off the socket (HTTP engines); else: when consumed


@dataclass(frozen=True)
class SentEvent:
    """Optional, before any token: when the request actually left the client (HTTP: the request handed to
    the socket). Yielded when known, which may be later than that moment — the value counts."""

    sent_s: float


@dataclass(frozen=True)
class FinishEvent:
    server: ServerTimings = field(default_factory=ServerTimings)


class RequestRejected(Exception):
    """The engine refused the request at admission (queue full, overload): outcome `rejected`.
    `retry_after_s`: the server's Retry-After (seconds from now) when it sent one, else None."""

    def __init__(self, message: str = "", retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@runtime_checkable
class Engine(Protocol):
    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def stream(self, request: GenRequest) -> AsyncIterator[SentEvent | TokenEvent | FinishEvent]: ...

    def info(self) -> dict[str, Any]: ...

    async def server_metrics(self) -> dict[str, float]: ...

    def prepare(self, requests: list[GenRequest]) -> None: ...

    def fire(self, request: GenRequest) -> AsyncIterator[SentEvent | TokenEvent | FinishEvent]: ...

    async def server_timings(self, request_ids: list[str]) -> dict[str, ServerTimings] | None: ...


class EngineBase:
    """The optional parts of `Engine` with their defaults; an engine overrides what it has."""

    def stream(self, request: GenRequest) -> AsyncIterator[SentEvent | TokenEvent | FinishEvent]:
        raise NotImplementedError

    def prepare(self, requests: list[GenRequest]) -> None:
        """Nothing to do before the clock starts."""

    def fire(self, request: GenRequest) -> AsyncIterator[SentEvent | TokenEvent | FinishEvent]:
        """No transport to send on early: the request's `stream` (an async generator starts nothing until
        iterated, so the request is sent when the runner consumes it, as if `stream` were called there)."""
        return self.stream(request)

    async def server_timings(self, request_ids: list[str]) -> dict[str, ServerTimings] | None:
        """None: no per-request server timings after the stream (the run joins aggregates, if any)."""
        return None
