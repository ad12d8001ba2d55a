"""A session's conversation history in a real SQLite store: read before each turn, written after it.

One row per message (`session_id`, `turn`, `role` = user | assistant | tool, its token ids as JSON). `load`
returns the session's token ids in order and the time the read took on the runner's clock — that read is the
turn's client-side context preparation (C_context). SQLite runs in the runner's thread: a read blocks the event
loop for its duration, as a synchronous store client would; the time is measured, not assumed.

Deliberately not here: what a turn's prompt is (`agentic.py`) and other stores (only SQLite is offered).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from inferopt.records import now_s

_SCHEMA = """CREATE TABLE IF NOT EXISTS messages (
    session_id TEXT NOT NULL, turn INTEGER NOT NULL, seq INTEGER NOT NULL, role TEXT NOT NULL,
    token_ids TEXT NOT NULL, PRIMARY KEY (session_id, turn, seq))"""


class SQLiteHistory:
    """The store at `path` (created if missing; an existing run's file is refused: histories must start empty)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if self.path.exists():
            raise FileExistsError(
                f"history store {self.path} already exists; fix: give a new file (every run starts empty)"
            )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(_SCHEMA)

    def load(self, session_id: str) -> tuple[list[int], float]:
        """(the session's token ids so far, in order; seconds the read took)."""
        t0 = now_s()
        rows = self._db.execute(
            "SELECT token_ids FROM messages WHERE session_id = ? ORDER BY turn, seq", (session_id,)
        ).fetchall()
        ids = [t for (text,) in rows for t in json.loads(text)]
        return ids, now_s() - t0

    def append(self, session_id: str, turn: int, messages: list[tuple[str, list[int]]]) -> None:
        """Write one turn's messages ((role, token ids), in order) in one transaction."""
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT INTO messages VALUES (?, ?, ?, ?, ?)",
                [(session_id, turn, i, role, json.dumps(ids)) for i, (role, ids) in enumerate(messages)],
            )

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> SQLiteHistory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
