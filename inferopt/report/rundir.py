"""Read one run's results directory (`results/<run_id>/`) into plain data for the HTML report.

Each step directory (`1-measure` … `6-gate`, and any other a later step adds) gives its tables
(parquet, else CSV), its figures (PNG bytes) and its JSON documents. Bulk per-request tables (requests,
tokens, phases, workload, per-document samples) are not loaded, only counted — except the measure step's
phases, which the report's CDFs per slice need. Arm directories (`arm-*`) are skipped: the ablate step's
effects and arm verdicts already hold every arm.

Deliberately not here: MLflow (the directory is the mirror of what was logged) and any rendering.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

BULK = ("requests", "tokens", "phases", "workload", "quality_samples_")
SKIP_DIRS = {"screenshots"}  # scripts/screenshot.py's output: pictures of the report, not part of it
MAX_LOADED_ROWS = 5000  # a non-bulk table longer than this is counted, not loaded


@dataclass
class StepData:
    """One step directory's contents. `bulk` maps a file name to its row count (None if unknown)."""

    name: str
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    figures: dict[str, bytes] = field(default_factory=dict)
    docs: dict[str, Any] = field(default_factory=dict)
    bulk: dict[str, int | None] = field(default_factory=dict)

    @property
    def key(self) -> str:
        """'1-measure' -> 'measure' (the step number is only the order)."""
        head, sep, tail = self.name.partition("-")
        return tail if sep and head.isdigit() else self.name


@dataclass
class RunData:
    """Everything the report shows about one flow run."""

    run_id: str
    verdict: dict[str, Any] | None = None
    lint: dict[str, Any] | None = None
    candidate: dict[str, Any] | None = None
    steps: dict[str, StepData] = field(default_factory=dict)  # by step key ('measure', ...), in directory order
    phases: pd.DataFrame | None = None  # the measure step's per-request phases
    docs: dict[str, Any] = field(default_factory=dict)  # other top-level JSON documents
    arms: list[str] = field(default_factory=list)  # arm directory names
    top: StepData | None = None  # the run directory's own files (a tune run's points table and frontier)

    def step(self, key: str) -> StepData | None:
        return self.steps.get(key)


def _rows(path: Path) -> int | None:
    try:
        if path.suffix == ".parquet":
            import pyarrow.parquet as pq

            return int(pq.ParquetFile(path).metadata.num_rows)
        if path.suffix == ".jsonl":
            with path.open("rb") as fh:
                return sum(1 for _ in fh)
    except Exception:  # noqa: BLE001 - a count is a courtesy
        return None
    return None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return {"unreadable": f"{path.name}: {type(exc).__name__}: {exc}"}


def _is_bulk(stem: str) -> bool:
    return any(stem == b or (b.endswith("_") and stem.startswith(b)) for b in BULK)


def load_step(d: Path) -> StepData:
    step = StepData(name=d.name)
    files = sorted(p for p in d.iterdir() if p.is_file())
    stems_with_parquet = {p.stem for p in files if p.suffix == ".parquet"}
    for p in files:
        if p.suffix == ".png":
            step.figures[p.name] = p.read_bytes()
        elif p.suffix == ".json":
            step.docs[p.stem] = _read_json(p)
        elif p.suffix in (".parquet", ".csv") and not (p.suffix == ".csv" and p.stem in stems_with_parquet):
            if _is_bulk(p.stem):
                step.bulk[p.name] = _rows(p)
                continue
            n = _rows(p) if p.suffix == ".parquet" else None
            if n is not None and n > MAX_LOADED_ROWS:
                step.bulk[p.name] = n
                continue
            try:
                step.tables[p.stem] = pd.read_parquet(p) if p.suffix == ".parquet" else pd.read_csv(p)
            except Exception as exc:  # noqa: BLE001 - an unreadable table is shown as such
                step.docs[p.stem] = {"unreadable": f"{p.name}: {type(exc).__name__}: {exc}"}
        elif p.suffix == ".jsonl":
            step.bulk[p.name] = _rows(p)
    return step


def load_run_dir(path: str | Path) -> RunData:
    """Read `results/<run_id>/`; missing parts stay None/empty (the report says they are missing)."""
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: not a results directory (expected results/<mlflow_run_id>/)")
    run = RunData(run_id=root.name)
    for p in sorted(root.iterdir()):
        if p.is_dir():
            if p.name in SKIP_DIRS:
                continue
            if p.name.startswith(("arm-", "arm:")):
                run.arms.append(p.name.split("-", 1)[-1].split(":", 1)[-1])
                continue
            step = load_step(p)
            run.steps[step.key] = step
        elif p.suffix == ".json":
            doc = _read_json(p)
            if p.name == "verdict.json":
                run.verdict = doc
            elif p.name == "lint.json":
                run.lint = doc
            elif p.name == "candidate.resolved.json":
                run.candidate = doc
            else:
                run.docs[p.stem] = doc
    run.top = load_step(root)
    phases = root / "1-measure" / "phases.parquet"
    if phases.exists():
        try:
            run.phases = pd.read_parquet(phases)
        except Exception:  # noqa: BLE001 - the CDFs then say the phases are missing
            run.phases = None
    return run
