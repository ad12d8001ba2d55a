"""MLflow tracking for a flow run: one parent run, a child run per step and per arm, and a local mirror.

Every artifact is first written under `results/<parent_run_id>/<child>/...` and then logged to MLflow
from there, so the directory and the MLflow run hold the same files. Run ids are passed explicitly
(MlflowClient), never taken from `mlflow.active_run()`, which is None inside Prefect's task threads.

Tracking URI: `MLFLOW_TRACKING_URI` if set, else SQLite `mlflow.db` in the working directory.
Secrets never reach MLflow or the mirror: params, tags and JSON go through `inferopt.config.redact`.
Every write goes through `tasks.tracking_buffer.Outbox`: retried with backoff, buffered under the run's results
directory while MLflow is down and replayed when it is back, so an outage never aborts a long ablation.
`Tracker.start` also marks this host's RUNNING runs whose process is gone KILLED (`mark_stale_runs`).
"""

from __future__ import annotations

import json
import math
import os
import re
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import psutil

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# MLflow's own HTTP retries take ~4 min per call by default; ours (Backoff) retry, then buffer to disk
os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")

from mlflow.entities import Metric, Param, RunTag  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

from inferopt.config.redact import redacted, redacted_flat, scrub_text  # noqa: E402
from inferopt.interop.benchmark_report import write_trial_reports  # noqa: E402
from inferopt.records import records_to_frame, tokens_to_frame  # noqa: E402
from tasks.tracking_buffer import Backoff, Outbox, encode, is_outage  # noqa: E402

DEFAULT_EXPERIMENT = "inferopt"
RESOLVED_TAG = "inferopt.resolved_sha256"  # content hash of candidate.resolved.json as the optimize flow logged it


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlflow.db'}"


class TrackingUnavailable(RuntimeError):
    """MLflow could not be reached when the run was to start (nothing has run yet)."""


def _started() -> str:
    """This process's start time (epoch s), which tells it apart from a later process with the same pid."""
    return f"{psutil.Process().create_time():.2f}"


def _alive(pid: int, started: str) -> bool:
    try:
        proc = psutil.Process(pid)
        return not started or abs(proc.create_time() - float(started)) < 1.0
    except (psutil.NoSuchProcess, ValueError):
        return False


def mark_stale_runs(client: Any, experiment_id: str, host: str | None = None) -> list[str]:
    """Runs of this host left RUNNING by a process that is gone (killed: SIGKILL, OOM, power): each, and its
    RUNNING children, marked KILLED with the reason in `inferopt.killed_reason`. Runs of another host, or
    without the owner tags (`inferopt.host`, `inferopt.pid`), are left alone: their owner cannot be checked."""
    host = host or socket.gethostname()
    found = client.search_runs(
        [experiment_id], filter_string=f"attributes.status = 'RUNNING' and tags.`inferopt.host` = '{host}'"
    )
    stale = []
    for run in found:
        tags = run.data.tags
        pid = int(tags.get("inferopt.pid", "0") or 0)
        if not pid or _alive(pid, tags.get("inferopt.pid_start", "")):
            continue
        reason = (
            f"process {pid} on {host} ended without closing the run (killed); marked at the start of a run by "
            f"process {os.getpid()} at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}"
        )
        kids = client.search_runs(
            [experiment_id],
            filter_string=f"attributes.status = 'RUNNING' and tags.mlflow.parentRunId = '{run.info.run_id}'",
        )
        for r in [*kids, run]:
            client.set_tag(r.info.run_id, "inferopt.killed_reason", reason)
            client.set_terminated(r.info.run_id, status="KILLED")
            stale.append(r.info.run_id)
        print(f"[tracking] run {run.info.run_id} was left RUNNING by a killed process: marked KILLED", flush=True)
    return stale


def resumable(client: Any, run_id: str, resolved_sha256: str) -> str | None:
    """Why `run_id` cannot be resumed with a candidate whose resolved dump hashes to `resolved_sha256`, or None.
    A RUNNING run whose process is gone is marked KILLED first (`mark_stale_runs`)."""
    try:
        run = client.get_run(run_id)
    except Exception as exc:  # noqa: BLE001 - a wrong id reads as one message
        return f"--resume {run_id}: no such run ({type(exc).__name__}); fix: the MLflow run id the killed run printed"
    if run.data.tags.get("inferopt.kind") != "optimize":
        return f"--resume {run_id}: not an optimize run (kind {run.data.tags.get('inferopt.kind')!r})"
    if run.info.status == "RUNNING":
        mark_stale_runs(client, run.info.experiment_id)
        run = client.get_run(run_id)
    if run.info.status == "RUNNING":
        return (
            f"--resume {run_id}: still running (process {run.data.tags.get('inferopt.pid')} on "
            f"{run.data.tags.get('inferopt.host')}); fix: wait for it, or stop it first"
        )
    if run.info.status == "FINISHED":
        verdict = run.data.tags.get("inferopt.verdict")
        return f"--resume {run_id}: it finished; nothing to resume (its verdict is {verdict!r})"
    logged = run.data.tags.get(RESOLVED_TAG)
    if logged != resolved_sha256:
        return (
            f"--resume {run_id}: the candidate resolves to another configuration than the run's (sha256 "
            f"{resolved_sha256[:12]}… vs {str(logged)[:12]}…); fix: resume with the killed run's candidate file "
            "and --set values"
        )
    return None


def _before_anything_runs(create: Callable[[], Any], uri: str, backoff: Backoff) -> Any:
    """`create()` retried while MLflow is unreachable; then a loud TrackingUnavailable (nothing has run)."""
    for delay in [*backoff.delays_s(), None]:
        try:
            return create()
        except Exception as exc:  # noqa: BLE001 - classified: an outage is retried, anything else raises
            if not is_outage(exc):
                raise
            if delay is None:
                raise TrackingUnavailable(
                    f"MLflow at {uri} is unreachable ({type(exc).__name__}: {str(exc)[:200]}); nothing has run; "
                    "fix: start the tracking server, or set MLFLOW_TRACKING_URI to one that is up"
                ) from exc
            time.sleep(delay)
    raise AssertionError("unreachable")


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dict -> dotted keys (for MLflow params)."""
    out: dict[str, Any] = {}
    if isinstance(data, dict):
        for k, v in data.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(data, (list, tuple)) and data and isinstance(data[0], dict):
        for i, v in enumerate(data):
            out.update(flatten(v, f"{prefix}{i}."))
    else:
        out[prefix.rstrip(".")] = data
    return out


def metric_key(name: str) -> str:
    """A metric name MLflow accepts (alphanumerics, _ - . space : /): `=` becomes `:` (slice labels like
    `tenant=a` read `tenant:a`), anything else `_`; at most 250 characters."""
    return re.sub(r"[^\w\-. :/]", "_", name.replace("=", ":"))[:250]


@dataclass
class Tracker:
    """Handles to the parent run; children are created on demand. Safe to pass between Prefect tasks."""

    parent_run_id: str
    experiment_id: str
    results_root: Path
    uri: str
    children: dict[str, str] = field(default_factory=dict)
    backoff: Backoff = field(default_factory=Backoff.from_env)
    client_factory: Callable[..., Any] = MlflowClient  # tests pass a client that fails like a server that is down

    @property
    def client(self) -> MlflowClient:
        return self.client_factory(tracking_uri=self.uri)

    @property
    def outbox(self) -> Outbox:
        return Outbox(lambda: self.client, self.results_dir, self.backoff)

    @property
    def results_dir(self) -> Path:
        return self.results_root / self.parent_run_id

    @classmethod
    def start(
        cls,
        run_name: str,
        experiment: str = DEFAULT_EXPERIMENT,
        tags: dict[str, str] | None = None,
        results_root: str | Path | None = None,
        client_factory: Callable[..., Any] = MlflowClient,
        backoff: Backoff | None = None,
    ) -> "Tracker":
        """Create the parent run; files go under `results_root` (default $INFEROPT_RESULTS or ./results)."""
        results_root = results_root or os.environ.get("INFEROPT_RESULTS", "results")
        uri = tracking_uri()
        client = client_factory(tracking_uri=uri)
        owner = {
            "inferopt.host": socket.gethostname(),
            "inferopt.pid": str(os.getpid()),
            "inferopt.pid_start": _started(),
        }

        def create() -> tuple[str, str]:
            exp = client.get_experiment_by_name(experiment)
            exp_id = exp.experiment_id if exp else client.create_experiment(experiment)
            mark_stale_runs(client, exp_id)
            tags_ = {"inferopt.kind": "optimize", **owner, **(tags or {})}
            return client.create_run(exp_id, run_name=run_name, tags=tags_).info.run_id, exp_id

        run_id, exp_id = _before_anything_runs(create, uri, backoff or Backoff.from_env())
        tracker = cls(
            parent_run_id=run_id,
            experiment_id=exp_id,
            results_root=Path(results_root),
            uri=uri,
            client_factory=client_factory,
            **({"backoff": backoff} if backoff else {}),
        )
        tracker.results_dir.mkdir(parents=True, exist_ok=True)
        return tracker

    @classmethod
    def resume(
        cls,
        run_id: str,
        results_root: str | Path | None = None,
        client_factory: Callable[..., Any] = MlflowClient,
        backoff: Backoff | None = None,
    ) -> "Tracker":
        """Reopen the parent run `run_id` of a killed or failed flow (`resumable` checked it): RUNNING again,
        owned by this process, `inferopt.resumed` counting the resumptions; new children are created."""
        uri = tracking_uri()
        client = client_factory(tracking_uri=uri)
        run = client.get_run(run_id)
        client.update_run(run_id, status="RUNNING")
        n = int(run.data.tags.get("inferopt.resumed", "0") or 0) + 1
        owner = {
            "inferopt.host": socket.gethostname(),
            "inferopt.pid": str(os.getpid()),
            "inferopt.pid_start": _started(),
        }
        client.log_batch(run_id, tags=[RunTag(k, v) for k, v in {**owner, "inferopt.resumed": str(n)}.items()])
        root = Path(results_root or os.environ.get("INFEROPT_RESULTS", "results"))
        tracker = cls(
            parent_run_id=run_id,
            experiment_id=run.info.experiment_id,
            results_root=root,
            uri=uri,
            client_factory=client_factory,
            **({"backoff": backoff} if backoff else {}),
        )
        tracker.results_dir.mkdir(parents=True, exist_ok=True)
        return tracker

    # ------------------------------------------------------------------ runs
    def child(self, name: str, tags: dict[str, str] | None = None) -> str:
        """The child run for a step or arm (created once, then reused)."""
        if name not in self.children:
            child_tags = {"mlflow.parentRunId": self.parent_run_id, "inferopt.child": name, **(tags or {})}
            op = encode("create_run", "", experiment_id=self.experiment_id, run_name=name, tags=child_tags)
            self.children[name] = str(self.outbox.send(op))  # a placeholder while MLflow is down
        return self.children[name]

    def dir_for(self, name: str | None) -> Path:
        d = self.results_dir / name if name else self.results_dir
        d.mkdir(parents=True, exist_ok=True)
        return d

    def _run(self, name: str | None) -> str:
        return self.child(name) if name else self.parent_run_id

    def finish(self, name: str | None = None, status: str = "FINISHED") -> None:
        """End a child (or, without `name`, the parent run: then whatever is still buffered is replayed, and
        what cannot be is said loudly, with the command that replays it later)."""
        self.outbox.send(encode("set_terminated", self._run(name), status=status))
        if name is None and not self.outbox.sync():
            print(
                f"[tracking] MLflow still unreachable: {len(self.outbox.pending())} calls buffered in "
                f"{self.outbox.pending_path}; nothing is lost — replay them with "
                f"`python -m tasks.tracking_buffer {self.results_dir}`",
                file=sys.stderr,
                flush=True,
            )

    def fail(self, tags: dict[str, str]) -> None:
        """In a flow's error handler: tag and end the run FAILED, each on its own; a failure here is printed
        with the error being handled, never raised over it (the caller re-raises the original)."""
        handling = sys.exc_info()[1]
        for what, call in (("tag", lambda: self.tags(tags)), ("end", lambda: self.finish(status="FAILED"))):
            try:
                call()
            except Exception as err:  # noqa: BLE001 - the original error is the one the user must see
                print(
                    f"[tracking] could not {what} run {self.parent_run_id} as failed ({type(err).__name__}: {err}) "
                    f"while handling {type(handling).__name__}: {handling}",
                    file=sys.stderr,
                    flush=True,
                )

    def artifact(self, path: str | Path, name: str | None = None, artifact_path: str | None = None) -> None:
        """Log a file of the mirror (retried; buffered while MLflow is down)."""
        self.outbox.send(encode("log_artifact", self._run(name), path=str(path), artifact_path=artifact_path))

    def artifacts(self, directory: str | Path, name: str | None = None, artifact_path: str | None = None) -> None:
        """Log a directory of the mirror (retried; buffered while MLflow is down)."""
        self.outbox.send(encode("log_artifacts", self._run(name), path=str(directory), artifact_path=artifact_path))

    # ------------------------------------------------------------------ logging
    def params(self, values: dict[str, Any], name: str | None = None) -> None:
        flat = redacted_flat(flatten(values))
        params = [Param(k[:250], str(v)[:6000]) for k, v in flat.items()]
        for i in range(0, len(params), 90):
            self.outbox.send(encode("log_batch", self._run(name), params=params[i : i + 90]))

    def metrics(self, values: dict[str, float], name: str | None = None, step: int = 0) -> None:
        ts = int(time.time() * 1000)
        ms = [
            Metric(metric_key(k), float(v), ts, step)
            for k, v in values.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))
        ]
        for i in range(0, len(ms), 500):
            self.outbox.send(encode("log_batch", self._run(name), metrics=ms[i : i + 500]))

    def tags(self, values: dict[str, str], name: str | None = None) -> None:
        safe = redacted_flat(values)
        self.outbox.send(encode("log_batch", self._run(name), tags=[RunTag(k, str(v)[:5000]) for k, v in safe.items()]))

    def table(self, df: pd.DataFrame, filename: str, name: str | None = None) -> Path:
        """Write a table (parquet, plus CSV for small ones so the MLflow UI can preview it) and log it."""
        d = self.dir_for(name)
        path = d / filename
        df = df.copy()
        for col in df.columns:
            if df[col].dtype == object:
                df[col] = df[col].map(
                    lambda v: v if v is None or isinstance(v, (str, int, float, bool)) else json.dumps(v, default=str)
                )
        df.to_parquet(path, index=False)
        self.artifact(path, name)
        if len(df) <= 5000:
            csv = path.with_suffix(".csv")
            df.to_csv(csv, index=False)
            self.artifact(csv, name)
        return path

    def json(self, data: Any, filename: str, name: str | None = None) -> Path:
        path = self.dir_for(name) / filename
        path.write_text(json.dumps(redacted(data), indent=2, default=str))
        self.artifact(path, name)
        return path

    def file(
        self, path: str | Path, name: str | None = None, copy: bool = True, secrets: set[str] | None = None
    ) -> Path:
        """Log an existing file; copy it into the mirror first unless it already lives there. With `secrets`
        (a text file such as a config), the copy has each of them replaced by ***."""
        import shutil

        src = Path(path)
        d = self.dir_for(name)
        dst = d / src.name
        if copy and src.resolve() != dst.resolve():
            if secrets:
                dst.write_text(scrub_text(src.read_text(encoding="utf-8"), secrets), encoding="utf-8")
            else:
                shutil.copy2(src, dst)
        self.artifact(dst, name)
        return dst

    def figure(self, fig: Any, filename: str, name: str | None = None) -> Path:
        path = self.dir_for(name) / filename
        fig.savefig(path, dpi=110, bbox_inches="tight")
        import matplotlib.pyplot as plt

        plt.close(fig)
        self.artifact(path, name)
        return path


def log_records(tracker: Tracker, records: list, name: str) -> None:
    """requests.parquet (a row per request) and tokens.parquet (a row per token) beside the streamed JSONL, and
    a Benchmark Report v0.2 per trial under `benchmark_report/` (`inferopt.interop.benchmark_report`)."""
    tracker.table(records_to_frame(records), "requests.parquet", name)
    tokens = tokens_to_frame(records)
    path = tracker.dir_for(name) / "tokens.parquet"
    tokens.to_parquet(path, index=False)
    tracker.artifact(path, name)
    jsonl = tracker.dir_for(name) / "requests.jsonl"
    if jsonl.exists():
        tracker.artifact(jsonl, name)
    log_benchmark_reports(tracker, records, name)


def log_benchmark_reports(tracker: Tracker, records: list, name: str) -> None:
    """The step's trials as Benchmark Reports; a failure is said and tagged, the step's own results stand."""
    out = tracker.dir_for(name) / "benchmark_report"
    try:
        paths = write_trial_reports(records, out, experiment=tracker.parent_run_id)
    except Exception as err:  # noqa: BLE001 - an export must not turn a measured step into an error
        print(f"[{name}] no Benchmark Report: {type(err).__name__}: {err}", flush=True)
        tracker.tags({"inferopt.benchmark_report": f"failed: {type(err).__name__}: {err}"}, name)
        return
    if paths:
        tracker.artifacts(out, name, artifact_path="benchmark_report")


def logged_arms(tracker: Tracker) -> list[str] | None:
    """The ablation arms logged as child runs of this flow run (tag `inferopt.arm`), read back from the tracking
    server: what was logged, not what the flow meant to log. None when the server cannot be read."""
    try:
        runs = tracker.client.search_runs(
            [tracker.experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{tracker.parent_run_id}'",
            max_results=1000,
        )
    except Exception:  # noqa: BLE001 - the lint then compares the plan with the returned result only
        return None
    return sorted(
        {
            r.data.tags["inferopt.arm"]
            for r in runs
            if r.data.tags.get("inferopt.step") == "ablate" and "inferopt.arm" in r.data.tags
        }
    )
