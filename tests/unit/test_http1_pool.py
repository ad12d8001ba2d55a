"""The timed-request connection pool (`inferopt.transport.http1`) against a raw local server: a request on an
idle connection is on the socket when `fire()` returns; chunks are stamped when read, not when consumed;
the connection bound holds with first-in-first-out waiting; an abandoned response drops its connection;
a server that closes idle connections, refuses connections, or breaks the protocol gives clean failures."""

from __future__ import annotations

import asyncio
import socket

import pytest

from inferopt.records import now_s
from inferopt.transport.http1 import ConnectionFailed, ConnectionPool, Endpoint, encode_request
from inferopt.transport.ports import free_port


class _Server:
    """A tiny HTTP/1.1 server on 127.0.0.1: records when each request's bytes arrived, then answers by the
    path: /ok (chunked, two chunks 20 ms apart), /slow (held until released), /close (Connection: close),
    /bad (garbage)."""

    def __init__(self) -> None:
        self.arrived_s: list[float] = []
        self.connections = 0
        self.release = asyncio.Event()
        self.server: asyncio.base_events.Server | None = None

    async def __aenter__(self) -> _Server:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()
        self.release.set()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                self.arrived_s.append(now_s())
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    ),
                    0,
                )
                await reader.readexactly(length)
                path = head.split(b" ")[1]
                if path == b"/bad":
                    writer.write(b"NOT HTTP AT ALL\r\n\r\n")
                    await writer.drain()
                    writer.close()
                    return
                if path == b"/slow":
                    await self.release.wait()
                close = path == b"/close"
                writer.write(
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                    + (b"Connection: close\r\n" if close else b"")
                    + b"\r\n"
                    + b"5\r\nfirst\r\n"
                )
                await writer.drain()
                await asyncio.sleep(0.02)
                writer.write(b"6\r\nsecond\r\n0\r\n\r\n")
                await writer.drain()
                if close:
                    writer.close()
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


def _wire(srv: _Server, path: str) -> bytes:
    return encode_request(Endpoint.parse(f"http://127.0.0.1:{srv.port}"), path, b"{}", {"X-Request-Id": path})


def test_endpoint_parsing_and_errors() -> None:
    ep = Endpoint.parse("https://api.example.com/base/")
    assert (ep.host, ep.port, ep.tls, ep.base_path, ep.host_header) == (
        "api.example.com",
        443,
        True,
        "/base",
        "api.example.com",
    )
    assert Endpoint.parse("http://127.0.0.1:8000").host_header == "127.0.0.1:8000"
    with pytest.raises(ValueError, match="fix"):
        Endpoint.parse("127.0.0.1:8000")


def test_idle_connection_sends_synchronously_and_chunks_are_stamped_on_arrival() -> None:
    async def main() -> None:
        async with _Server() as srv:
            pool = ConnectionPool(Endpoint.parse(f"http://127.0.0.1:{srv.port}"), max_connections=2)
            first = pool.fire(_wire(srv, "/ok"))
            assert first.sent_s is None  # no connection yet: it waits for the connect
            assert await first.read_all() == b"firstsecond" and first.status == 200
            before = now_s()
            second = pool.fire(_wire(srv, "/ok"))  # the connection is idle now
            assert second.sent_s is not None and before <= second.sent_s <= now_s()
            await second.wait_headers()
            await asyncio.sleep(0.06)  # consume late: the stamps must not move
            chunks = []
            while (got := await second.next_chunks()) is not None:
                chunks.extend(got)
            assert [d for _, d in chunks] == [b"first", b"second"]
            assert chunks[1][0] - chunks[0][0] >= 0.015  # 20 ms apart on the wire, stamped as they came
            assert now_s() - chunks[1][0] >= 0.03  # ...not when this consumer read them
            assert srv.connections == 1 and srv.arrived_s[1] >= second.sent_s - 0.001
            pool.close()

    asyncio.run(main())


def test_connection_bound_and_fifo_waiting() -> None:
    async def main() -> None:
        async with _Server() as srv:
            pool = ConnectionPool(Endpoint.parse(f"http://127.0.0.1:{srv.port}"), max_connections=2)
            slow = [pool.fire(_wire(srv, "/slow")) for _ in range(2)]
            queued = [pool.fire(_wire(srv, "/ok")) for _ in range(3)]
            await asyncio.sleep(0.1)
            assert srv.connections == 2 and all(q.sent_s is None for q in queued)
            srv.release.set()
            for s in slow + queued:
                assert await s.read_all() == b"firstsecond"
            assert srv.connections == 2
            sent = [q.sent_s for q in queued]
            assert all(t is not None for t in sent) and sent == sorted(sent)  # first in, first out
            pool.close()

    asyncio.run(main())


def test_abandoned_response_drops_its_connection_and_the_pool_goes_on() -> None:
    async def main() -> None:
        async with _Server() as srv:
            pool = ConnectionPool(Endpoint.parse(f"http://127.0.0.1:{srv.port}"), max_connections=1)
            s = pool.fire(_wire(srv, "/slow"))
            await asyncio.sleep(0.05)
            s.close()  # e.g. a per-request timeout
            with pytest.raises(ConnectionFailed):
                await s.next_chunks()
            srv.release.set()
            again = pool.fire(_wire(srv, "/ok"))
            assert await again.read_all() == b"firstsecond"
            assert srv.connections == 2  # a fresh connection, not the abandoned one
            pool.close()

    asyncio.run(main())


def test_connection_close_refused_and_protocol_errors() -> None:
    async def main() -> None:
        async with _Server() as srv:
            pool = ConnectionPool(Endpoint.parse(f"http://127.0.0.1:{srv.port}"), max_connections=1)
            closing = pool.fire(_wire(srv, "/close"))
            assert await closing.read_all() == b"firstsecond"
            after = pool.fire(_wire(srv, "/ok"))  # the closed connection is not reused
            assert await after.read_all() == b"firstsecond" and srv.connections == 2
            bad = pool.fire(_wire(srv, "/bad"))
            with pytest.raises(ConnectionFailed, match="protocol error|connection lost"):
                await bad.read_all()
            pool.close()
            closed = pool.fire(_wire(srv, "/ok"))
            with pytest.raises(ConnectionFailed, match="closed"):
                await closed.wait_headers()
            port = srv.port
        refused = ConnectionPool(Endpoint.parse(f"http://127.0.0.1:{port}"), max_connections=1)
        r = refused.fire(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        with pytest.raises(ConnectionFailed, match="cannot connect"):
            await r.wait_headers()

    asyncio.run(main())


def test_free_port_is_bindable_now() -> None:
    port = free_port()
    assert 1024 <= port <= 65535
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))  # free a moment ago: binding it again succeeds
