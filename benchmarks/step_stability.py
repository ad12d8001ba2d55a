"""How steady is this machine's decode step? The noise floor under the simulator's error (issue 18).

Loads the builtin tiny Llama (eager attention, float32, one torch thread, as configs/systems/hf-tiny.yaml), then
times batch-1 decode steps with the KV cache after a 64-token prompt: `--loads` fresh loads, each `--stretches`
runs of `--steps` steps. No engine, no client, no other thread: whatever spread it prints is the machine's and
PyTorch's, and bounds how closely any model fitted on one probe can predict the next. Last line: one JSON
object {"stretch_median_ms": [...], "min_ms", "max_ms", "max_over_min", "cv"}. Usage (~1 min, quiet box):

    flock /tmp/inferopt-bench.lock .venv/bin/python benchmarks/step_stability.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from inferopt.config import ModelSpec  # noqa: E402
from inferopt.model.loading import load_model  # noqa: E402


def stretch_medians_ms(stretches: int, steps: int, prompt_len: int = 64) -> list[float]:
    """One fresh load; per stretch, a new prompt's prefill, then the median of `steps` decode steps (ms)."""
    model = load_model(ModelSpec(path="builtin:tiny-llama"), attn_implementation="eager").model
    ids = torch.randint(10, 200, (1, prompt_len), generator=torch.Generator().manual_seed(0))
    out = []
    with torch.inference_mode():  # as the engine's loop calls it (`inferopt.engines.hf.loop`)
        for _ in range(stretches):
            step = model(input_ids=ids, use_cache=True, logits_to_keep=1)
            times = []
            for _ in range(steps):
                nxt = step.logits[:, -1:].argmax(-1)
                t0 = time.perf_counter()
                step = model(input_ids=nxt, cache=step.cache, use_cache=True, logits_to_keep=1)
                times.append(time.perf_counter() - t0)
            out.append(1e3 * statistics.median(times))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loads", type=int, default=5, help="fresh model loads")
    ap.add_argument("--stretches", type=int, default=4, help="timed stretches per load")
    ap.add_argument("--steps", type=int, default=120, help="decode steps per stretch (~1 s)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    medians = []
    for k in range(args.loads):
        medians += (ms := stretch_medians_ms(args.stretches, args.steps))
        print(f"load {k}: stretch medians {[round(v, 2) for v in ms]} ms", flush=True)
    lo, hi = min(medians), max(medians)
    line = {
        "stretch_median_ms": [round(v, 3) for v in medians],
        "min_ms": round(lo, 3),
        "max_ms": round(hi, 3),
        "max_over_min": round(hi / lo, 3),
        "cv": round(statistics.pstdev(medians) / statistics.mean(medians), 4),
    }
    print(json.dumps(line))


if __name__ == "__main__":
    main()
