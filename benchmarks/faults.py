"""Fault injection, for real: each scenario of `tests/faults/faultkit.py` on this machine, bounded in time.

    .venv/bin/python benchmarks/faults.py [--only NAME] [--outage-s 20]

Scenarios: the MLflow endpoint down mid-run, then back (`mlflow_outage`: a real `mlflow server` behind a TCP
forwarder that is cut), a disk that fills under the record writer (`disk_full`), an engine call that never
returns (`hung_engine`: the run deadline), a process SIGKILLed with a server it launched
(`sigkill_server_parent`) and with the vLLM launcher and a worker that ignores SIGTERM
(`sigkill_vllm_launcher_group`), the optimize flow
SIGKILLed mid-ablation and resumed with --resume (`sigkill_ablation_resume`). One line per scenario, then, as
the LAST line, one JSON object: {"scenarios": n, "survived": k, "records_lost": r, "orphans": o, ...} with
each scenario's outcome under "per_scenario".

Deliberately not here: a real vLLM server killed mid-trial (needs the vLLM build and a model); the rule it
follows (ServerDied fails the trial) is tested with an engine that reports it (tests/faults/test_fault_hung_engine.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "faults"))
os.chdir(ROOT)

import faultkit  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run the scenarios whose name contains this")
    parser.add_argument("--outage-s", type=float, default=20.0, help="how long the MLflow endpoint stays down")
    args = parser.parse_args(argv)
    scenarios = {**faultkit.SCENARIOS, "mlflow_outage": partial(faultkit.mlflow_outage, outage_s=args.outage_s)}
    outcomes = []
    for name, run in scenarios.items():
        if args.only not in name:
            continue
        with tempfile.TemporaryDirectory(prefix=f"inferopt-fault-{name}-") as tmp:
            try:
                out = run(Path(tmp))
            except Exception as exc:  # noqa: BLE001 - a scenario that breaks is reported, not survived
                out = faultkit.Outcome(name, False, 0, 0, f"scenario error {type(exc).__name__}: {exc}")
        outcomes.append(out)
        mark = "survived" if out.survived else "NOT SURVIVED"
        print(f"{name:28s} {mark:13s} lost {out.records_lost} orphans {out.orphans} {out.seconds:6.1f} s  {out.detail}")
    summary = {
        "scenarios": len(outcomes),
        "survived": sum(o.survived for o in outcomes),
        "records_lost": sum(o.records_lost for o in outcomes),
        "orphans": sum(o.orphans for o in outcomes),
        "per_scenario": {
            o.name: {"survived": o.survived, "records_lost": o.records_lost, "orphans": o.orphans} for o in outcomes
        },
    }
    print(json.dumps(summary), flush=True)
    return 0 if summary["survived"] == summary["scenarios"] else 1


if __name__ == "__main__":
    sys.exit(main())
