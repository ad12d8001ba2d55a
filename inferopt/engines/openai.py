"""The `openai` engine: any OpenAI-compatible streaming endpoint (vLLM, SGLang, TGI, a gateway) over HTTP.

Timed requests go through `inferopt.transport.http1.ConnectionPool`: `fire(request)` writes the request on an
idle keep-alive connection synchronously, from the load runner's send-timer callback, and every body chunk is
stamped as it comes off the socket; control requests (`/v1/models`, `/metrics`) use one `aiohttp.ClientSession`.
Each request is one streamed POST to `/v1/completions` (or `/v1/chat/completions`) with header `X-Request-Id`,
which vLLM uses as its request id. `OpenAIEngine` says what the body holds, how tokens are counted and how a
stream's outcome is read.

Output lengths: a request with `force_length` (workload.output_lengths: forced) carries vLLM's `ignore_eos`
and `min_tokens` = its max_tokens; nothing else may set them (`extra_body` refuses them: forcing is declared by
the workload, per request, where the lint sees it). Deliberately not here: launching a server
(`inferopt.engines.vllm.engine`) and the server-side phase join (spans and `/metrics`: the vLLM engine's).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import h11

from inferopt.config import OpenAISystem
from inferopt.engines.base import EngineBase, FinishEvent, GenRequest, RequestRejected, SentEvent, TokenEvent
from inferopt.records import ServerTimings
from inferopt.transport.http1 import ConnectionFailed, ConnectionPool, Endpoint, ResponseStream, encode_request
from inferopt.transport.prometheus import scrape
from inferopt.transport.retry import parse_retry_after_s
from inferopt.transport.sse import SSEParser

REJECT_CODES = frozenset({429, 503})
FORBIDDEN_BODY_KEYS = frozenset({"ignore_eos", "min_tokens"})
_ERROR_BODY_CHARS = 500
IDLE_CONNECTION_S = 4.0


class OpenAIStreamError(RuntimeError):
    """The request failed (HTTP error, an error event, a broken stream): outcome `error`."""


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _error_of(obj: dict[str, Any]) -> tuple[int | None, str] | None:
    """(code, message) if this SSE payload is an error event (vLLM nests it under `error`)."""
    err = obj.get("error")
    if isinstance(err, dict):
        code = err.get("code")
        return (
            int(code) if isinstance(code, int | str) and str(code).isdigit() else None,
            str(err.get("message") or err),
        )
    if obj.get("object") == "error":
        code = obj.get("code")
        return (
            int(code) if isinstance(code, int | str) and str(code).isdigit() else None,
            str(obj.get("message") or obj),
        )
    if isinstance(err, str):
        return None, err
    return None


class OpenAIEngine(EngineBase):
    """Streams requests to an OpenAI-compatible server.

    Body: the prompt as token ids, `max_tokens`, `stream_options: {include_usage, continuous_usage_stats}`,
    `priority` when the request has one (and `send_priority` is on). vLLM names the request
    `cmpl-<X-Request-Id>-<i>` (`_base_request_id` in its OpenAI server, possibly with a suffix), so a join on
    its spans matches by prefix. At most `system.max_connections` connections: a request beyond them waits
    for a free one, and that wait counts as client time (`SentEvent`).

    Events: one `SentEvent` (when the request was written to the socket), one `TokenEvent` per SSE chunk that
    carries tokens, then a `FinishEvent` with the finish reason (and `cached_tokens` when usage reports
    `prompt_tokens_details`). Token counts: the chunk's `token_ids` when the server returns them (vLLM with
    `return_token_ids`, via `extra_body`), else the delta of `usage.completion_tokens` (a chunk may hold
    several tokens; ids are placeholders, -1), else one token per non-empty text chunk, and any surplus the
    final usage reports arrives as one last event.

    Outcomes: HTTP 429/503, or an SSE `{"error": {"code": 429|503}}` event inside a 200 stream (vLLM's
    `--max-num-queued-reqs`) -> `RequestRejected` (with the `Retry-After` delay when the answer has one;
    retrying is the caller's choice: `inferopt.transport.retry`). Other HTTP errors, other error events, a
    connection lost mid-stream or a stream ending without `[DONE]` or a finish reason -> `OpenAIStreamError`.
    Timeouts belong to the load runner (it cancels; the connection is dropped, not reused). With `api: chat`
    the prompt must be text: each id is sent as a word `w<id>`, so the server's prompt length only
    approximates `input_len` — prefer `completions`."""

    def __init__(self, system: OpenAISystem, *, extra_body: dict[str, Any] | None = None) -> None:
        bad = FORBIDDEN_BODY_KEYS & set(extra_body or {})
        if bad:
            raise ValueError(
                f"extra_body sets {sorted(bad)}: an undeclared forced output length (SPEC V4); "
                "fix: remove them and declare workload.output_lengths: forced (sent per request)"
            )
        self.system = system
        self.extra_body = dict(extra_body or {})
        self.chat = system.api == "chat"
        self.url = f"{system.base_url}/v1/{'chat/completions' if self.chat else 'completions'}"
        self.metrics_url: str | None = None
        self._session: aiohttp.ClientSession | None = None
        self.endpoint = Endpoint.parse(system.base_url)
        self._path = "/v1/chat/completions" if self.chat else "/v1/completions"
        self._pool: ConnectionPool | None = None
        self._wires: dict[str, bytes] = {}

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            # idle connections are dropped before a server would (uvicorn, vLLM's server, closes them after
            # 5 s): reusing one the server just closed would turn into a spurious error record
            connector=aiohttp.TCPConnector(
                limit=self.system.max_connections, limit_per_host=0, keepalive_timeout=IDLE_CONNECTION_S
            ),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30.0),
            headers=self.system.headers,
            raise_for_status=False,
        )
        self._pool = ConnectionPool(self.endpoint, self.system.max_connections, keepalive_s=IDLE_CONNECTION_S)
        try:
            await self._probe()
        except BaseException:
            await self.stop()
            raise

    async def _probe(self) -> None:
        """Fail start() early when nothing answers at base_url; find the /metrics endpoint."""
        assert self._session is not None
        try:
            async with self._session.get(
                f"{self.system.base_url}/v1/models", timeout=aiohttp.ClientTimeout(total=10.0)
            ) as resp:
                await resp.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ConnectionError(
                f"no OpenAI-compatible server answers at {self.system.base_url} "
                f"({type(exc).__name__}: {exc}); fix: start it, or correct base_url"
            ) from exc
        url = self.system.metrics_url or f"{self.system.base_url}/metrics"
        try:
            await scrape(self._session, url, timeout_s=10.0)
            self.metrics_url = url
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            if self.system.metrics_url:
                raise ConnectionError(
                    f"metrics_url {url} does not serve Prometheus metrics "
                    f"({type(exc).__name__}: {exc}); fix: correct it or remove it"
                ) from exc
            self.metrics_url = None

    async def stop(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def info(self) -> dict[str, Any]:
        sysd = self.system.model_dump()
        sysd["headers"] = {k: "<set>" for k in self.system.headers}  # never log credentials
        return {
            "engine": "openai",
            **sysd,
            "url": self.url,
            "metrics_url": self.metrics_url,
            "extra_body": self.extra_body,
            "client": f"inferopt http1 pool (h11 {h11.__version__}); control: aiohttp {aiohttp.__version__}",
        }

    async def server_metrics(self) -> dict[str, float]:
        """The server's Prometheus metrics as a flat dict; {} without a metrics endpoint or if it fails."""
        if self._session is None or self.metrics_url is None:
            return {}
        try:
            return await scrape(self._session, self.metrics_url)
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return {}

    # ------------------------------------------------------------------ one request

    def prepare(self, requests: list[GenRequest]) -> None:
        """Encode the requests (body and HTTP framing) before the clock starts (the runner calls this; a
        request it did not see is encoded when sent)."""
        self._wires = {r.request_id: self._wire(r) for r in requests}

    def _wire(self, req: GenRequest) -> bytes:
        headers = {**self.system.headers, "Content-Type": "application/json", "X-Request-Id": req.request_id}
        return encode_request(self.endpoint, self._path, self._body(req), headers)

    def _body(self, req: GenRequest) -> bytes:
        body: dict[str, Any] = {
            "model": self.system.served_model,
            "max_tokens": req.max_new_tokens,
            "temperature": self.system.temperature,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        if self.chat:
            body["messages"] = [{"role": "user", "content": " ".join(f"w{i}" for i in req.prompt_token_ids)}]
        else:
            body["prompt"] = req.prompt_token_ids
        if req.priority and self.system.send_priority:
            body["priority"] = req.priority
        if req.force_length:
            body["ignore_eos"] = True
            body["min_tokens"] = req.max_new_tokens
        body.update(self.extra_body)
        return _dumps(body)

    def fire(self, request: GenRequest) -> AsyncIterator[SentEvent | TokenEvent | FinishEvent]:
        """Send the request *now* — from the caller's own callback, no await in between (the load runner's
        send timer calls this) — and return its events. On an idle pooled connection the bytes are on the
        socket before this returns; otherwise the request goes out as soon as a connection is free."""
        if self._pool is None:
            raise RuntimeError("OpenAIEngine.fire() before start(); fix: await engine.start() first")
        wire = self._wires.pop(request.request_id, None) or self._wire(request)
        return self._events(self._pool.fire(wire), request)

    async def stream(self, request: GenRequest) -> AsyncIterator[SentEvent | TokenEvent | FinishEvent]:
        async for event in self.fire(request):
            yield event

    async def _events(
        self, resp: ResponseStream, request: GenRequest
    ) -> AsyncIterator[SentEvent | TokenEvent | FinishEvent]:
        reported = resp.sent_s is not None
        try:
            if reported:  # sent synchronously by fire(): say so at once
                yield SentEvent(resp.sent_s)
            try:
                await resp.wait_headers()
            except ConnectionFailed as exc:
                raise OpenAIStreamError(f"no response from {self.url}: {exc}") from exc
            if not reported and resp.sent_s is not None:  # it waited for a connection, then went out
                yield SentEvent(resp.sent_s)
            if resp.status != 200:
                try:
                    text = (await resp.read_all()).decode("utf-8", errors="replace")[:_ERROR_BODY_CHARS]
                except ConnectionFailed:
                    text = ""
                if resp.status in REJECT_CODES:
                    after = next((v.decode("latin-1") for k, v in resp.headers if k.lower() == b"retry-after"), None)
                    raise RequestRejected(f"HTTP {resp.status}: {text}", parse_retry_after_s(after))
                hint = (
                    "; fix: start the server with --scheduling-policy priority, or set send_priority: false"
                    if "priority" in text.lower()
                    else ""
                )
                raise OpenAIStreamError(f"HTTP {resp.status} from {self.url}: {text}{hint}")
            async for event in self._sse_events(resp):
                yield event
        finally:
            resp.close()  # a response not read to its end drops its connection

    async def _sse_events(self, resp: ResponseStream) -> AsyncIterator[TokenEvent | FinishEvent]:
        parser = SSEParser()
        counted = 0  # tokens yielded so far
        usage_total: int | None = None
        finish_reason: str | None = None
        cached = 0
        done = False
        chat = self.chat
        while True:
            try:
                chunks = await resp.next_chunks()
            except ConnectionFailed as exc:
                raise OpenAIStreamError(f"connection lost mid-stream after {counted} tokens: {exc}") from exc
            if chunks is None:
                break
            for received_s, data in chunks:
                for ev in parser.feed(data):
                    if done:
                        continue  # nothing counts after [DONE]
                    if ev.is_done:
                        done = True
                        continue
                    try:
                        obj = json.loads(ev.data)
                    except json.JSONDecodeError as exc:
                        raise OpenAIStreamError(
                            f"undecodable SSE data after {counted} tokens: {ev.data[:200]!r}"
                        ) from exc
                    err = _error_of(obj)
                    if err is not None:
                        code, message = err
                        if code in REJECT_CODES:
                            raise RequestRejected(f"error event in the stream (code {code}): {message}")
                        raise OpenAIStreamError(
                            f"error event in the stream after {counted} tokens (code {code}): {message}"
                        )
                    ids: list[int] | None = None
                    text = False
                    for ch in obj.get("choices") or ():
                        tids = ch.get("token_ids")
                        if tids:
                            ids = tids if ids is None else ids + tids
                        fr = ch.get("finish_reason")
                        if fr:
                            finish_reason = fr
                        piece = (ch.get("delta") or {}).get("content") if chat else ch.get("text")
                        text = text or bool(piece)
                    usage = obj.get("usage")
                    if usage:
                        usage_total = usage.get("completion_tokens", usage_total)
                        details = usage.get("prompt_tokens_details") or {}
                        cached = int(details.get("cached_tokens") or cached)
                    if ids:
                        counted += len(ids)
                        yield TokenEvent(tuple(ids), received_s=received_s)
                    elif usage_total is not None and usage_total > counted:
                        n, counted = usage_total - counted, usage_total
                        yield TokenEvent((-1,) * n, received_s=received_s)
                    elif text and usage is None:
                        counted += 1  # a server without continuous usage: one token per text chunk
                        yield TokenEvent((-1,), received_s=received_s)
        if not done and finish_reason is None:
            raise OpenAIStreamError(
                f"the stream ended without [DONE] or a finish reason after {counted} tokens "
                "(server closed the connection mid-stream)"
            )
        yield FinishEvent(ServerTimings(finish_reason=finish_reason, cached_tokens=cached))
