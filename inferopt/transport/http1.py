"""A keep-alive HTTP/1.1 connection pool whose `fire()` writes a request to the socket *synchronously*.

Why not aiohttp for the timed requests: in an open-loop load test the send time is part of the measurement.
aiohttp's request path awaits several times before the body reaches the socket (on Python 3.11 the body is
written by a task started one loop pass after the headers), so every send waits behind whatever other streams'
chunks the loop is processing — that wait is the send-lag tail. Here the load runner's timer callback calls
`fire()`, which writes pre-encoded request bytes on an idle connection in that same callback and stamps
`sent_s` after the write; each body chunk is stamped in `data_received`, the moment it comes off the socket,
and the consumer is woken once per socket read, not once per SSE event. HTTP/1.1 framing is h11's job; this
module owns only the pool (`ConnectionPool` says its rules) and the timing.

Deliberately not here: what the body means (SSE, JSON: `inferopt.engines.openai`), retries, proxies, HTTP/2,
and control requests (`/v1/models`, `/metrics` stay on aiohttp: they are not timed).
"""

from __future__ import annotations

import asyncio
import ssl as ssl_mod
from collections import deque
from dataclasses import dataclass
from urllib.parse import urlsplit

import h11

from inferopt.records import now_s


class ConnectionFailed(ConnectionError):
    """The request never got a response (connect refused, connection lost, protocol error)."""


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    tls: bool
    base_path: str

    @classmethod
    def parse(cls, base_url: str) -> Endpoint:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url {base_url!r} is not an http(s) URL; fix: e.g. http://127.0.0.1:8000")
        tls = parts.scheme == "https"
        return cls(parts.hostname, parts.port or (443 if tls else 80), tls, parts.path.rstrip("/"))

    @property
    def host_header(self) -> str:
        default = 443 if self.tls else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"


def encode_request(endpoint: Endpoint, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    """The wire bytes of one POST (h11 does the framing); done before the clock starts."""
    conn = h11.Connection(h11.CLIENT)
    hdrs = [("Host", endpoint.host_header), ("Content-Length", str(len(body))), *headers.items()]
    return (
        conn.send(h11.Request(method="POST", target=endpoint.base_path + path, headers=hdrs))
        + conn.send(h11.Data(data=body))
        + conn.send(h11.EndOfMessage())
    )


_SENT_REQUEST = h11.Request(method="POST", target="/", headers=[("Host", "-"), ("Content-Length", "0")])


class ResponseStream:
    """One request's response as it arrives: `sent_s`, then `status`/`headers`, then body chunks, each
    stamped when its bytes were read off the socket. Iterate with `await next_chunks()`."""

    __slots__ = ("wire", "sent_s", "status", "headers", "_chunks", "_waiter", "done", "error", "_proto", "_pool")

    def __init__(self, wire: bytes, pool: ConnectionPool) -> None:
        self.wire = wire
        self.sent_s: float | None = None
        self.status: int | None = None
        self.headers: list[tuple[bytes, bytes]] = []
        self._chunks: deque[tuple[float, bytes]] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self.done = False  # the whole response has been read
        self.error: BaseException | None = None
        self._proto: _Http1Protocol | None = None
        self._pool = pool

    # producer side (the protocol)
    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _push(self, t: float, data: bytes) -> None:
        self._chunks.append((t, data))
        self._wake()

    def _finish(self, error: BaseException | None = None) -> None:
        if not self.done and self.error is None:
            if error is None:
                self.done = True
            else:
                self.error = error
        self._wake()

    # consumer side
    async def wait_headers(self) -> None:
        """Until the status line and headers are in (or the request failed)."""
        while self.status is None and self.error is None:
            await self._wait()
        if self.status is None:
            raise self.error  # type: ignore[misc]

    async def next_chunks(self) -> list[tuple[float, bytes]] | None:
        """Every body chunk received since the last call ((received_s, bytes), oldest first); None once the
        body is complete and drained. Raises the failure if the connection broke first."""
        while not self._chunks:
            if self.error is not None:
                raise self.error
            if self.done:
                return None
            await self._wait()
        out = list(self._chunks)
        self._chunks.clear()
        return out

    async def read_all(self) -> bytes:
        parts = []
        while (chunks := await self.next_chunks()) is not None:
            parts.extend(data for _, data in chunks)
        return b"".join(parts)

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    def close(self) -> None:
        """Stop caring about this response: a connection with a response still arriving is dropped."""
        if not self.done and self.error is None:
            self.error = ConnectionFailed("response abandoned")
            if self._proto is not None:
                self._proto.abort()
            else:
                self._pool._forget(self)


class _Http1Protocol(asyncio.Protocol):
    def __init__(self, pool: ConnectionPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.h11 = h11.Connection(h11.CLIENT)
        self.current: ResponseStream | None = None
        self.idle_since_s = 0.0
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send(self, stream: ResponseStream) -> None:
        assert self.transport is not None
        self.current = stream
        stream._proto = self
        self.transport.write(stream.wire)
        stream.sent_s = now_s()
        # the state machine is told, after the write, that a complete keep-alive POST went out (the wire
        # bytes came from h11 off the clock; how the response is framed depends only on those two facts)
        self.h11.send(_SENT_REQUEST)
        self.h11.send(h11.EndOfMessage())

    def data_received(self, data: bytes) -> None:
        self._feed(data, now_s())

    def _feed(self, data: bytes, t: float) -> None:
        stream = self.current
        try:
            self.h11.receive_data(data)
            while True:
                ev = self.h11.next_event()
                if ev is h11.NEED_DATA or ev is h11.PAUSED:
                    break
                if isinstance(ev, h11.Response):
                    if stream is not None:
                        stream.status, stream.headers = ev.status_code, list(ev.headers)
                        stream._wake()
                elif isinstance(ev, h11.Data):
                    if stream is not None:
                        stream._push(t, bytes(ev.data))
                elif isinstance(ev, h11.EndOfMessage):
                    self.current = None
                    if stream is not None:
                        stream._finish()
                        stream = None
                    self._recycle()
                    return
                elif isinstance(ev, h11.ConnectionClosed):
                    break
        except h11.RemoteProtocolError as exc:
            if stream is not None:
                stream._finish(ConnectionFailed(f"HTTP protocol error from the server: {exc}"))
            self.current = None
            self.abort()

    def _recycle(self) -> None:
        if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
            self.h11.start_next_cycle()
            self.pool._release(self)
        else:  # `Connection: close`, or the server is not done
            self.abort()

    def eof_received(self) -> bool | None:
        if self.current is not None:
            self._feed(b"", now_s())  # a body delimited by the connection closing ends here
        self.abort()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        stream, self.current = self.current, None
        if stream is not None:
            why = f"{type(exc).__name__}: {exc}" if exc else "the server closed the connection"
            stream._finish(ConnectionFailed(f"connection lost ({why})"))
        self.pool._lost(self)

    def abort(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.abort()


class ConnectionPool:
    """Keep-alive connections to one endpoint; `fire(wire)` sends at once when a connection is idle.

    At most `max_connections` open connections; a request that finds none idle opens one (while under the
    limit) or waits, first in first out, for one to be released — that wait is client time and shows in
    `sent_s`. Idle connections older than `keepalive_s` are closed rather than reused (servers close idle ones
    after ~5 s; reusing one they just closed would be a spurious error). A response not read to its end
    (timeout, cancellation) closes its connection."""

    def __init__(
        self, endpoint: Endpoint, max_connections: int, keepalive_s: float = 4.0, connect_timeout_s: float = 30.0
    ) -> None:
        self.endpoint = endpoint
        self.max_connections = max_connections
        self.keepalive_s = keepalive_s
        self.connect_timeout_s = connect_timeout_s
        self._idle: list[_Http1Protocol] = []  # LIFO: the warmest connection first
        self._open: set[_Http1Protocol] = set()
        self._connecting = 0
        self._pending: deque[ResponseStream] = deque()
        self._ssl = ssl_mod.create_default_context() if endpoint.tls else None
        self._closed = False

    def fire(self, wire: bytes) -> ResponseStream:
        """Send `wire` (from `encode_request`) now on an idle connection, or as soon as one is free."""
        stream = ResponseStream(wire, self)
        if self._closed:
            stream._finish(ConnectionFailed("the connection pool is closed"))
            return stream
        proto = self._take_idle()
        if proto is not None:
            proto.send(stream)
            return stream
        self._pending.append(stream)
        if len(self._open) + self._connecting < self.max_connections:
            self._connecting += 1
            asyncio.get_running_loop().create_task(self._connect())
        return stream

    def _take_idle(self) -> _Http1Protocol | None:
        now = now_s()
        while self._idle:
            proto = self._idle.pop()
            if not proto.closed and now - proto.idle_since_s < self.keepalive_s:
                return proto
            proto.abort()
        return None

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, proto = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _Http1Protocol(self),
                    self.endpoint.host,
                    self.endpoint.port,
                    ssl=self._ssl,
                    server_hostname=self.endpoint.host if self._ssl else None,
                ),
                self.connect_timeout_s,
            )
        except (OSError, TimeoutError) as exc:
            self._connecting -= 1
            if self._pending:  # fail the oldest waiter: one connect attempt was made for it
                self._pending.popleft()._finish(
                    ConnectionFailed(
                        f"cannot connect to {self.endpoint.host}:{self.endpoint.port} ({type(exc).__name__}: {exc})"
                    )
                )
            return
        self._connecting -= 1
        self._open.add(proto)
        if self._closed:
            proto.abort()
            return
        self._release(proto)

    def _release(self, proto: _Http1Protocol) -> None:
        """A connection is free: the oldest waiting request goes out on it now, else it idles."""
        while self._pending:
            stream = self._pending.popleft()
            if stream.error is None:
                proto.send(stream)
                return
        proto.idle_since_s = now_s()
        self._idle.append(proto)

    def _lost(self, proto: _Http1Protocol) -> None:
        self._open.discard(proto)
        if proto in self._idle:
            self._idle.remove(proto)
        if self._pending and not self._closed and len(self._open) + self._connecting < self.max_connections:
            self._connecting += 1
            asyncio.get_running_loop().create_task(self._connect())

    def _forget(self, stream: ResponseStream) -> None:
        try:
            self._pending.remove(stream)
        except ValueError:
            pass

    def close(self) -> None:
        self._closed = True
        for stream in self._pending:
            stream._finish(ConnectionFailed("the connection pool was closed"))
        self._pending.clear()
        for proto in list(self._open):
            proto.abort()
        self._idle.clear()
