"""Planted degradations through the quality gate (issue 6, SPEC G1/G2/K2/K4).

Evaluates the trained quality model (`builtin:quality-tiny`) with lm-eval under planted arms and runs the
sliced gate (paired per-slice bootstrap, non-inferiority margin) of each arm against its fp32 baseline:
  benign      weights quanto-int8                 expected: passes every slice
  aggressive  weights quanto-int2                 expected: fails the slices it hurts
  the KV arms of `inferopt.model.quality.planted` (2-bit KV; 4-bit KV on the model's key-outlier twin; a
  128-token sliding window on its Mistral twin: the long-retrieval slice fails; hqq 8-bit KV on the
  key-outlier twin: it passes)
Each baseline is evaluated once (`sliced_gate`'s cache). Prints the baseline accuracy table and each arm's
non-passing slices; the last line is one JSON object:
{"baseline_acc": {slice: acc}, "retrieval_by_distance": {lang: {"lo-hi": acc}}, "benign_arm_passes": bool,
 "aggressive_arm_failed_slices": [...], "long_retrieval_as_planted": {arm: bool}, ...}

Usage: python benchmarks/quality_gate_planted.py [--limit N] [--threads 2] [--arms a,b] [--model DIR --data-dir D]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def retrieval_curve(samples) -> dict:
    """{lang: {"lo-hi": accuracy}} from one arm's samples (empty with v1 task data, which has no distances)."""
    from inferopt.gate.sliced import retrieval_by_distance

    out: dict = {}
    for r in retrieval_by_distance(samples).itertuples():
        out.setdefault(r.lang, {})[f"{int(r.bucket_lo)}-{int(r.bucket_hi)}"] = round(float(r.accuracy), 3)
    return out


def long_status(table) -> str:
    from inferopt.model.quality.planted import LONG_SLICE

    row = table[(table["slice"] == LONG_SLICE) & (table["metric"] == "exact")] if not table.empty else table
    return str(row["status"].iloc[0]) if len(row) else "absent"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=int, default=None, help="documents per task (default: all)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--arms", default=None, help="comma-separated arm names to run (default: all)")
    ap.add_argument("--model", default="builtin:quality-tiny", help="e.g. a training stage's --out (a trial)")
    ap.add_argument("--data-dir", default=None, help="task data for --model (default: the shipped data)")
    args = ap.parse_args()

    from inferopt.config import GateSettings, HFSystem, ModelSpec
    from inferopt.gate.suite_gate import sliced_gate
    from inferopt.model.quality.planted import planted_kv_arms

    base = HFSystem(model=ModelSpec(path=args.model), torch_threads=args.threads)
    gate = GateSettings(quality_model="system", quality_limit=args.limit, quality_data_dir=args.data_dir)
    arms = {
        "benign:quanto-int8": ("pass", base, base.model_copy(update={"weight_quantization": "quanto-int8"})),
        "aggressive:quanto-int2": ("fail", base, base.model_copy(update={"weight_quantization": "quanto-int2"})),
        **planted_kv_arms(base, Path(tempfile.mkdtemp(prefix="quality-tiny-twins-"))),
    }
    if args.arms:
        arms = {k: v for k, v in arms.items() if k in args.arms.split(",")}
    out: dict = {"arms": {}}
    t0 = time.perf_counter()
    cache: dict = {}
    for name, (_, arm_base, cand) in arms.items():
        res = sliced_gate(arm_base, cand, gate, cache=cache)
        if "baseline_acc" not in out and not res.accuracy.empty and arm_base is base:
            acc = res.accuracy[res.accuracy["arm"] == "baseline"]
            out["baseline_acc"] = {
                f"{r.task}/{r.lang}/{r.context}": round(float(r.accuracy), 3) for r in acc.itertuples()
            }
            print(acc.to_string(index=False))
            out["retrieval_by_distance"] = retrieval_curve(res.samples["baseline"])
        if "mde_per_slice" not in out and not res.table.empty and "mde" in res.table:
            primary = res.table.drop_duplicates(["slice", "metric"])
            out["mde_per_slice"] = {f"{r.slice}:{r.metric}": round(float(r.mde), 3) for r in primary.itertuples()}
            out["uninformative_slices"] = sorted(
                f"{r.slice}:{r.metric}" for r in primary.itertuples() if r.status == "uninformative"
            )
        failed = res.table[res.table["status"] == "fail"] if not res.table.empty else res.table
        out["arms"][name] = {
            "status": res.status,
            "long_retrieval": long_status(res.table),
            "failed": sorted({f"{r.slice}:{r.metric}" for r in failed.itertuples()}),
            "task_success_rate": res.task_success_rate,
            "retrieval_by_distance": retrieval_curve(res.samples["candidate"]) if res.samples else {},
        }
        print(f"{name}: {res.status}")
        for line in res.reasons[1:]:
            print("   ", line)
    if "benign:quanto-int8" in out["arms"]:
        out["benign_arm_passes"] = out["arms"]["benign:quanto-int8"]["status"] == "pass"
    out["aggressive_arm_failed_slices"] = sorted(
        {s for n, a in out["arms"].items() if n.startswith("aggressive") for s in a["failed"]}
    )
    out["long_retrieval_as_planted"] = {
        n: out["arms"][n]["long_retrieval"] == expect
        for n, (expect, *_rest) in arms.items()
        if "kv" in n or "window" in n
    }
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
