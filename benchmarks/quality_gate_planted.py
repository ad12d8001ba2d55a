"""Planted degradations through the quality gate (issue 6, SPEC G1/G2/K2/K4).

Evaluates the trained quality model (`builtin:quality-tiny`) with lm-eval under four arms and runs the
sliced gate (paired per-slice bootstrap, non-inferiority margin) of each arm against the fp32 baseline:
  benign      weights quanto-int8                 expected: passes every slice
  aggressive  weights quanto-int2                 expected: fails the slices it hurts
  aggressive  KV cache quantized to 2 bits        expected: fails generation slices (not log-likelihood MC)
Prints the baseline accuracy table and each arm's non-passing slices; the last line is one JSON object:
{"baseline_acc": {slice: acc}, "benign_arm_passes": bool, "aggressive_arm_failed_slices": [...], ...}

Usage: python benchmarks/quality_gate_planted.py [--limit N] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=None, help="documents per task (default: all)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    from inferopt.config import GateSettings, HFSystem, ModelSpec
    from inferopt.gate.suite_gate import sliced_gate

    base = HFSystem(model=ModelSpec(path="builtin:quality-tiny"), torch_threads=args.threads)
    gate = GateSettings(quality_model="system", quality_limit=args.limit)
    arms = {
        "benign:quanto-int8": base.model_copy(update={"weight_quantization": "quanto-int8"}),
        "aggressive:quanto-int2": base.model_copy(update={"weight_quantization": "quanto-int2"}),
        "aggressive:kv-int2": base.model_copy(update={"kv_cache": "quantized-int2"}),
    }
    out: dict = {"arms": {}}
    t0 = time.perf_counter()
    for name, cand in arms.items():
        res = sliced_gate(base, cand, gate)
        if "baseline_acc" not in out and not res.accuracy.empty:
            acc = res.accuracy[res.accuracy["arm"] == "baseline"]
            out["baseline_acc"] = {
                f"{r.task}/{r.lang}/{r.context}": round(float(r.accuracy), 3) for r in acc.itertuples()
            }
            print(acc.to_string(index=False))
        if "mde_per_slice" not in out and not res.table.empty and "mde" in res.table:
            primary = res.table.drop_duplicates(["slice", "metric"])
            out["mde_per_slice"] = {f"{r.slice}:{r.metric}": round(float(r.mde), 3) for r in primary.itertuples()}
            out["uninformative_slices"] = sorted(
                f"{r.slice}:{r.metric}" for r in primary.itertuples() if r.status == "uninformative"
            )
        failed = res.table[res.table["status"] == "fail"] if not res.table.empty else res.table
        out["arms"][name] = {
            "status": res.status,
            "failed": sorted({f"{r.slice}:{r.metric}" for r in failed.itertuples()}),
            "task_success_rate": res.task_success_rate,
        }
        print(f"{name}: {res.status}")
        for line in res.reasons[1:]:
            print("   ", line)
    out["benign_arm_passes"] = out["arms"]["benign:quanto-int8"]["status"] == "pass"
    out["aggressive_arm_failed_slices"] = sorted(
        {s for n, a in out["arms"].items() if n.startswith("aggressive") for s in a["failed"]}
    )
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
