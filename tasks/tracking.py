"""MLflow tracking for a flow run: one parent run, a child run per step and per arm, and a local mirror.

Every artifact is first written under `results/<parent_run_id>/<child>/...` and then logged to MLflow
from there, so the directory and the MLflow run hold the same files. Run ids are passed explicitly
(MlflowClient), never taken from `mlflow.active_run()`, which is None inside Prefect's task threads.

Tracking URI: `MLFLOW_TRACKING_URI` if set, else SQLite `mlflow.db` in the working directory.
Secrets never reach MLflow or the mirror: params, tags and JSON go through `inferopt.config.redact`.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from mlflow.entities import Metric, Param, RunTag  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

from inferopt.config.redact import redacted, redacted_flat, scrub_text  # noqa: E402
from inferopt.interop.benchmark_report import write_trial_reports  # noqa: E402
from inferopt.records import records_to_frame, tokens_to_frame  # noqa: E402

DEFAULT_EXPERIMENT = "inferopt"
RESOLVED_TAG = "inferopt.resolved_sha256"  # content hash of candidate.resolved.json as the optimize flow logged it


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path.cwd() / 'mlflow.db'}"


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

    @property
    def client(self) -> MlflowClient:
        return MlflowClient(tracking_uri=self.uri)

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
    ) -> "Tracker":
        """Create the parent run; files go under `results_root` (default $INFEROPT_RESULTS or ./results)."""
        results_root = results_root or os.environ.get("INFEROPT_RESULTS", "results")
        uri = tracking_uri()
        client = MlflowClient(tracking_uri=uri)
        exp = client.get_experiment_by_name(experiment)
        exp_id = exp.experiment_id if exp else client.create_experiment(experiment)
        run = client.create_run(exp_id, run_name=run_name, tags={"inferopt.kind": "optimize", **(tags or {})})
        tracker = cls(parent_run_id=run.info.run_id, experiment_id=exp_id, results_root=Path(results_root), uri=uri)
        tracker.results_dir.mkdir(parents=True, exist_ok=True)
        return tracker

    # ------------------------------------------------------------------ runs
    def child(self, name: str, tags: dict[str, str] | None = None) -> str:
        """The child run for a step or arm (created once, then reused)."""
        if name not in self.children:
            run = self.client.create_run(
                self.experiment_id,
                run_name=name,
                tags={"mlflow.parentRunId": self.parent_run_id, "inferopt.child": name, **(tags or {})},
            )
            self.children[name] = run.info.run_id
        return self.children[name]

    def dir_for(self, name: str | None) -> Path:
        d = self.results_dir / name if name else self.results_dir
        d.mkdir(parents=True, exist_ok=True)
        return d

    def _run(self, name: str | None) -> str:
        return self.child(name) if name else self.parent_run_id

    def finish(self, name: str | None = None, status: str = "FINISHED") -> None:
        self.client.set_terminated(self._run(name), status=status)

    # ------------------------------------------------------------------ logging
    def params(self, values: dict[str, Any], name: str | None = None) -> None:
        flat = redacted_flat(flatten(values))
        params = [Param(k[:250], str(v)[:6000]) for k, v in flat.items()]
        for i in range(0, len(params), 90):
            self.client.log_batch(self._run(name), params=params[i : i + 90])

    def metrics(self, values: dict[str, float], name: str | None = None, step: int = 0) -> None:
        import time

        ts = int(time.time() * 1000)
        ms = [
            Metric(metric_key(k), float(v), ts, step)
            for k, v in values.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))
        ]
        for i in range(0, len(ms), 500):
            self.client.log_batch(self._run(name), metrics=ms[i : i + 500])

    def tags(self, values: dict[str, str], name: str | None = None) -> None:
        safe = redacted_flat(values)
        self.client.log_batch(self._run(name), tags=[RunTag(k, str(v)[:5000]) for k, v in safe.items()])

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
        self.client.log_artifact(self._run(name), str(path))
        if len(df) <= 5000:
            csv = path.with_suffix(".csv")
            df.to_csv(csv, index=False)
            self.client.log_artifact(self._run(name), str(csv))
        return path

    def json(self, data: Any, filename: str, name: str | None = None) -> Path:
        path = self.dir_for(name) / filename
        path.write_text(json.dumps(redacted(data), indent=2, default=str))
        self.client.log_artifact(self._run(name), str(path))
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
        self.client.log_artifact(self._run(name), str(dst))
        return dst

    def figure(self, fig: Any, filename: str, name: str | None = None) -> Path:
        path = self.dir_for(name) / filename
        fig.savefig(path, dpi=110, bbox_inches="tight")
        import matplotlib.pyplot as plt

        plt.close(fig)
        self.client.log_artifact(self._run(name), str(path))
        return path


def log_records(tracker: Tracker, records: list, name: str) -> None:
    """requests.parquet (a row per request) and tokens.parquet (a row per token) beside the streamed JSONL, and
    a Benchmark Report v0.2 per trial under `benchmark_report/` (`inferopt.interop.benchmark_report`)."""
    tracker.table(records_to_frame(records), "requests.parquet", name)
    tokens = tokens_to_frame(records)
    path = tracker.dir_for(name) / "tokens.parquet"
    tokens.to_parquet(path, index=False)
    tracker.client.log_artifact(tracker._run(name), str(path))
    jsonl = tracker.dir_for(name) / "requests.jsonl"
    if jsonl.exists():
        tracker.client.log_artifact(tracker._run(name), str(jsonl))
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
        tracker.client.log_artifacts(tracker._run(name), str(out), artifact_path="benchmark_report")


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
