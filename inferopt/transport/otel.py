"""A tiny OTLP/HTTP trace receiver: the server side of the per-request phase join.

A serving engine started with `--otlp-traces-endpoint http://127.0.0.1:<port>/v1/traces` (and
`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf`) POSTs its spans here as protobuf
`ExportTraceServiceRequest` bodies (optionally gzip-compressed). `OTLPReceiver` runs a threaded HTTP server
on 127.0.0.1 in a background thread, decodes each body with `opentelemetry-proto` and keeps every span as a
flat `SpanRecord` (name, start/end in epoch nanoseconds, attributes as plain Python values), indexed by the
attribute that names the request (`gen_ai.request.id` by default).

Deliberately not here: what a span *means* (vLLM's attribute names and the mapping to `ServerTimings` live
in `inferopt.measure.join`), OTLP/gRPC, metrics or logs signals, and any persistence: spans live in memory
for one engine run.
"""

from __future__ import annotations

import gzip
import threading
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

__all__ = ["OTLPReceiver", "SpanRecord", "decode_export_request"]

REQUEST_ID_ATTRIBUTE = "gen_ai.request.id"


@dataclass(frozen=True)
class SpanRecord:
    """One received span, flattened. Times are the sender's wall clock (Unix epoch, nanoseconds)."""

    name: str
    start_unix_ns: int
    end_unix_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)
    trace_id_hex: str = ""
    received_s: float = 0.0  # receiver's time.time() when the POST carrying it arrived


def _any_value(v: Any) -> Any:
    """An OTLP AnyValue as a plain Python value (arrays -> list, kvlists -> dict, bytes stay bytes)."""
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [_any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _any_value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind)


def decode_export_request(body: bytes, received_s: float | None = None) -> list[SpanRecord]:
    """Spans of one protobuf `ExportTraceServiceRequest` body (already decompressed)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    req = ExportTraceServiceRequest()
    req.ParseFromString(body)
    t = time.time() if received_s is None else received_s
    out = []
    for rs in req.resource_spans:
        for ss in rs.scope_spans:
            for sp in ss.spans:
                out.append(
                    SpanRecord(
                        name=sp.name,
                        start_unix_ns=int(sp.start_time_unix_nano),
                        end_unix_ns=int(sp.end_time_unix_nano),
                        attributes={kv.key: _any_value(kv.value) for kv in sp.attributes},
                        trace_id_hex=sp.trace_id.hex(),
                        received_s=t,
                    )
                )
    return out


def _decompress(body: bytes, encoding: str) -> bytes:
    encoding = encoding.strip().lower()
    if encoding == "gzip":
        return gzip.decompress(body)
    if encoding == "deflate":
        return zlib.decompress(body)
    return body


class OTLPReceiver:
    """OTLP/HTTP trace receiver on 127.0.0.1 (port 0 = any free port), in a daemon thread.

    `endpoint` is the URL to give the exporter. Spans are kept by request id (the `id_attribute` value);
    spans without it are kept in `other_spans`. Bodies that fail to decode are counted in `decode_errors`
    (the sender gets HTTP 400) — never raised into the caller.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, id_attribute: str = REQUEST_ID_ATTRIBUTE) -> None:
        self.id_attribute = id_attribute
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._by_id: dict[str, SpanRecord] = {}
        self.other_spans: list[SpanRecord] = []
        self.decode_errors = 0
        self.posts = 0
        receiver = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.path.rstrip("/") != "/v1/traces":
                    self._reply(404, b"")
                    return
                try:
                    spans = decode_export_request(_decompress(body, self.headers.get("Content-Encoding", "")))
                except Exception:  # noqa: BLE001 - a bad body is the sender's problem, counted here
                    with receiver._lock:
                        receiver.decode_errors += 1
                    self._reply(400, b"")
                    return
                receiver.add(spans)
                from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
                    ExportTraceServiceResponse,
                )

                self._reply(200, ExportTraceServiceResponse().SerializeToString())

            def _reply(self, code: int, payload: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:  # silence per-request access logs
                return

        self._server = ThreadingHTTPServer((host, port), _Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/traces"

    def start(self) -> Self:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="otlp-receiver", daemon=True
            )
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving (safe to call twice); received spans stay readable."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._server.server_close()

    def add(self, spans: Iterable[SpanRecord]) -> None:
        with self._cond:
            self.posts += 1
            for sp in spans:
                rid = sp.attributes.get(self.id_attribute)
                if rid is None:
                    self.other_spans.append(sp)
                else:
                    self._by_id[str(rid)] = sp
            self._cond.notify_all()

    def spans(self) -> dict[str, SpanRecord]:
        """A snapshot: request id -> its span (the last one received for that id)."""
        with self._lock:
            return dict(self._by_id)

    def wait_for(self, predicate: Any, timeout_s: float) -> bool:
        """Block until `predicate(spans_by_id)` is true or `timeout_s` passes; returns whether it became true."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not predicate(self._by_id):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
