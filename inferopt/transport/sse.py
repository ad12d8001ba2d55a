"""An incremental Server-Sent Events parser: bytes in (as they come off the socket), events out.

Follows the WHATWG event-stream rules that OpenAI-compatible servers rely on: lines end in LF, CRLF or CR;
a blank line dispatches the event; `data:` lines accumulate (joined by LF); `event:` and `id:` set the
event's type and id; lines starting with `:` are comments (keep-alives); one optional space after the
colon is dropped; an event with empty data is not dispatched. A line, or a UTF-8 character, split across
network chunks is reassembled. `[DONE]` (OpenAI's end-of-stream sentinel) is an ordinary event whose
`data` is `DONE`; `SSEEvent.is_done` tells it.

Deliberately not here: JSON decoding and what an event means (the engine decides) and any I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

DONE = "[DONE]"


@dataclass(frozen=True, slots=True)
class SSEEvent:
    data: str
    event: str = "message"
    id: str | None = None

    @property
    def is_done(self) -> bool:
        return self.data == DONE


class SSEParser:
    """Feed it raw bytes with `feed`; it returns the events completed by them (possibly none)."""

    __slots__ = ("_data", "_event", "_id", "_pending_cr", "_tail")

    def __init__(self) -> None:
        self._tail = b""  # an unterminated line carried over to the next chunk
        self._data: list[str] = []
        self._event: str | None = None
        self._id: str | None = None
        self._pending_cr = False  # the last chunk ended in CR: a LF opening the next one belongs to it

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if self._pending_cr:
            self._pending_cr = False
            if chunk.startswith(b"\n"):
                chunk = chunk[1:]
        buf = self._tail + chunk if self._tail else chunk
        if b"\r" in buf:
            if buf.endswith(b"\r"):
                self._pending_cr = True
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        self._tail = lines.pop()
        events: list[SSEEvent] = []
        for line in lines:
            if not line:
                data = "\n".join(self._data)
                if data:  # an event whose data is empty is not dispatched (spec)
                    events.append(SSEEvent(data, self._event or "message", self._id))
                self._data = []
                self._event = None
                continue
            if line[0] == 58:  # b":" -> a comment
                continue
            name, sep, value = line.partition(b":")
            if sep and value[:1] == b" ":
                value = value[1:]
            if name == b"data":
                self._data.append(value.decode("utf-8", errors="replace"))
            elif name == b"event":
                self._event = value.decode("utf-8", errors="replace")
            elif name == b"id" and b"\0" not in value:
                self._id = value.decode("utf-8", errors="replace")
            # `retry:` and unknown fields are ignored, as the spec says
        return events

    @property
    def pending(self) -> bool:
        """True when a started event (data lines, or a partial line) has not been dispatched: at the end
        of the stream this means the server stopped mid-event."""
        return bool(self._data or self._tail.strip())
