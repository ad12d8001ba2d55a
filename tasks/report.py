"""Prefect task for the run report: build `results/<run_id>/report.html` from the run's results directory
(`inferopt.report`) and log it to the MLflow parent run, whose description (`mlflow.note.content`) then holds
the verdict, its reasons and a link to the report, which ends with this run beside the previous finished run of
the same candidate (`inferopt.compare`; or the run named by `compare_with`). Also the flow's step progress.

Deliberately not here: the report's content (inferopt/report/html.py) and the steps themselves.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from prefect import task

from inferopt.compare.core import compare_runs
from inferopt.compare.render import html_section
from inferopt.compare.runs import load_side
from inferopt.report.html import ExtraSection, build_report
from inferopt.report.rundir import load_run_dir
from tasks.compare import run_dir
from tasks.tracking import Tracker

REPORT = "report.html"
NOTE = "mlflow.note.content"  # the MLflow UI shows this tag as the run's description (Markdown)
NOTE_MAX_CHARS = 4800  # Tracker.tags keeps 5000


def run_note(verdict: dict[str, Any] | None, report_href: str) -> str:
    """The parent run's description: the decision, a link to the report, every reason (indented lines nested),
    every warning; cut with a pointer to verdict.json when longer than a tag holds."""
    if not verdict:
        head = "**No verdict**: the flow stopped before the verdict step; the report shows the steps that ran."
        return f"{head}\n\n[Open the report]({report_href})\n"
    lines = [f"**VERDICT: {str(verdict.get('decision', '?')).upper()}** — [open the report]({report_href})", ""]
    for reason in verdict.get("reasons", []):
        depth = (len(reason) - len(reason.lstrip(" "))) // 2
        lines.append(f"{'  ' * depth}- {reason.strip()}")
    lines += [f"- WARNING: {w}" for w in verdict.get("warnings", [])]
    text, cut = "", "\n\n… (cut: every reason is in `verdict.json`)"
    for line in lines:
        if len(text) + len(line) + 1 > NOTE_MAX_CHARS - len(cut):
            return text + cut
        text += line + "\n"
    return text


def describe_run(tracker: Tracker) -> None:
    """Set the parent run's description from verdict.json in the results mirror (absent: the run failed)."""
    path = tracker.results_dir / "verdict.json"
    verdict = json.loads(path.read_text()) if path.exists() else None
    href = f"#/experiments/{tracker.experiment_id}/runs/{tracker.parent_run_id}/artifacts/{REPORT}"
    tracker.tags({NOTE: run_note(verdict, href)})


def previous_run_id(tracker: Tracker, candidate: str) -> str | None:
    """The newest other FINISHED optimize parent run of `candidate` in this experiment that reached a verdict."""
    runs = tracker.client.search_runs(
        [tracker.experiment_id],
        filter_string=f"tags.`inferopt.candidate` = '{candidate}' and tags.`inferopt.kind` = 'optimize' "
        "and attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"],
        max_results=50,
    )
    for run in runs:
        tags = run.data.tags
        if run.info.run_id == tracker.parent_run_id or tags.get("inferopt.kind") != "optimize":
            continue
        if tags.get("inferopt.verdict") not in (None, "", "error"):
            return run.info.run_id
    return None


def comparison_section(tracker: Tracker, compare_with: str | None) -> ExtraSection | None:
    """This run (B) beside `compare_with` (A), or beside the previous run of its candidate; a comparison that
    cannot be made says why in the section instead of failing the report. None when there is nothing to compare."""
    current = load_side(tracker.results_dir)
    ref = compare_with or previous_run_id(tracker, current.candidate)
    if ref is None:
        return None
    what = "the run asked for" if compare_with else "the previous run of this candidate"
    heading = f"Compared with {ref[:8]}"
    try:
        body = html_section(compare_runs(load_side(run_dir(ref)), current), level=3)
    except Exception as err:  # noqa: BLE001 - the report stands without the comparison; the reason is shown
        body = f'<p class="missing">no comparison with {ref}: {type(err).__name__}: {err}</p>'
    intro = f'<p class="meta">A = {ref} ({what}), B = this run. Also: <code>python -m inferopt.compare {ref} '
    return ExtraSection("compare", heading, intro + f"{tracker.parent_run_id}</code></p>" + body)


def write_report(tracker: Tracker, compare_with: str | None = None) -> Path:
    """Build the report from what the run wrote so far, write it into the results mirror, log it."""
    try:
        extra = comparison_section(tracker, compare_with)
    except Exception as err:  # noqa: BLE001 - a run that cannot be looked up must not cost the report
        print(f"[report] no comparison section: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
        extra = None
    html = build_report(load_run_dir(tracker.results_dir), extra=(extra,) if extra else ())
    path = tracker.results_dir / REPORT
    path.write_text(html, encoding="utf-8")
    tracker.file(path, copy=False)
    tracker.tags({"inferopt.report": REPORT})
    describe_run(tracker)
    return path


@task(name="report", task_run_name="html report")
def report_task(tracker: Tracker, compare_with: str | None = None) -> Path | None:
    """The report, or None when building it failed: said loudly and tagged, but the verdict stands."""
    t0 = time.monotonic()
    try:
        path = write_report(tracker, compare_with)
    except Exception as err:  # noqa: BLE001 - a broken report must not turn a decided run into an error
        print(f"[report] FAILED to build the report: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
        tracker.tags({"inferopt.report": f"failed: {type(err).__name__}: {err}"})
        return None
    print(f"[report] {path} ({path.stat().st_size / 1e6:.1f} MB, {time.monotonic() - t0:.1f} s)", flush=True)
    return path


def report_after_failure(tracker: Tracker) -> Path | None:
    """In a failing flow: a report of the steps that did run (no verdict). Never raises; skipped on
    KeyboardInterrupt/SystemExit so a killed run stops at once."""
    exc = sys.exc_info()[1]
    if exc is not None and not isinstance(exc, Exception):
        return None
    try:
        path = write_report(tracker)
        print(f"[report] partial report of the failed run: {path}", flush=True)
        return path
    except Exception as err:  # noqa: BLE001 - the original error is what matters
        print(f"[report] no report for the failed run: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
        return None


class Progress:
    """One line per step on stdout: which step starts, how long the previous one took, time since the start.

    progress = Progress(total=6)
    progress.step("measure")   # [optimize +0.0 s] step 1/6 measure
    ...
    progress.step("locate")    # [optimize +12.3 s] step 2/6 locate (measure took 12.3 s)
    progress.done()            # [optimize +95.0 s] done (gate took 20.1 s)
    """

    def __init__(self, total: int = 6, prefix: str = "optimize") -> None:
        self.total, self.prefix = total, prefix
        self.t0 = self.t_step = time.monotonic()
        self.n = 0
        self.current: str | None = None

    def _line(self, text: str) -> None:
        now = time.monotonic()
        took = f" ({self.current} took {now - self.t_step:.1f} s)" if self.current else ""
        print(f"[{self.prefix} +{now - self.t0:.1f} s] {text}{took}", flush=True)
        self.t_step = now

    def step(self, name: str) -> None:
        self.n += 1
        label = f"step {self.n}/{self.total} {name}" if self.n <= self.total else name
        self._line(label)
        self.current = name

    def done(self, text: str = "done") -> None:
        self._line(text)
        self.current = None
