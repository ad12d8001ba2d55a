"""The one engine protocol every engine implements (hf, fake, vllm, openai).

`start() / stop() / stream(request) -> events / info() / server_metrics()`. `stream` yields `TokenEvent`s
as tokens are produced and ends with exactly one `FinishEvent` carrying the engine's own timings
(`ServerTimings`). An engine whose transport can delay the send (HTTP: waiting for a pooled connection,
a busy loop) may also yield one `SentEvent` saying when the request really left; without it the runner
takes the time it called `stream` as the send time. An engine may also have `prepare(requests)`: the
runner hands it every request before the clock starts (to encode payloads off the clock). Admission
refusal is `RequestRejected`; anything else raised is an error outcome — the load runner turns both into
records, never into exceptions out of the run.

Deliberately not here: timing from the client side (the load runner owns that) and engine-specific knobs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Protocol, runtime_checkable

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
