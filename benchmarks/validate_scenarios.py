"""Step 5 alone, every scenario kind, into MLflow: steady, burst, overload (admission control against an
unbounded queue) and node failure (replicas behind nginx, one killed) on a candidate's system.

    flock /tmp/inferopt-vllm.lock .venv/bin/python benchmarks/validate_scenarios.py \
        [--candidate configs/candidates/vllm-chunked-prefill.yaml] [--arm candidate|baseline] [--requests N]

It replaces the candidate's `validation.scenarios` with the four below (rates relative to the candidate's
workload), runs the validate task into a fresh MLflow parent run (experiment `scenarios`), prints each
scenario's verdict and reasons, and as its last line one JSON object: the run id and, per scenario, pass,
TTFT p99, rejected/failed counts, recovery time and Jain's index. node_failure needs a vllm system and nginx
(scripts/setup_nginx.sh); on other systems it is reported failed with the reason.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

SCENARIOS = [
    {"name": "steady", "kind": "steady"},
    {"name": "burst", "kind": "burst", "burstiness": 8.0},
    {
        "name": "overload",
        "kind": "overload",
        "rate_scale": 8.0,
        "admission_limit": 18,
        "retry": {"max_attempts": 3, "base_backoff_s": 0.25, "max_backoff_s": 2.0},
    },
    {"name": "node-failure", "kind": "node_failure", "kill_at_s": 5.0, "max_recovery_s": 10.0},
]


def _num(v: object) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else round(float(v), 3)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidate", default="configs/candidates/vllm-chunked-prefill.yaml")
    ap.add_argument("--arm", choices=("candidate", "baseline"), default="candidate")
    ap.add_argument("--requests", type=int, default=None, help="requests per scenario (default: the workload's)")
    args = ap.parse_args(argv)
    os.chdir(ROOT)
    from inferopt.config.loader import load_config
    from tasks.tracking import Tracker
    from tasks.validate import validate_task

    overrides = {"validation.scenarios": SCENARIOS}
    if args.requests:
        overrides["workload.num_requests"] = args.requests
    cfg = load_config(args.candidate, kind="candidate", **overrides)
    tracker = Tracker.start(f"scenarios-{cfg.name}", experiment="scenarios", tags={"inferopt.kind": "scenarios"})
    results = validate_task.fn(cfg, tracker, arm=args.arm)
    out = {"run_id": tracker.parent_run_id, "candidate": cfg.name, "arm": args.arm, "scenarios": {}}
    for r in results:
        m = r.metrics
        out["scenarios"][r.scenario.name] = {
            "kind": r.scenario.kind,
            "passed": r.passed,
            "ttft_ms_p99": _num(m.get("ttft_ms_p99")),
            "requests": _num(m.get("requests")),
            "rejected_rate": _num(m.get("rejected_rate")),
            "unbounded_ttft_ms_p99": _num(m.get("unbounded.ttft_ms_p99")),
            "failed_requests": _num(m.get("failed_requests")),
            "recovery_s": _num(m.get("recovery_s")),
            "records_equal_sent": (m.get("records") == m.get("sent")) if "sent" in m else None,
            "jain_tenant": _num(m.get("fairness_jain_tenant")),
            "starved": r.fairness.starved if r.fairness else [],
            "first_reason": r.reasons[0] if r.reasons else "",
        }
    tracker.client.set_terminated(tracker.parent_run_id)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
