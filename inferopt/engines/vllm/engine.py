"""The `vllm` engine: launches `vllm serve` (its OpenAI server) for one arm, streams through `OpenAIEngine`, and
joins vLLM's per-request OpenTelemetry spans back onto the records.

`VLLMEngine` walks through one engine's life: start (build the model, start the span receiver, launch the
server in its own process group, wait for `/health`, reset the prefix cache), stream, server timings from the
spans (`inferopt.engines.vllm.spans`), `/metrics`, stop (SIGTERM to the process group, then SIGKILL). The pure
pieces — `serve_args`, `server_env`, `vllm_metrics`, `log_tail` — live in `serve.py`.

Deliberately not here: building the server's flags and environment or flattening its metrics
(`inferopt.engines.vllm.serve`), HTTP streaming (`inferopt.engines.openai`), the span receiver
(`inferopt.transport.otel`), the span -> timings mapping (`spans.py`), installing vLLM
(`scripts/setup_vllm.sh`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from inferopt.config import OpenAISystem, VLLMSystem
from inferopt.engines.base import EngineBase, FinishEvent, GenRequest, SentEvent, TokenEvent
from inferopt.engines.openai import OpenAIEngine
from inferopt.engines.vllm.kv_report import cache_config_from_metrics, parse_kv_log
from inferopt.engines.vllm.serve import log_tail, serve_args, server_env, vllm_metrics
from inferopt.engines.vllm.spans import timings_from_vllm_span, vllm_request_id
from inferopt.model.loading import resolve_model_dir
from inferopt.records import ServerTimings, clock_offset_s
from inferopt.transport.gauges import GaugePoller
from inferopt.transport.lifetime import tied_to_parent
from inferopt.transport.otel import OTLPReceiver
from inferopt.transport.ports import free_port

__all__ = ["VLLMEngine"]

ROOT = Path(__file__).resolve().parents[3]
LAUNCHER = Path(__file__).resolve().with_name("launch.py")
PLUGIN_MODULE = "inferopt_vllm_diagnostic"  # our vLLM plugin (scripts/vllm_plugin), for the diagnostic knob
STOP_GRACE_S = 15.0
SPAN_WAIT_S = 10.0
WARMUP_PREFIX = "warmup-"  # the load runner's warm-up request ids


class VLLMStartError(RuntimeError):
    """The server did not come up; the message carries the log's tail and the log's path."""


class VLLMEngine(EngineBase):
    """`vllm serve` for one arm.

    - `start()`: resolve the model directory (`builtin:` models are built first), start an `OTLPReceiver` (when
      `system.tracing`), pick a free port on 127.0.0.1, launch `<system.python> inferopt/engines/vllm/launch.py
      <serve_args(...)>` in its own process group (`start_new_session=True`), output to a log file, wait for
      `/health` (fail fast with the log's tail if the process exits, or after `startup_timeout_s`), reset the
      prefix cache (`POST /reset_prefix_cache`, a dev-mode route: the server runs with
      `VLLM_SERVER_DEV_MODE=1`), then start an `OpenAIEngine` on it.
    - `stream()`: the `OpenAIEngine`'s (header `X-Request-Id: <request_id>`; vLLM names the request
      `cmpl-<X-Request-Id>-0` in its span — `inferopt.engines.vllm.spans.vllm_request_id`).
    - `server_timings(request_ids)`: waits (bounded) for those requests' spans and maps each to `ServerTimings`
      (`inferopt.engines.vllm.spans.timings_from_vllm_span`).
    - `server_metrics()`: `/metrics` reduced to a flat dict of the series the analysis reads (`vllm_metrics`).
    - `stop()`: SIGTERM to the whole process group, SIGKILL after `STOP_GRACE_S`; safe to call twice."""

    def __init__(self, system: VLLMSystem, *, log_dir: str | Path | None = None) -> None:
        self.system = system
        self.log_dir = Path(log_dir) if log_dir else ROOT / ".cache" / "vllm-logs"
        self.proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None
        self.log_path: Path | None = None
        self.receiver: Any = None
        self._client: Any = None
        self._info: dict[str, Any] = {
            "engine": "vllm",
            "name": system.name,
            "started": False,
            "prefix_cache_reset": False,
        }
        self._stopped = False
        self._warmup_since_reset = False
        self._cmd: list[str] = []
        self._gauges: Any = None  # GaugePoller: peak KV usage / running sequences per scrape window

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        s = self.system
        python = s.python_path(ROOT)
        if not python.exists():
            raise FileNotFoundError(
                f"vllm engine: no interpreter at {python}; fix: run scripts/setup_vllm.sh "
                f"(CPU) or set `python:` in the system config to an interpreter that has vllm"
            )
        if s.diagnostic_decode_delay_ms:
            await asyncio.to_thread(_require_plugin, python)
        model_dir = resolve_model_dir(s.model)
        try:
            startup_s, reset = await self._launch(model_dir)
        except BaseException:
            await self.stop()  # whatever got started (receiver, server) goes again
            raise
        self._info = {
            "engine": "vllm",
            "name": s.name,
            "started": True,
            "base_url": self.base_url,
            "pid": self.proc.pid,
            "command": self._cmd,
            "log_path": str(self.log_path),
            "startup_s": round(startup_s, 3),
            "prefix_cache_reset": bool(reset),
            "tracing": bool(self.receiver),
            "otlp_endpoint": self.receiver.endpoint if self.receiver else None,
            "vllm_version": await self._version(),
            "system": s.model_dump(mode="json"),
        }

    async def _launch(self, model_dir: Path) -> tuple[float, bool]:
        """Receiver, server process, /health, prefix-cache reset, client; returns (startup_s, reset ok)."""
        s = self.system
        python = s.python_path(ROOT)
        if s.tracing:
            self.receiver = OTLPReceiver().start()
        self.port = free_port()
        args = serve_args(
            s, model_dir, self.port, otlp_traces_endpoint=self.receiver.endpoint if self.receiver else None
        )
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.log_dir / f"{s.name}-{self.port}-{int(time.time())}.log"
        self._cmd = [str(python), str(LAUNCHER), *args]
        with self.log_path.open("wb") as log:
            # Popen returns at once (the wait for /health below is async)
            self.proc = subprocess.Popen(
                self._cmd,
                stdout=log,
                stderr=subprocess.STDOUT,  # noqa: ASYNC220
                stdin=subprocess.DEVNULL,
                env=server_env(s),
                cwd=str(ROOT),
                **tied_to_parent(),  # own process group; SIGTERM when this process dies
            )
        t0 = time.monotonic()
        await self._wait_healthy()
        startup_s = time.monotonic() - t0
        reset = await self._reset_prefix_cache()
        vocab = int(json.loads((Path(model_dir) / "config.json").read_text())["vocab_size"])
        # vLLM refuses a non-zero priority unless it schedules by priority; real output ids come back per chunk
        self._client = OpenAIEngine(
            OpenAISystem(
                name=s.name,
                base_url=self.base_url,
                served_model=s.name,
                vocab_size=vocab,
                metrics_url=f"{self.base_url}/metrics",
                max_connections=s.max_connections,
                send_priority=s.scheduling_policy == "priority",
            ),
            extra_body={"return_token_ids": True},
        )
        await self._client.start()
        self._gauges = GaugePoller(f"{self.base_url}/metrics").start()
        return startup_s, reset

    async def _get(self, path: str, timeout_s: float = 5.0) -> tuple[int, str]:
        import aiohttp

        async with (
            aiohttp.ClientSession() as sess,
            sess.get(self.base_url + path, timeout=aiohttp.ClientTimeout(total=timeout_s)) as r,
        ):
            return r.status, await r.text()

    async def _wait_healthy(self) -> None:
        import aiohttp

        deadline = time.monotonic() + self.system.startup_timeout_s
        assert self.proc is not None and self.log_path is not None
        while True:
            code = self.proc.poll()
            if code is not None:
                raise VLLMStartError(
                    f"vllm server exited with code {code} during start-up (log {self.log_path}):\n"
                    f"{log_tail(self.log_path)}"
                )
            try:
                status, _ = await self._get("/health", timeout_s=2.0)
                if status == 200:
                    return
            except (aiohttp.ClientError, TimeoutError, OSError):
                pass
            if time.monotonic() > deadline:
                raise VLLMStartError(
                    f"vllm server not healthy after {self.system.startup_timeout_s:g} s "
                    f"(log {self.log_path}):\n{log_tail(self.log_path)}"
                )
            await asyncio.sleep(0.5)

    async def _reset_prefix_cache(self) -> bool:
        """POST /reset_prefix_cache (dev-mode route); True when vLLM says it succeeded."""
        import aiohttp

        try:
            async with (
                aiohttp.ClientSession() as sess,
                sess.post(self.base_url + "/reset_prefix_cache", timeout=aiohttp.ClientTimeout(total=30.0)) as r,
            ):
                if r.status != 200:
                    return False
                text = await r.text()
        except (aiohttp.ClientError, TimeoutError):
            return False
        try:
            return bool(json.loads(text).get("success", True))
        except (json.JSONDecodeError, AttributeError):
            return True  # older servers answer 200 with an empty body

    async def reset_prefix_cache(self) -> bool:
        """Empty vLLM's prefix cache now (e.g. between trials on one server); recorded in `info()`."""
        ok = await self._reset_prefix_cache()
        self._info["prefix_cache_reset"] = bool(ok)
        return ok

    async def _version(self) -> str | None:
        try:
            status, text = await self._get("/version")
            return json.loads(text).get("version") if status == 200 else None
        except Exception:  # noqa: BLE001 - informational only
            return None

    async def stop(self) -> None:
        """Close the client, end the server's process group (SIGTERM, then SIGKILL after `STOP_GRACE_S`),
        stop the span receiver. Idempotent; never raises for an already-dead server."""
        gauges, self._gauges = self._gauges, None
        if gauges is not None:
            await gauges.stop()
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):  # stopping must not fail
                await client.stop()
        if self.proc is not None and not self._stopped:
            await asyncio.to_thread(terminate_group, self.proc, STOP_GRACE_S)
            self._info["exit_code"] = self.proc.returncode
        if self.receiver is not None:
            self.receiver.stop()  # spans already received stay readable for server_timings()
        self._info["started"] = False
        self._stopped = True

    def info(self) -> dict[str, Any]:
        """What the engine knows of itself; `server_died` (the exit code) once the server exited before `stop`."""
        out = dict(self._info)
        if self.proc is not None and not self._stopped and self.proc.poll() is not None:
            out["server_died"] = self.proc.returncode
        return out

    async def server_metrics(self) -> dict[str, float]:
        """`/metrics` as `vllm_metrics` flattens it. If warm-up requests ran since the last prefix-cache
        reset, the cache is reset first: the runner scrapes right after its warm-ups, just before the
        measured clock starts, and warm-ups replay the workload's first prompts — a cache they primed
        would serve the measured requests (SPEC V4, pre-warmed caches).

        Each call also closes a window of the gauge poller: `info()["server_gauge_peaks"]` holds the peaks
        (KV usage, running and waiting sequences) since the previous call — after the runner's second
        scrape, those of the measured load — and `info()["kv_cache_report"]` what vLLM says about its KV
        cache (cache_config_info labels, the start-up log's KV size line), for the locate step."""
        if self._client is None:
            return {}
        if self._warmup_since_reset:
            self._warmup_since_reset = False
            await self.reset_prefix_cache()
        raw = await self._client.server_metrics()
        if self._gauges is not None:
            self._info["server_gauge_peaks"] = self._gauges.take()
        if "kv_cache_report" not in self._info:
            log = self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""
            self._info["kv_cache_report"] = {"cache_config": cache_config_from_metrics(raw), "log": parse_kv_log(log)}
        return vllm_metrics(raw)

    # ------------------------------------------------------------------ requests

    def prepare(self, requests: list[GenRequest]) -> None:
        """Encode request bodies before the clock starts (the runner calls this; see OpenAIEngine.prepare)."""
        if self._client is not None:
            self._client.prepare(requests)

    def fire(self, request: GenRequest) -> AsyncIterator[SentEvent | TokenEvent | FinishEvent]:
        """Send now and return the events (the load runner calls this from its send timer; see
        OpenAIEngine.fire)."""
        if self._client is None:
            raise RuntimeError("VLLMEngine.fire() before start() (or after stop()); fix: await engine.start() first")
        if request.request_id.startswith(WARMUP_PREFIX):
            self._warmup_since_reset = True
        return self._client.fire(request)

    async def stream(self, request: GenRequest) -> AsyncIterator[SentEvent | TokenEvent | FinishEvent]:
        async for event in self.fire(request):
            yield event

    async def server_timings(self, request_ids: list[str], wait_s: float = SPAN_WAIT_S) -> dict[str, ServerTimings]:
        """Server-side timings of `request_ids` from their vLLM spans (waits up to `wait_s` for spans still
        in flight; requests without a span — rejected, failed, lost — are simply absent)."""
        if self.receiver is None:
            return {}
        want = {vllm_request_id(r): r for r in request_ids}
        if self.proc is not None and self.proc.poll() is None:  # a dead server sends nothing more
            await asyncio.to_thread(self.receiver.wait_for, lambda spans: want.keys() <= spans.keys(), wait_s)
        return self.timings_from_spans(request_ids)

    def timings_from_spans(self, request_ids: list[str]) -> dict[str, ServerTimings]:
        if self.receiver is None:
            return {}
        spans = self.receiver.spans()
        offset = clock_offset_s()
        out = {}
        for rid in request_ids:
            sp = spans.get(vllm_request_id(rid))
            if sp is not None:
                out[rid] = timings_from_vllm_span(sp, offset_s=offset)
        return out


def _require_plugin(python: Path) -> None:
    """A planted decode delay needs our vLLM plugin in that interpreter; without it the delay would silently not
    happen and an error-rate measurement would count misses of a regression that was never there."""
    probe = subprocess.run(
        [str(python), "-c", f"import {PLUGIN_MODULE}"], capture_output=True, text=True, timeout=60, check=False
    )
    if probe.returncode != 0:
        raise RuntimeError(
            f"vllm engine: diagnostic_decode_delay_ms is set but {python} lacks inferopt's vLLM plugin "
            f"({PLUGIN_MODULE}); fix: bash scripts/setup_vllm.sh (CPU) or "
            f"{python} -m pip install --no-deps {ROOT / 'scripts' / 'vllm_plugin'}"
        )


def terminate_group(proc: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> int | None:
    """SIGTERM the process group led by `proc` (started with `start_new_session=True`, so its pgid is its
    pid), SIGKILL what is left after `grace_s` (vLLM's engine-core and worker processes may outlive the
    leader), reap `proc`. Safe when the group is already gone. Returns the exit code."""
    _killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    _killpg(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass
    return proc.returncode


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
