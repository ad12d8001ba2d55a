"""How fast is our load client? Our `openai` engine + open-loop runner vs GuideLLM, against a no-op server.

A no-op OpenAI-compatible streaming server runs in a separate process on 127.0.0.1 (raw asyncio protocol
on uvloop: keep-alive HTTP/1.1, each `/v1/completions` answered at once with one SSE chunk per requested
token — `max_tokens` or `max_completion_tokens`, capped at 64 — each with continuous usage, then a usage chunk
and `[DONE]`; also `/health`, `/v1/models`, and `GET /stamps`: the arrival time of every completion request so
far, then cleared, which `benchmarks/peers.py` reads). It does no model work, so the client is what is measured.

(a) ours: `OpenAIEngine` driven by `run_open_loop` — the real code path — on uvloop, with a constant
    arrival rate far above what the client can do (so it runs flat out; the connection pool,
    `max_connections`, bounds what is in flight), N requests.
(b) GuideLLM (PyPI `guidellm` 0.8.x, in its own virtualenv `.venv-guidellm`, made on first use: its pins
    clash with ours): `guidellm run` with the `throughput` profile, the same concurrency bound, the same
    request count (and a time bound), synthetic prompts of the same token length (its tokenizer is the
    builtin model's, `.cache/models/tiny-llama`, made by scripts/setup.sh) and the same `max_tokens`.

Both figures are measured the same way, from per-request timestamps: completed (successful) requests
divided by the sending window, first request start to last request end. For GuideLLM those are the
`request_start`/`request_end` times it reports for each successful request; for us `sent_s` and
`client_done_s` of each `ok` record.

Then a constant-rate run of ours at 500 req/s: p99 of the send lag `sent_s - intended_s`, where `sent_s`
is when the request was written to the socket (see `inferopt.transport.http1`: the runner's send timer writes it).

Last line of stdout: one JSON object with `ours_rps`, `guidellm_rps`, `ratio`, `p99_send_lag_ms_at_500rps`
and context: ours on the standard asyncio loop instead of uvloop, our client CPU per request, request
counts and errors, and the load average before and after (the box may be shared: a loaded CPU shows up
first in the send-lag tail).

Usage: .venv/bin/python benchmarks/client_throughput.py [--requests 12000] [--concurrency 256]

Deliberately not here: any tuning to this server or these lengths (the client code is the production one)
and serving-engine benchmarks (`vllm bench serve` measures servers, this measures clients).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from inferopt.transport.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
GUIDELLM_VENV = ROOT / ".venv-guidellm"
# the builtin model's tokenizer, where inferopt.model.build puts it ($INFEROPT_CACHE, else .cache)
TOKENIZER_DIR = Path(os.environ.get("INFEROPT_CACHE") or ROOT / ".cache") / "models" / "tiny-llama"
MODEL_ID = "noop"
INPUT_LEN = 128
OUTPUT_LEN = 8

# ----------------------------------------------------------------------------------------------- server


def _sse_body(n_tokens: int) -> bytes:
    parts = []
    for i in range(1, n_tokens + 1):
        fin = '"length"' if i == n_tokens else "null"
        parts.append(
            b'data: {"id":"cmpl-noop","object":"text_completion","created":0,"model":"noop","choices":[{"index":0,'
            b'"text":" tok","logprobs":null,"finish_reason":' + fin.encode() + b'}],"usage":{"prompt_tokens":1,'
            b'"completion_tokens":' + str(i).encode() + b',"total_tokens":' + str(i + 1).encode() + b"}}\n\n"
        )
    parts.append(
        b'data: {"id":"cmpl-noop","object":"text_completion","created":0,"model":"noop","choices":[],'
        b'"usage":{"prompt_tokens":1,"completion_tokens":' + str(n_tokens).encode() + b"}}\n\n"
    )
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


def _chunked(status: bytes, ctype: bytes, payload: bytes) -> bytes:
    return (
        b"HTTP/1.1 " + status + b"\r\nContent-Type: " + ctype + b"\r\nCache-Control: no-cache\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + f"{len(payload):x}".encode() + b"\r\n" + payload + b"\r\n0\r\n\r\n"
    )


def _plain(status: bytes, ctype: bytes, payload: bytes) -> bytes:
    return (
        b"HTTP/1.1 "
        + status
        + b"\r\nContent-Type: "
        + ctype
        + b"\r\nContent-Length: "
        + str(len(payload)).encode()
        + b"\r\n\r\n"
        + payload
    )


def serve(port: int) -> None:
    """The no-op server (runs until killed)."""
    import uvloop

    bodies = {n: _chunked(b"200 OK", b"text/event-stream", _sse_body(n)) for n in range(1, 65)}
    models = _plain(
        b"200 OK",
        b"application/json",
        json.dumps({"object": "list", "data": [{"id": MODEL_ID, "object": "model"}]}).encode(),
    )
    health = _plain(b"200 OK", b"text/plain", b"ok")
    stamps: list[float] = []  # arrival time of each completion request (benchmarks/peers.py reads them)
    missing = _plain(b"404 Not Found", b"text/plain", b"not found")

    class Proto(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            self.t = transport
            self.buf = b""

        def data_received(self, data: bytes) -> None:
            buf = self.buf + data if self.buf else data
            while True:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    break
                head = buf[:end]
                clen = 0
                lower = head.lower()
                i = lower.find(b"content-length:")
                if i >= 0:
                    clen = int(lower[i + 15 : lower.find(b"\r\n", i) if lower.find(b"\r\n", i) > 0 else None].strip())
                if len(buf) < end + 4 + clen:
                    break
                body = buf[end + 4 : end + 4 + clen]
                buf = buf[end + 4 + clen :]
                line = head[: head.find(b"\r\n")] if b"\r\n" in head else head
                if line.startswith(b"POST") and b"/completions" in line:
                    stamps.append(time.time())  # arrival: the request is complete in the buffer
                    j, skip = body.find(b'"max_tokens":'), 13
                    if j < 0:  # newer clients send the chat-era name
                        j, skip = body.find(b'"max_completion_tokens":'), 24
                    n = 16
                    if j >= 0:
                        k = j + skip
                        while body[k : k + 1] == b" ":
                            k += 1
                        e = k
                        while body[e : e + 1].isdigit():
                            e += 1
                        n = int(body[k:e] or 16)
                    self.t.write(bodies[max(1, min(n, 64))])
                elif line.startswith(b"GET /stamps"):  # the arrival times so far (epoch s), then cleared
                    self.t.write(_plain(b"200 OK", b"application/json", json.dumps(stamps).encode()))
                    stamps.clear()
                elif b"/v1/models" in line:
                    self.t.write(models)
                elif b"/health" in line:
                    self.t.write(health)
                else:
                    self.t.write(missing)
            self.buf = buf

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Proto, "127.0.0.1", port, backlog=4096, reuse_address=True)
        async with server:
            await server.serve_forever()

    uvloop.run(main())


def start_server() -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve", str(port)])
    deadline = time.time() + 20
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the no-op server did not start")


# ----------------------------------------------------------------------------------------------- ours


def _table(n: int, rate_per_s: float):
    from inferopt.config import ConstantArrivals, LengthConfig, WorkloadConfig
    from inferopt.workload import build_workload

    lengths = LengthConfig(
        input_median=INPUT_LEN,
        input_sigma=0.0,
        input_min=INPUT_LEN,
        input_max=INPUT_LEN,
        output_median=OUTPUT_LEN,
        output_sigma=0.0,
        output_min=OUTPUT_LEN,
        output_max=OUTPUT_LEN,
    )
    return build_workload(
        WorkloadConfig(
            name="bench", seed=0, num_requests=n, arrival=ConstantArrivals(rate_per_s=rate_per_s), lengths=lengths
        )
    )


_CPU_S: list[float] = []  # process CPU seconds of each run_open_loop call (prompt building included)


async def _ours(base_url: str, n: int, rate_per_s: float, max_connections: int) -> list:
    from inferopt.config import OpenAISystem
    from inferopt.engines.openai import OpenAIEngine
    from inferopt.measure.runner import run_open_loop

    engine = OpenAIEngine(
        OpenAISystem(base_url=base_url, served_model=MODEL_ID, vocab_size=32000, max_connections=max_connections)
    )
    table = _table(n, rate_per_s)
    await engine.start()
    try:
        cpu0 = time.process_time()
        res = await run_open_loop(engine, table, vocab_size=32000, timeout_s=120.0)
        _CPU_S.append(time.process_time() - cpu0)
    finally:
        await engine.stop()
    return res.records


def run_ours(base_url: str, n: int, rate_per_s: float, max_connections: int, use_uvloop: bool = True) -> list:
    if not use_uvloop:
        return asyncio.run(_ours(base_url, n, rate_per_s, max_connections))
    import uvloop

    return uvloop.run(_ours(base_url, n, rate_per_s, max_connections))


def window_rps(starts: list[float], ends: list[float]) -> float:
    """Completed requests / (last end - first start)."""
    return len(ends) / (max(ends) - min(starts)) if ends else 0.0


# ----------------------------------------------------------------------------------------------- GuideLLM


def ensure_guidellm() -> Path:
    exe = GUIDELLM_VENV / "bin" / "guidellm"
    if exe.exists():
        return exe
    print(f"making {GUIDELLM_VENV} (first use; a few minutes)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(GUIDELLM_VENV)], check=True)
    pip = [str(GUIDELLM_VENV / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    # torch first, pinned like ours: on a CPU box pip finds the CPU wheel, not a multi-GB CUDA build
    subprocess.run([*pip, "torch==2.13.0"], check=True)
    subprocess.run([*pip, "guidellm>=0.8,<0.9", "torch==2.13.0"], check=True)
    return exe


def _walk(obj: Any):
    if isinstance(obj, dict):
        yield obj
        for v in obj.values():
            yield from _walk(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _walk(v)


def run_guidellm(base_url: str, n: int, max_seconds: float, concurrency: int) -> dict[str, Any]:
    exe = ensure_guidellm()
    if not (TOKENIZER_DIR / "tokenizer.json").is_file():
        raise SystemExit(f"{TOKENIZER_DIR} has no tokenizer; fix: run `bash scripts/setup.sh` first")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "guidellm.json"
        cmd = [
            str(exe),
            "run",
            "--backend",
            f"kind=openai_http,target={base_url},model={MODEL_ID},request_format=/v1/completions",
            "--profile",
            f"kind=throughput,max_concurrency={concurrency}",
            "--constraint",
            f"kind=max_requests,count={n}",
            "--constraint",
            f"kind=max_duration,seconds={max_seconds:g}",
            "--tokenizer",
            f"kind=huggingface_auto,model={TOKENIZER_DIR}",
            "--data",
            f"kind=synthetic_text,prompt_tokens={INPUT_LEN},output_tokens={OUTPUT_LEN}",
            "--output",
            f"kind=json,path={out}",
            "--disable-console-interactive",
        ]
        env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
        t0 = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp)
        wall_s = time.time() - t0
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"guidellm failed (rc {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        report = json.loads(out.read_text())
    return {"report": report, "wall_s": wall_s, "cmd": cmd}


def guidellm_window(report: dict[str, Any]) -> tuple[float, int, int]:
    """(rps over the sending window, successful, errored) from GuideLLM's per-request records."""
    bench = report["benchmarks"][0]
    reqs = bench.get("requests", {})
    ok = reqs.get("successful", []) or []
    bad = reqs.get("errored", []) or []
    starts, ends = [], []
    for r in ok:
        info = r.get("info", r)
        timings = info.get("timings", info.get("request_timings", info))
        s = timings.get("request_start") or timings.get("resolve_start")
        e = timings.get("request_end") or timings.get("resolve_end")
        if s is not None and e is not None:
            starts.append(float(s))
            ends.append(float(e))
    if not ends:
        raise RuntimeError(
            "no per-request timings found in GuideLLM's report; keys: " + ", ".join(ok[0] if ok else reqs)
        )
    return window_rps(starts, ends), len(ok), len(bad)


# ----------------------------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--requests", type=int, default=12000, help="requests per throughput run")
    ap.add_argument("--concurrency", type=int, default=256, help="in-flight bound for both clients")
    ap.add_argument("--lag-requests", type=int, default=5000, help="requests in the 500 req/s run")
    ap.add_argument("--max-seconds", type=float, default=120.0, help="time bound for GuideLLM's run")
    ap.add_argument("--skip-guidellm", action="store_true")
    args = ap.parse_args()
    if args.serve:
        serve(args.serve)
        return
    import numpy as np

    load_before = os.getloadavg()
    proc, base_url = start_server()
    try:
        recs = run_ours(base_url, args.requests, 1e6, args.concurrency)
        cpu_us = _CPU_S[-1] / max(len(recs), 1) * 1e6
        ok = [r for r in recs if r.outcome == "ok"]
        ours_rps = window_rps([r.sent_s for r in ok], [r.client_done_s for r in ok])
        print(
            f"ours: {len(ok)}/{len(recs)} ok, {ours_rps:.0f} req/s over the sending window, "
            f"{cpu_us:.0f} us of client CPU per request",
            flush=True,
        )
        plain = [
            r for r in run_ours(base_url, args.requests, 1e6, args.concurrency, use_uvloop=False) if r.outcome == "ok"
        ]
        ours_rps_asyncio = window_rps([r.sent_s for r in plain], [r.client_done_s for r in plain])
        print(f"ours on the standard asyncio loop: {ours_rps_asyncio:.0f} req/s", flush=True)

        lag_recs = run_ours(base_url, args.lag_requests, 500.0, args.concurrency)
        lag_ok = [r for r in lag_recs if r.outcome == "ok"]
        lag_ms = np.array([(r.sent_s - r.intended_s) * 1000 for r in lag_ok])
        p50, p99, pmax = (float(np.percentile(lag_ms, q)) for q in (50, 99, 100))
        print(
            f"ours @500 req/s: {len(lag_ok)}/{len(lag_recs)} ok, send lag p50 {p50:.3f} ms, p99 {p99:.3f} ms, "
            f"max {pmax:.3f} ms",
            flush=True,
        )

        g_rps, g_ok, g_bad = None, 0, 0
        if not args.skip_guidellm:
            g = run_guidellm(base_url, args.requests, args.max_seconds, args.concurrency)
            g_rps, g_ok, g_bad = guidellm_window(g["report"])
            g_wall = g["wall_s"]
            print(
                f"guidellm: {g_ok} ok, {g_bad} errored, {g_rps:.0f} req/s over the sending window "
                f"(process wall {g_wall:.1f} s)",
                flush=True,
            )
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    print(
        json.dumps(
            {
                "ours_rps": round(ours_rps, 1),
                "guidellm_rps": round(g_rps, 1) if g_rps is not None else None,
                "ratio": round(ours_rps / g_rps, 2) if g_rps else None,
                "p99_send_lag_ms_at_500rps": round(p99, 3),
                "p50_send_lag_ms_at_500rps": round(p50, 3),
                "max_send_lag_ms_at_500rps": round(pmax, 3),
                "ours_rps_asyncio_loop": round(ours_rps_asyncio, 1),
                "ours_client_cpu_us_per_req": round(cpu_us, 1),
                "ours_ok": len(ok),
                "ours_sent": len(recs),
                "guidellm_ok": g_ok,
                "guidellm_errored": g_bad,
                "concurrency": args.concurrency,
                "input_len": INPUT_LEN,
                "output_len": OUTPUT_LEN,
                "loadavg_before": [round(x, 2) for x in load_before],
                "loadavg_after": [round(x, 2) for x in os.getloadavg()],
                "cpus": os.cpu_count(),
            }
        )
    )


if __name__ == "__main__":
    main()
