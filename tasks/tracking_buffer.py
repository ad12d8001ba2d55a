"""Tracking calls that survive an MLflow outage: retried with backoff, then buffered on disk, replayed when it is back.

Every write the Tracker makes (a batch of params/metrics/tags, an artifact from the local mirror, a run's end, a
child run's creation) is one JSON-able op. `Outbox.send(op)` runs it with retries (`Backoff`); when MLflow stays
unreachable the op is appended to `results/<run>/tracking.pending.jsonl` (flushed and fsynced: the artifacts
themselves are already in the mirror) and every later op queues behind it, in order. Each later call first tries
to replay the queue (at most every `resync_s`); `sync()` replays it all (the flow's end, or
`python -m tasks.tracking_buffer results/<run>` after the run). A child created while down gets a placeholder
id `pending:<name>`, mapped to the real id on replay (`tracking.ids.json`).

Only outages are buffered (connection errors, timeouts, 5xx, a locked database); a refused call (an invalid
parameter) raises at once. Deliberately not here: what is logged (tasks/tracking.py).
"""

from __future__ import annotations

import errno
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException

PENDING = "tracking.pending.jsonl"
IDS = "tracking.ids.json"
PLACEHOLDER = "pending:"
_TRANSIENT_CODES = frozenset({"INTERNAL_ERROR", "TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED", "ABORTED"})
_NET_ERRNOS = frozenset({errno.ECONNREFUSED, errno.ECONNRESET, errno.ETIMEDOUT, errno.EHOSTUNREACH, errno.ENETUNREACH})
_TRANSIENT_TEXT = ("max retries exceeded", "connection refused", "database is locked", "timed out", "unavailable")


def is_outage(exc: BaseException) -> bool:
    """The tracking server could not be reached or could not answer now (worth retrying), not a refused call."""
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    if type(exc).__module__.startswith(("requests", "urllib3")) or type(exc).__name__ == "OperationalError":
        return True  # HTTP client errors; SQLAlchemy's OperationalError (a locked or vanished database)
    if isinstance(exc, OSError):
        return exc.errno in _NET_ERRNOS
    if isinstance(exc, MlflowException):
        text = str(exc).lower()
        return exc.error_code in _TRANSIENT_CODES or any(t in text for t in _TRANSIENT_TEXT)
    return False


@dataclass(frozen=True)
class Backoff:
    """Retries of one call: `attempts` tries, sleeping `first_s`, then doubling up to `max_s`, between them."""

    attempts: int = 4
    first_s: float = 0.5
    max_s: float = 4.0
    resync_s: float = 2.0  # least time between two replays of the queue while MLflow is down

    @classmethod
    def from_env(cls) -> "Backoff":
        return cls(attempts=max(1, int(os.environ.get("INFEROPT_TRACKING_ATTEMPTS", "4"))))

    def delays_s(self) -> list[float]:
        return [min(self.max_s, self.first_s * 2**i) for i in range(self.attempts - 1)]


def encode(op: str, run: str, **kw: Any) -> dict[str, Any]:
    """One op as plain JSON (Metric/Param/RunTag entities become lists)."""
    out: dict[str, Any] = {"op": op, "run": run}
    for key, value in kw.items():
        if key == "metrics":
            value = [[m.key, m.value, m.timestamp, m.step] for m in value]
        elif key in ("params", "tags") and value and not isinstance(value, dict):
            value = [[e.key, e.value] for e in value]
        out[key] = value
    return out


def apply(client: Any, op: dict[str, Any], run_id: str) -> str | None:
    """Run `op` against `client` on `run_id`; a create_run returns the new run's id."""
    kind = op["op"]
    if kind == "log_batch":
        client.log_batch(
            run_id,
            metrics=[Metric(*m) for m in op.get("metrics") or []],
            params=[Param(*p) for p in op.get("params") or []],
            tags=[RunTag(*t) for t in op.get("tags") or []],
        )
    elif kind == "log_artifact":
        client.log_artifact(run_id, op["path"], op.get("artifact_path"))
    elif kind == "log_artifacts":
        client.log_artifacts(run_id, op["path"], artifact_path=op.get("artifact_path"))
    elif kind == "set_terminated":
        client.set_terminated(run_id, status=op["status"])
    elif kind == "create_run":
        return client.create_run(op["experiment_id"], run_name=op["run_name"], tags=op["tags"]).info.run_id
    else:
        raise ValueError(f"unknown tracking op {kind!r}")
    return None


class Outbox:
    """The ops of one flow run on their way to MLflow; the queue of those not yet delivered lives in `directory`."""

    def __init__(
        self,
        client: Callable[[], Any],
        directory: Path,
        backoff: Backoff | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client, self.directory = client, Path(directory)
        self.backoff = backoff or Backoff.from_env()
        self.sleep = sleep
        self._last_try_s = 0.0

    @property
    def pending_path(self) -> Path:
        return self.directory / PENDING

    def pending(self) -> list[dict[str, Any]]:
        if not self.pending_path.exists():
            return []
        lines = self.pending_path.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def ids(self) -> dict[str, str]:
        path = self.directory / IDS
        return json.loads(path.read_text()) if path.exists() else {}

    def resolve(self, run: str) -> str | None:
        return self.ids().get(run) if run.startswith(PLACEHOLDER) else run

    def send(self, op: dict[str, Any]) -> str | None:
        """Deliver `op` (retried), or queue it when MLflow stays down; a create_run returns the run id (a
        placeholder when queued). A refused call raises."""
        if self.pending_path.exists() and not self.sync(force=False):
            return self._queue(op)
        run_id = self.resolve(op["run"]) if op["run"] else ""
        for delay in [*self.backoff.delays_s(), None]:
            try:
                return apply(self.client(), op, run_id or "")
            except Exception as exc:  # noqa: BLE001 - classified: an outage is queued, anything else raises
                if not is_outage(exc):
                    raise
                if delay is None:
                    print(f"[tracking] MLflow unreachable ({type(exc).__name__}); buffering to {PENDING}", flush=True)
                    return self._queue(op)
                self.sleep(delay)
        return None  # unreachable: the loop returns or queues

    def _queue(self, op: dict[str, Any]) -> str | None:
        ref = None
        if op["op"] == "create_run":
            ref = op["ref"] = f"{PLACEHOLDER}{op['run_name']}:{len(self.pending())}"
        self.directory.mkdir(parents=True, exist_ok=True)
        with self.pending_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(op, default=str) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        return ref

    def sync(self, force: bool = True) -> bool:
        """Replay the queue in order; True when nothing is left. Stops at the first op that still fails (an
        outage; a refused op raises). Not forced: tried at most every `backoff.resync_s`."""
        ops = self.pending()
        if not ops:
            return True
        if not force and time.monotonic() - self._last_try_s < self.backoff.resync_s:
            return False
        self._last_try_s = time.monotonic()
        ids = self.ids()
        for done, op in enumerate(ops):
            try:
                new = apply(self.client(), op, ids.get(op["run"], op["run"]))
            except Exception as exc:  # noqa: BLE001 - an outage keeps the rest queued
                if not is_outage(exc):
                    raise
                self._rewrite(ops[done:], ids)
                return False
            if new is not None:
                ids[op["ref"]] = new
        self._rewrite([], ids)
        print(f"[tracking] MLflow is back: {len(ops)} buffered calls replayed", flush=True)
        return True

    def _rewrite(self, ops: list[dict[str, Any]], ids: dict[str, str]) -> None:
        (self.directory / IDS).write_text(json.dumps(ids))
        if not ops:
            self.pending_path.unlink(missing_ok=True)
            return
        tmp = self.pending_path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(o, default=str) + "\n" for o in ops), encoding="utf-8")
        os.replace(tmp, self.pending_path)


def main(argv: list[str] | None = None) -> int:
    """`python -m tasks.tracking_buffer results/<run>`: replay what a run buffered while MLflow was down."""
    from mlflow.tracking import MlflowClient  # lazy: only the replay command needs a client of its own

    args = argv if argv is not None else sys.argv[1:]
    if len(args) != 1:
        print("usage: python -m tasks.tracking_buffer results/<run id>", file=sys.stderr)
        return 2
    uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlflow.db'}"
    box = Outbox(lambda: MlflowClient(tracking_uri=uri), Path(args[0]))
    left = 0 if box.sync() else len(box.pending())
    print(json.dumps({"replayed": not left, "pending": left}))
    return 0 if not left else 1


if __name__ == "__main__":
    sys.exit(main())
