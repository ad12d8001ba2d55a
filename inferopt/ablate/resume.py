"""Resuming a killed ablation from its finished trials: each trial is saved the moment it ends, as plain files
(`dispatch.save_run`) under `<step dir>/trials/<arm>/trial-<repeat>/`, written to a temporary folder and renamed
into place, so a trial folder is either whole or absent. A resumed ablation loads the trials the killed attempt
finished and runs only the rest; the partial records of the trial it was killed in are kept with that attempt
(`archive_attempt`), never mixed into the new one.

Deliberately not here: finding the run to resume and its MLflow bookkeeping (flows/optimize.py, tasks/tracking.py).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from inferopt.ablate.dispatch import load_run, save_run
from inferopt.measure.session import MeasuredRun
from inferopt.records import RecordSink, RequestRecord

TRIALS = "trials"
ATTEMPT = "attempt-"


def trial_path(root: str | Path, arm: str, repeat: int) -> Path:
    return Path(root) / arm / f"trial-{repeat}"


def save_trial(root: str | Path, arm: str, repeat: int, run: MeasuredRun) -> Path:
    """Save one finished trial under `root` atomically (temp folder + rename); returns its folder."""
    final = trial_path(root, arm, repeat)
    tmp = final.with_name(final.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    save_run(run, tmp)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return final


def load_trial(root: str | Path | None, arm: str, repeat: int) -> MeasuredRun | None:
    """The trial a killed attempt finished, or None (never saved, or cut off mid-save)."""
    if root is None:
        return None
    d = trial_path(root, arm, repeat)
    return load_run(d) if (d / "run.json").exists() else None


def append_records(path: str | Path, records: list[RequestRecord]) -> None:
    """Append a loaded trial's records to the step's stream (fsynced), as if it had run in this attempt."""
    with RecordSink(path) as sink:
        for r in records:
            sink.write(r)


def archive_attempt(results_dir: str | Path, keep: tuple[str, ...] = ()) -> Path | None:
    """Move what a killed attempt wrote under `results_dir` (every entry but earlier attempts and `keep`) into
    `results_dir/attempt-<k>/`; returns that folder, or None when there was nothing to move."""
    d = Path(results_dir)
    entries = [p for p in d.iterdir() if not p.name.startswith(ATTEMPT) and p.name not in keep] if d.exists() else []
    if not entries:
        return None
    k = 1 + sum(1 for p in d.iterdir() if p.name.startswith(ATTEMPT))
    dest = d / f"{ATTEMPT}{k}"
    dest.mkdir()
    for p in entries:
        os.replace(p, dest / p.name)
    return dest
