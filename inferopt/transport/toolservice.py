"""A real local tool service for agentic sessions, and the client that times each call around the real round trip.

`ToolService` is a tiny stdlib HTTP server on 127.0.0.1 (an OS-chosen port) run on its own thread: `GET /call`
with `sleep_ms`, `tokens`, `seed`, `vocab` and the call's `args` (a JSON object) sleeps that long (the tool's work:
the latency a workload samples from its configured distribution) and answers `{"token_ids": [...], "args": ...}` —
the tool's result (drawn from the seed and the arguments), which joins the session's history. Each request is
served on its own thread, so concurrent sessions' calls overlap as a real service's do. `stop()` (or leaving the
`with` block) shuts it down and joins every thread it started: nothing outlives a run.

`ToolClient.call` measures the call on the client's clock from before the request is written to after the answer
is read (connection, HTTP, the sleep, the reply) — the figure a run records as T_external, never the planned sleep.

Deliberately not here: which calls a turn makes (the workload) or what they mean for the record (`agentic.py`).
"""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp

from inferopt.records import now_s


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        url = urlsplit(self.path)
        if url.path != "/call":
            self._reply(404, {"error": f"no such path {url.path!r}; the tool lives at /call"})
            return
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        try:
            sleep_ms, n, seed, vocab = float(q["sleep_ms"]), int(q["tokens"]), int(q["seed"]), int(q["vocab"])
            args = json.loads(q.get("args", "{}"))
            if not isinstance(args, dict):
                raise ValueError(f"args is a JSON {type(args).__name__}, not an object")
        except (KeyError, ValueError) as exc:
            self._reply(400, {"error": f"bad query {url.query!r}: {exc}; need sleep_ms, tokens, seed, vocab[, args]"})
            return
        time.sleep(max(0.0, sleep_ms) / 1000.0)
        rng = random.Random(f"{seed}/{json.dumps(args, sort_keys=True)}")  # the result depends on the arguments
        ids = [rng.randrange(3, max(4, vocab)) for _ in range(n)]
        self._reply(200, {"token_ids": ids, "slept_ms": sleep_ms, "args": args})

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
        """Quiet: one line per tool call on stderr would drown the run's own output."""


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins the handler threads: none is left running after stop()
    block_on_close = True


class ToolService:
    """The service's lifetime: `start()` binds 127.0.0.1 on a free port and serves on a thread; `stop()` ends both."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the tool service is not running; fix: start() it (or use it as a context manager)")
        return f"http://{self.host}:{self._server.server_address[1]}"

    def start(self) -> ToolService:
        self._server = _Server((self.host, 0), _Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="tool-service", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = self._thread = None

    def __enter__(self) -> ToolService:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(frozen=True)
class ToolCall:
    """One measured call: the result's token ids and the client-side round trip in seconds."""

    token_ids: list[int]
    measured_s: float


class ToolClient:
    """Calls the service from the runner's event loop (one aiohttp session, kept-alive connections)."""

    def __init__(self, url: str, vocab_size: int, timeout_s: float = 60.0) -> None:
        self.url, self.vocab_size = url, vocab_size
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s))

    async def call(self, sleep_ms: float, tokens: int, seed: int, args: dict[str, Any] | None = None) -> ToolCall:
        """One tool call with its arguments (a JSON object); raises on a failed call (the caller records it as the
        turn's error)."""
        params = {
            "sleep_ms": f"{sleep_ms:.3f}",
            "tokens": str(tokens),
            "seed": str(seed),
            "vocab": str(self.vocab_size),
            "args": json.dumps(args or {}, separators=(",", ":")),
        }
        t0 = now_s()
        async with self._session.get(f"{self.url}/call", params=params) as resp:
            body = await resp.json()
            if resp.status != 200:
                raise RuntimeError(f"tool service answered {resp.status}: {body.get('error')}")
        return ToolCall(token_ids=[int(x) for x in body["token_ids"]], measured_s=now_s() - t0)

    async def close(self) -> None:
        await self._session.close()
