"""The bad-input corpus (`tests/bad_inputs/bad_input_cases.py`) through the CLI's pre-run entry, in process.

    .venv/bin/python benchmarks/bad_inputs.py [--timeout-s 10] [--only ID-SUBSTRING]

Each case's files are written to a temp directory and run through `flows.optimize.prerun` (what
`python -m flows.optimize` runs before Prefect and MLflow start), under a per-case timer (SIGALRM), and
classified: clean (refused with a ConfigError whose message names the expected file and field and says
"fix"), unclear (refused, but the message misses one of those), deep (another exception: a library
traceback), silent (accepted), hung (past the timer). One line per case, then, as the LAST line, one JSON
object: {"cases": n, "clean": k, "unclear": u, "deep": d, "silent": s, "hung": h}.

Deliberately not here: the CLI's process start and exit code (tests/bad_inputs/test_cli.py checks those).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "bad_inputs"))

import bad_input_cases as corpus  # noqa: E402

from flows.optimize import prerun, refusal  # noqa: E402
from inferopt.config import ConfigError  # noqa: E402


class Hung(BaseException):
    """The per-case timer fired."""


def _alarm(_signum: int, _frame: object) -> None:
    raise Hung()


def classify(case: corpus.Case, root: Path, timeout_s: float) -> tuple[str, str]:
    """(outcome, the message or exception) for one case."""
    cand, sets = corpus.materialize(case, root)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        prerun(str(cand), sets)
    except Hung:
        return "hung", f"no answer within {timeout_s:g} s"
    except ConfigError as exc:
        msg = refusal(exc, str(cand))
    except Exception as exc:  # noqa: BLE001 - what we are counting
        return "deep", f"{type(exc).__module__}.{type(exc).__name__}: {str(exc)[:200]}"
    else:
        return "silent", "accepted"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return ("clean" if message_ok(case, root, msg) else "unclear"), msg


def message_ok(case: corpus.Case, root: Path, msg: str) -> bool:
    """Names the expected file and field, says the fix, and echoes no planted secret."""
    want_file = corpus.SET if case.expect_file == corpus.SET else str(root / case.expect_file)
    return want_file in msg and case.expect_field in msg and "fix" in msg and not any(s in msg for s in corpus.SECRETS)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--timeout-s", type=float, default=10.0, help="per case")
    ap.add_argument("--only", default="", help="run the cases whose id contains this")
    ap.add_argument("--verbose", action="store_true", help="print each message in full")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGALRM, _alarm)
    counts = dict.fromkeys(("clean", "unclear", "deep", "silent", "hung"), 0)
    cases = [c for c in corpus.CASES if args.only in c.id]
    with tempfile.TemporaryDirectory(prefix="inferopt-bad-inputs-") as tmp:
        for case in cases:
            t0 = time.perf_counter()
            outcome, msg = classify(case, Path(tmp).resolve() / case.id, args.timeout_s)
            counts[outcome] += 1
            shown = msg if args.verbose else msg.replace("\n", " | ")[:160]
            print(f"{outcome:8s} {time.perf_counter() - t0:5.2f}s {case.id}: {shown}", flush=True)
    print(json.dumps({"cases": len(cases), **counts}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
