"""MLflow side of `python -m inferopt.compare`: find a run's results directory (the local mirror, else its
artifacts downloaded from the tracking server, parent and children, into the same layout) and log a
comparison as a new MLflow run (tag `inferopt.kind=compare`, the compared run ids as tags and links in the
run's description, the tables, Markdown and HTML as artifacts).

Deliberately not here: the comparison itself (`inferopt.compare.core`, pure) and its rendering.
"""

from __future__ import annotations

import os
from pathlib import Path

from inferopt.compare.core import Comparison
from inferopt.compare.render import console, html_page, markdown
from tasks.tracking import DEFAULT_EXPERIMENT, Tracker, tracking_uri

NOTE = "mlflow.note.content"  # what the MLflow UI shows as the run's description


def results_root() -> Path:
    return Path(os.environ.get("INFEROPT_RESULTS", "results"))


def download_run(run_id: str, dest: Path, uri: str | None = None) -> Path:
    """The run's artifacts as a results directory: the parent's at the top, each child's under its name."""
    from mlflow.tracking import MlflowClient  # lazy: only when the run is not mirrored locally

    client = MlflowClient(tracking_uri=uri or tracking_uri())
    parent = client.get_run(run_id)
    dest.mkdir(parents=True, exist_ok=True)
    client.download_artifacts(run_id, "", str(dest))
    children = client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{run_id}'", max_results=1000
    )
    for child in children:
        client.download_artifacts(child.info.run_id, "", str(dest / child.info.run_name))
    return dest


def run_dir(ref: str, uri: str | None = None) -> Path:
    """A path to a results directory, or a run id: `results/<id>/` when mirrored, else downloaded there."""
    path = Path(ref)
    if path.is_dir():
        return path
    local = results_root() / ref
    if local.is_dir() and any(local.iterdir()):
        return local
    return download_run(ref, local, uri)


def _links(tracker: Tracker, cmps: list[Comparison]) -> str:
    ids = [cmps[0].a.run_id, *(c.b.run_id for c in cmps)]
    exp = tracker.experiment_id
    return "Compared runs: " + ", ".join(f"[{i[:8]}](#/experiments/{exp}/runs/{i})" for i in ids) + "\n\n"


def log_comparison(cmps: list[Comparison], experiment: str = DEFAULT_EXPERIMENT) -> Tracker:
    """One MLflow run holding every comparison against the first run (its files also under results/<id>/)."""
    ref = cmps[0].a
    names = [c.b.run_id[:8] for c in cmps]
    tracker = Tracker.start(
        run_name=f"compare {ref.run_id[:8]} vs {', '.join(names)}",
        experiment=experiment,
        tags={
            "inferopt.kind": "compare",
            "inferopt.compare.reference": ref.run_id,
            "inferopt.compare.runs": ",".join([ref.run_id, *(c.b.run_id for c in cmps)]),
            "inferopt.compare.pairing": ",".join(c.pairing for c in cmps),
        },
    )
    notes = []
    for cmp in cmps:
        suffix = "" if len(cmps) == 1 else f"-{cmp.b.run_id[:8]}"
        tracker.table(cmp.metrics, f"comparison{suffix}.parquet")
        tracker.table(cmp.slices, f"slices{suffix}.parquet")
        tracker.table(cmp.verdicts, f"verdicts{suffix}.parquet")
        md = markdown(cmp)
        for name, text in ((f"comparison{suffix}.md", md), (f"comparison{suffix}.html", html_page(cmp))):
            path = tracker.results_dir / name
            path.write_text(text, encoding="utf-8")
            tracker.file(path, copy=False)
        text = tracker.results_dir / f"comparison{suffix}.txt"  # what the CLI printed
        text.write_text(console(cmp) + "\n", encoding="utf-8")
        tracker.file(text, copy=False)
        notes.append(md.split("\n## Per slice", 1)[0] + f"\nPer slice: `comparison{suffix}.md`.\n")
    first = "comparison.html" if len(cmps) == 1 else f"comparison-{cmps[0].b.run_id[:8]}.html"
    tracker.tags({NOTE: (_links(tracker, cmps) + "\n\n".join(notes))[:5000], "inferopt.report": first})
    tracker.finish()
    return tracker
