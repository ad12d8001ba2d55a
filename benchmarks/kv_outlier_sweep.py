"""Does a KV-cache arm fail the long-retrieval slice once the model's keys carry outlier channels? (issue 20)

For each `--ratios` value, a copy of the quality model gets key outlier channels at that ratio (largest pair's
mean |k| over the median channel's; `inferopt.model.quality.key_outliers`, which leaves every output as it
was), and the kv task runs through the sliced gate for each `--arms` KV setting against the copy's
full-precision cache. Ratio 0 is the shipped model as it is. Real LLMs' keys span roughly 8-100x (flat models
such as Falcon and OPT tolerate 4-bit KV; Qwen2-7B does not); the trained proxy's are 2-5x. Prints one line per
(ratio, arm); the last line is one JSON object {"long_slice": {ratio: {arm: {"base", "cand", "ci_lo", "ci_hi",
"status"}}}, "margin": m}.

Usage: flock /tmp/inferopt-bench.lock .venv/bin/python benchmarks/kv_outlier_sweep.py [--ratios 0,10,20,28,40]
       [--arms quanto-int4,quanto-int2,hqq-int8] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def planted_copy(ratio: float, out: Path) -> str:
    """The model directory for `ratio` (0: the shipped model as it is)."""
    from inferopt.config import ModelSpec
    from inferopt.model.loading import resolve_model_dir
    from inferopt.model.quality.key_outliers import key_outlier_copy

    if ratio == 0:
        return "builtin:quality-tiny"
    return str(key_outlier_copy(resolve_model_dir(ModelSpec(path="builtin:quality-tiny")), out, ratio)[0])


def long_row(res) -> dict:
    """The long-retrieval slice's row of one gate result (or why there is none)."""
    from inferopt.model.quality.planted import LONG_SLICE

    t = res.table
    if t.empty:
        return {"status": "error", "reasons": res.reasons[:2]}
    r = t[(t["slice"] == LONG_SLICE) & (t["metric"] == "exact")].iloc[0]
    return {
        "base": round(float(r["base_mean"]), 3),
        "cand": round(float(r["cand_mean"]), 3),
        "ci_lo": round(float(r["ci_lo"]), 3),
        "ci_hi": round(float(r["ci_hi"]), 3),
        "status": str(r["status"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ratios", default="0,10,20,28,40")
    ap.add_argument("--arms", default="quanto-int4,quanto-int2,hqq-int8")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    from inferopt.config import GateSettings, HFSystem, ModelSpec
    from inferopt.gate.suite_gate import sliced_gate

    gate = GateSettings(quality_model="system", quality_bootstrap=1000)
    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for ratio in [float(r) for r in args.ratios.split(",")]:
            path = planted_copy(ratio, Path(tmp) / f"r{ratio:g}")
            base = HFSystem(model=ModelSpec(path=path), torch_threads=args.threads)
            cache: dict = {}
            for arm in args.arms.split(","):
                cand = base.model_copy(update={"kv_cache": arm})
                row = long_row(sliced_gate(base, cand, gate, tasks=("inferopt_kv",), cache=cache))
                out.setdefault(f"{ratio:g}", {})[arm] = row
                print(f"ratio {ratio:g}", arm, row, flush=True)
    print(json.dumps({"long_slice": out, "margin": gate.quality_margin}))


if __name__ == "__main__":
    main()
