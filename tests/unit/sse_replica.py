"""A stand-alone OpenAI-compatible streaming replica for the node-failure tests (not for the engine tests:
those use fake_openai_server.py in-process). Run as `python sse_replica.py PORT TOKEN_DELAY_S`: serves
/health, /v1/models and streamed /v1/completions (`max_tokens` tokens, one per chunk, TOKEN_DELAY_S apart,
continuous usage, then [DONE]) on 127.0.0.1:PORT until killed — a process a test can SIGKILL mid-stream."""

from __future__ import annotations

import asyncio
import json
import sys

from aiohttp import web


def app(delay_s: float) -> web.Application:
    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        n = int(body["max_tokens"])
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(1, n + 1):
            await asyncio.sleep(delay_s)
            chunk = {
                "choices": [{"index": 0, "text": "x", "finish_reason": "length" if i == n else None}],
                "usage": {"prompt_tokens": 4, "completion_tokens": i, "total_tokens": 4 + i},
            }
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    a = web.Application()
    a.router.add_get("/health", health)
    a.router.add_get("/v1/models", models)
    a.router.add_post("/v1/completions", completions)
    return a


if __name__ == "__main__":
    web.run_app(app(float(sys.argv[2])), host="127.0.0.1", port=int(sys.argv[1]), print=None)
