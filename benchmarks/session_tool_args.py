"""Sessions' tool-call turns as the gate's tool-argument slices, on a real model: two arms serve one session load.

Runs `configs/workloads/agentic-tools.yaml` (every turn leads to a tool call: the model is asked for it in the
quality suite's format) on `configs/systems/hf-quality-tiny.yaml` (the hf engine serving the shipped quality model)
as the baseline and the same system with `--candidate-dtype` (default bfloat16) as the candidate, each through
`run_system` (the real tool service on 127.0.0.1, a SQLite history), then compares their answers with the gate's
own `session_tool_gate` (paired by ask, bootstrap CI, margin, mde). Figures: per arm the asked and scored turns,
args_exact / json_valid means (all, first turns, later turns: the ask after a longer history), the share of tool
calls made with the model's own arguments; the `sessions:task=tool` args_exact row (n, diff, CI, status) and the
slices' overall status.

Usage (about a minute per arm; under the bench lock): flock /tmp/inferopt-bench.lock nice -n 5 .venv/bin/python
benchmarks/session_tool_args.py [--workload PATH] [--system PATH] [--candidate-dtype D] [--num-sessions N]. The
last line is one JSON object: {"tool_turns", "baseline_args_exact", "candidate_args_exact", "diff", "ci_lo",
"ci_hi", "status", "slices_status", "model_args_share_baseline", "baseline_args_exact_first_turn",
"baseline_args_exact_later_turns", "not_applicable"}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from inferopt.config import GateSettings, load_config  # noqa: E402
from inferopt.gate.session_tools import session_tool_gate  # noqa: E402
from inferopt.measure.runner import RunTags  # noqa: E402
from inferopt.measure.session import run_system  # noqa: E402
from inferopt.workload import build_workload  # noqa: E402


def _mean(values: list) -> float | None:  # noqa: ANN001 - booleans
    return float(np.mean(values)) if values else None


def _arm_line(arm: str, recs: list) -> dict:  # noqa: ANN001 - request records
    asked = [r for r in recs if r.tool_ask_id]
    scored = [r for r in asked if r.tool_args_ok is not None]
    out = {
        "asked": len(asked),
        "scored": len(scored),
        "args_exact": float(np.mean([r.tool_args_ok for r in scored])) if scored else None,
        "json_valid": float(np.mean([r.tool_json_valid for r in scored])) if scored else None,
        "model_args_share": float(np.mean([r.tool_args_source == "model" for r in asked])) if asked else None,
        "args_exact_first_turn": _mean([r.tool_args_ok for r in scored if r.turn == 0]),
        "args_exact_later_turns": _mean([r.tool_args_ok for r in scored if r.turn > 0]),
        "failed_turns": sum(r.outcome != "ok" for r in recs),
    }
    print(f"{arm}: {out}")
    for r in scored[:3]:
        print(f"  {r.request_id}: expected {r.tool_expected} answered {r.tool_answer!r} -> args_ok {r.tool_args_ok}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default=str(ROOT / "configs/workloads/agentic-tools.yaml"))
    ap.add_argument("--system", default=str(ROOT / "configs/systems/hf-quality-tiny.yaml"))
    ap.add_argument("--candidate-dtype", default="bfloat16")
    ap.add_argument("--num-sessions", type=int, default=None)
    args = ap.parse_args()
    workload = load_config(args.workload)
    if args.num_sessions:
        workload = workload.model_copy(
            update={"sessions": workload.sessions.model_copy(update={"num_sessions": args.num_sessions})}
        )
    base = load_config(args.system)
    cand = base.model_copy(update={"dtype": args.candidate_dtype, "name": f"{base.name}-{args.candidate_dtype}"})
    table = build_workload(workload)
    print(
        f"{workload.name}: {table['session_id'].nunique()} sessions, {len(table)} turns on {base.name} vs {cand.name}"
    )
    recs = {}
    for arm, system in (("baseline", base), ("candidate", cand)):
        run = run_system(system, table, RunTags(arm=arm), timeout_s=workload.timeout_s, warmup_requests=1)
        if run.failed:
            raise SystemExit(f"{arm} failed: {run.error}")
        recs[arm] = run.records
    lines = {arm: _arm_line(arm, r) for arm, r in recs.items()}
    st = session_tool_gate(recs["baseline"], recs["candidate"], GateSettings())
    for line in st.reasons:
        print(line)
    if len(st.table) and "base_mean" in st.table:
        cols = ["slice", "metric", "n", "base_mean", "cand_mean", "diff", "ci_lo", "ci_hi", "mde", "status"]
        print(st.table[cols].round(3).to_string(index=False))
    rows = st.table[(st.table["slice"] == "sessions:task=tool") & (st.table["metric"] == "args_exact")]
    top = rows.iloc[0] if len(rows) else {}
    figures = {
        "tool_turns": lines["baseline"]["asked"],
        "baseline_args_exact": lines["baseline"]["args_exact"],
        "candidate_args_exact": lines["candidate"]["args_exact"],
        "diff": top.get("diff"),
        "ci_lo": top.get("ci_lo"),
        "ci_hi": top.get("ci_hi"),
        "status": top.get("status"),
        "slices_status": st.status,
        "model_args_share_baseline": lines["baseline"]["model_args_share"],
        "baseline_args_exact_first_turn": lines["baseline"]["args_exact_first_turn"],
        "baseline_args_exact_later_turns": lines["baseline"]["args_exact_later_turns"],
        "not_applicable": sum(c["not_applicable"] for c in st.counts.values()),
    }
    clean = {k: (float(v) if isinstance(v, (np.floating, float)) else v) for k, v in figures.items()}
    print(json.dumps({k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in clean.items()}))


if __name__ == "__main__":
    main()
