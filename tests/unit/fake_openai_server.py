"""A small scripted OpenAI-compatible streaming server (aiohttp.web) on 127.0.0.1 for the `openai` engine
tests. What it does to a request is chosen by the request's X-Request-Id through `modes`
(`{request_id: mode}`, default `ok`); every request body it receives is kept in `bodies`.

Modes: ok (one token per chunk, continuous usage), multi (3 tokens per chunk), ids (token_ids returned),
http429, http503, sse503 (200, then an error event with code 503), sse500 (a token, then an error event
code 500), die (a token, then the connection is cut), nodone (a token, then a clean end without [DONE]),
slow (sleeps before answering), nousage (text chunks, usage only at the end), busy (HTTP 429 with header
`Retry-After: <retry_after>` for the first `busy_first` requests of that id, then ok; `calls` counts each
id's requests and `call_s` their arrival times).
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

METRICS = """# HELP vllm:num_preemptions_total Cumulative preemptions.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{model_name="m"} 3.0
vllm:request_queue_time_seconds_sum{model_name="m"} 1.5
vllm:request_queue_time_seconds_count{model_name="m"} 6.0
"""


@dataclass
class FakeOpenAIServer:
    modes: dict[str, str] = field(default_factory=dict)
    metrics: bool = True
    slow_s: float = 5.0
    retry_after: str = "1"
    busy_first: int = 2
    calls: dict[str, int] = field(default_factory=dict)
    call_s: dict[str, list[float]] = field(default_factory=dict)
    bodies: dict[str, dict[str, Any]] = field(default_factory=dict)
    port: int = 0
    _runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> FakeOpenAIServer:
        app = web.Application()
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        if self.metrics:
            app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=METRICS)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        rid = request.headers.get("X-Request-Id", "")
        body = await request.json()
        self.bodies[rid] = body
        mode = self.modes.get(rid, "ok")
        n = int(body["max_tokens"])
        self.calls[rid] = self.calls.get(rid, 0) + 1
        self.call_s.setdefault(rid, []).append(time.monotonic())
        if mode == "busy" and self.calls[rid] <= self.busy_first:
            return web.json_response(
                {"error": {"message": "busy", "code": 429}}, status=429, headers={"Retry-After": self.retry_after}
            )
        if mode in ("http429", "http503"):
            return web.json_response({"error": {"message": "busy", "code": int(mode[4:])}}, status=int(mode[4:]))
        if mode == "slow":
            await asyncio.sleep(self.slow_s)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        async def send(obj: Any) -> None:
            await resp.write(b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n")

        def chunk(k: int, total: int, finish: str | None = None, ids: list[int] | None = None) -> dict[str, Any]:
            choice: dict[str, Any] = {"index": 0, "text": "x" * k, "finish_reason": finish}
            if ids is not None:
                choice["token_ids"] = ids
            return {
                "id": f"cmpl-{rid}",
                "choices": [choice],
                "usage": {"prompt_tokens": 4, "completion_tokens": total, "total_tokens": 4 + total},
            }

        if mode == "sse503":
            await send(
                {"error": {"object": "error", "message": "too many queued", "type": "ServiceUnavailable", "code": 503}}
            )
            await send(b"[DONE]")
            await resp.write_eof()
            return resp
        if mode in ("sse500", "die", "nodone"):
            await send(chunk(1, 1))
            if mode == "sse500":
                await send(
                    {"error": {"object": "error", "message": "engine dead", "type": "InternalServerError", "code": 500}}
                )
                await send(b"[DONE]")
            elif mode == "die":
                await asyncio.sleep(0.01)
                request.transport.close()
                return resp
            await resp.write_eof()
            return resp
        step = 3 if mode == "multi" else 1
        done = 0
        while done < n:
            k = min(step, n - done)
            done += k
            finish = "length" if done >= n else None
            if mode == "nousage":
                await send({"choices": [{"index": 0, "text": "x", "finish_reason": finish}]})
            else:
                await send(chunk(k, done, finish, list(range(100 + done - k, 100 + done)) if mode == "ids" else None))
        await send(
            {
                "choices": [],
                "usage": {
                    "prompt_tokens": 4,
                    "completion_tokens": n,
                    "total_tokens": 4 + n,
                    "prompt_tokens_details": {"cached_tokens": 2},
                },
            }
        )
        await resp.write(b": keep-alive comment\n\ndata: [DONE]\n\n")
        await resp.write_eof()
        return resp
