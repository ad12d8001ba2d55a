"""Compare flow runs side by side:

python -m inferopt.compare RUN_A RUN_B [RUN_C ...] [--alpha 0.05] [--no-mlflow] [--experiment inferopt]

Each RUN is an MLflow run id of an optimize flow run (its `results/<id>/` mirror, else its artifacts downloaded
there) or a path to a results directory. Every run after the first is compared with the first. Prints the
side-by-side table and, unless --no-mlflow, logs the comparison as a new MLflow run (`inferopt.kind=compare`).
"""

from __future__ import annotations

import argparse
import sys

from inferopt.compare.core import compare_runs
from inferopt.compare.render import console
from inferopt.compare.runs import load_side


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Compare optimize-flow runs side by side (B.. against A).")
    parser.add_argument("runs", nargs="+", metavar="RUN", help="MLflow run ids or results/<run_id> directories")
    parser.add_argument("--alpha", type=float, default=0.05, help="two-sided level of every test and CI")
    parser.add_argument("--no-mlflow", action="store_true", help="print only; log no comparison run")
    parser.add_argument("--experiment", default="inferopt", help="MLflow experiment of the comparison run")
    args = parser.parse_args(argv)
    if len(args.runs) < 2:
        parser.error("give at least two runs")
    # lazy: run lookup and logging are MLflow's (tasks/ holds that layer); the comparison itself needs none
    from tasks.compare import log_comparison, run_dir

    try:
        sides = [load_side(run_dir(ref)) for ref in args.runs]
    except Exception as exc:  # noqa: BLE001 - a run that cannot be found is the user's to fix, said plainly
        print(f"cannot read a run: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    cmps = [compare_runs(sides[0], other, alpha=args.alpha) for other in sides[1:]]
    for cmp in cmps:
        print(console(cmp), end="\n\n")
    if not args.no_mlflow:
        tracker = log_comparison(cmps, experiment=args.experiment)
        print(f"MLflow comparison run {tracker.parent_run_id}; files in {tracker.results_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
