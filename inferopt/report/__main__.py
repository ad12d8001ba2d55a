"""Rebuild the HTML report of a past run from its results directory (no MLflow needed):

python -m inferopt.report results/<run_id> [-o report.html]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from inferopt.report.html import build_report
from inferopt.report.rundir import load_run_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the HTML report of a run from results/<run_id>/.")
    parser.add_argument("run_dir", help="results/<mlflow_run_id>")
    parser.add_argument("-o", "--out", default=None, help="output file (default: <run_dir>/report.html)")
    args = parser.parse_args(argv)
    out = Path(args.out) if args.out else Path(args.run_dir) / "report.html"
    out.write_text(build_report(load_run_dir(args.run_dir)), encoding="utf-8")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
