"""The six steps' core (no Prefect, no MLflow) on a CUDA device: measure, locate, choose, ablate, validate
and the drift gate for `configs/candidates/gpu-batching.yaml` (the hf engine, 350M random Llama, bf16).

Prints each step's headline and, as the last line, one JSON object:
{"device", "torch", "roofs": {...}, "measure": {...}, "cause", "ablation": {...}, "scenarios": {...}, "drift": {...}}

Usage: python benchmarks/gpu_smoke.py [--requests N] [--repeats R]   (exits 3 with a reason without CUDA)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    import torch

    parser = argparse.ArgumentParser()
    parser.add_argument("--candidate", default=str(ROOT / "configs/candidates/gpu-batching.yaml"))
    parser.add_argument("--requests", type=int, default=120)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--allow-cpu", action="store_true", help="dry-run the script itself on a CPU candidate")
    args = parser.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if dev == "cpu" and not args.allow_cpu:
        print("no CUDA device: nothing to check here", file=sys.stderr)
        return 3
    from inferopt.ablate.run import ablate
    from inferopt.choose.remedies import choose
    from inferopt.config import load_config
    from inferopt.gate.drift import next_token_drift, served_agreement
    from inferopt.locate.hardware import measure_device
    from inferopt.locate.step import locate_step
    from inferopt.measure.step import measure
    from inferopt.validate.scenarios import scenario_table, validate

    t0 = time.time()
    cand = load_config(
        args.candidate,
        **{"workload.num_requests": args.requests, "ablation.repeats": args.repeats, "gate.held_prompts": 8},
    )
    out = Path(tempfile.mkdtemp())
    name = torch.cuda.get_device_name() if dev == "cuda" else "cpu"
    roofs = measure_device("bfloat16", 4, device=dev)
    print(
        f"[roofs] {name}: bf16 matmul {roofs['matmul_flop_per_s'] / 1e12:.0f} TFLOP/s, "
        f"copy {roofs['copy_bytes_per_s'] / 1e12:.2f} TB/s"
    )
    m = measure(cand, out / "measure")
    print(f"[measure] {json.dumps({k: round(v, 2) for k, v in m.headline.items()})}")
    print(f"[measure] decomposition {m.decomposition}")
    loc = locate_step(cand, m.phases, profile=True)
    print(f"[locate] {loc.diagnosis.cause} ({loc.diagnosis.confidence:.2f}): {loc.diagnosis.rule}")
    print(loc.measured.to_string())
    if loc.profile is not None:  # the op profile's CUDA path (device time per category) only runs here
        print(loc.profile.ops.to_string())
        print(f"[profile] {loc.profile.settings} {loc.profile.resources}")
    elif loc.profile_error:
        print(f"[profile] FAILED: {loc.profile_error}")
    ch = choose(loc.diagnosis.cause, dict(cand.changes))
    print(f"[choose] matches={ch.matches} warning={ch.warning}")
    ab = ablate(cand, out / "ablate")
    print(
        ab.effects[["metric", "baseline_value", "arm_value", "ratio", "ratio_lo", "ratio_hi", "direction"]].to_string()
    )
    print(f"[ablate] {ab.verdicts}")
    sc = validate(cand.candidate_system, cand.workload, cand.validation.scenarios, cand.slo, out / "validate")
    table = scenario_table(sc)
    print(table[["scenario", "output_tok_per_s", "ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p95", "passed"]].to_string())
    recs = {a: [r for run in ab.runs if run.tags.arm == a for r in run.records] for a in ("baseline", "candidate")}
    served = served_agreement(recs["baseline"], recs["candidate"])
    bf16 = cand.baseline.model_copy(update={"dtype": "float32"})
    drift = next_token_drift(bf16, cand.baseline, cand.gate)  # fp32 -> bf16 on the GPU: a real numeric change
    print(f"[gate] served {served}\n[gate] fp32->bf16 drift {drift}")
    result = {
        "device": name,
        "torch": torch.__version__,
        "roofs": {
            "bf16_matmul_tflop_per_s": roofs["matmul_flop_per_s"] / 1e12,
            "copy_tb_per_s": roofs["copy_bytes_per_s"] / 1e12,
        },
        "measure": {k: m.headline[k] for k in ("ttft_ms_p50", "ttft_ms_p99", "tpot_ms_p50", "output_tok_per_s")},
        "decomposition_adds_up": m.decomposition["adds_up"],
        "cause": loc.diagnosis.cause,
        "measured_roofline": loc.measured[["phase", "measured_ms", "roofline_min_ms", "mfu", "mbu"]].to_dict("records"),
        "ablation": {r.metric: [r.ratio, r.ratio_lo, r.ratio_hi] for r in ab.effects.itertuples()},
        "arm_verdict": ab.verdicts["candidate"].verdict,
        "scenarios": {r["scenario"]: bool(r["passed"]) for r in table.to_dict("records")},
        "served_agreement": served.get("token_agreement"),
        "fp32_bf16_mean_kl": drift.get("mean_kl"),
        "fp32_bf16_top1": drift.get("top1_agreement"),
        "wall_s": time.time() - t0,
    }
    print(json.dumps(result, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
