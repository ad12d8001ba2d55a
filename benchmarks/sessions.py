"""A multi-turn agentic load on the embedded default engine: cache hits, prefill, tool and history time, cost.

Runs `configs/workloads/agentic-sessions.yaml` (8 sessions of 3-5 turns: each turn's prompt is the conversation so
far, read from a SQLite store, plus a new message; tool calls to a local service on 127.0.0.1 after answers; think
time between turns) on `configs/systems/hf-tiny.yaml` through the measure step (`measure_system`), with the prefix
cache turned on where the system offers the knob (`enable_prefix_caching`; hf has it once the prefix cache lands,
vLLM always). Cost per successful session comes from the gate's own cost table (`gate.judge.cost_table`: the
measured run's duration x the hardware config's price, plus estimated energy, over the sessions whose every turn
met the SLO). Figures, over the measured (non-warm-up) turns:

- cache_hit_rate: share of turns served with cached prompt tokens (`cached_tokens > 0`);
- prefill_ms_p50_first_turn / _later_turns: median engine prefill of turn 0 vs turns >= 1 (ok turns);
- external_ms_p50: median measured tool time of the turns that called a tool; context_ms_p50: median C_context
  (history read + engine context preparation);
- decomposition_adds_up: per request (TTFT and E2E, with a non-zero T_external) and per session.

Usage (a couple of minutes; under the bench lock): flock /tmp/inferopt-bench.lock nice -n 5 .venv/bin/python
benchmarks/sessions.py [--workload PATH] [--system PATH] [--slo PATH] [--hardware PATH] [--prefix-cache on|off|both].
The last line is one JSON object: {"turns", "cache_hit_rate", "cache_hit_slices", "prefill_ms_p50_first_turn",
"prefill_ms_p50_later_turns", "ttft_ms_p50_later_turns", "external_ms_p50", "context_ms_p50",
"decomposition_adds_up", "cost_per_successful_session_usd"}; with `both` (e.g. `--system
configs/systems/vllm-tiny.yaml`, under the vLLM lock too) the cache-off run's figures follow under
"prefix_cache_off", with "later_turns_ttft_off_over_on".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from inferopt.config import load_config  # noqa: E402
from inferopt.gate.judge import cost_table  # noqa: E402
from inferopt.locate.hardware import load_hardware  # noqa: E402
from inferopt.measure.step import measure_system  # noqa: E402


def _p50(values: pd.Series) -> float | None:
    v = pd.to_numeric(values, errors="coerce").dropna()
    return float(v.median()) if len(v) else None


def with_prefix_cache(system, on: bool = True):  # noqa: ANN001, ANN201 - any system config
    """The system with its prefix cache on (or off), where its config has the knob (else unchanged)."""
    if "enable_prefix_caching" in type(system).model_fields:
        return system.model_copy(update={"enable_prefix_caching": on})
    return system


def run_once(system, workload, slo, hw_cfg) -> dict:  # noqa: ANN001 - loaded configs
    """Measure the session workload on one system; print the tables and return the figures."""
    print(f"system {system.name}: prefix cache {system.capabilities.prefix_cache}")
    with tempfile.TemporaryDirectory(prefix="bench-sessions-") as out:
        res = measure_system(system, workload, slo, out, warmup_requests=2, run_tag="bench-sessions")
    ph = res.phases
    ok = ph[ph["outcome"] == "ok"]
    first, later = ok[ok["turn"] == 0], ok[ok["turn"] > 0]
    dec = res.decomposition
    print(res.sessions.drop(columns=["arm", "trial"]).to_string(index=False))
    print({k: round(v, 4) if isinstance(v, float) else v for k, v in dec.items()})
    print({k: round(v, 2) for k, v in res.headline.items() if k.startswith("session")})
    by_turn = ok.assign(turn_kind=np.where(ok["turn"] == 0, "first", "later")).groupby("turn_kind")
    cols = ["ttft_ms", "queue_ms", "prefill_ms", "context_ms", "external_ms", "e2e_ms", "input_len", "cached_tokens"]
    print("p50 per turn kind (ok turns):\n" + by_turn[cols].median().round(1).to_string())
    print("p50 per cache-hit slice (ok turns):\n" + ok.groupby("cache_hit")[cols].median().round(1).to_string())
    threads = int(getattr(system, "torch_threads", 1) or 1)
    hw = load_hardware(hw_cfg, getattr(system, "dtype", "float32"), threads)
    trials = pd.DataFrame(
        [{"arm": "baseline", "failed": False, "duration_s": res.run.duration_s, "phases": ph,
          "resources": res.run.resources}]
    )  # fmt: skip
    cost = cost_table(trials, slo, hw, {"baseline": threads}).iloc[0]
    print(f"cost: {cost['total_cost_usd']:.3g} USD over {res.run.duration_s:.1f} s, {cost['successful']} of "
          f"{cost['tasks']} {cost['task_unit']}s ok within the SLO ({os.cpu_count()} cores)")  # fmt: skip
    ext = ok.loc[ok["external_ms"] > 0, "external_ms"]
    adds_up = bool(dec["adds_up"] and dec.get("session_adds_up") and dec["n_with_external"] > 0)
    return {
        "turns": int(len(ph)),
        "cache_hit_rate": float((ph["cached_tokens"] > 0).mean()) if len(ph) else 0.0,
        "cache_hit_slices": sorted(str(v) for v in ph["cache_hit"].dropna().unique()),
        "prefill_ms_p50_first_turn": _p50(first["prefill_ms"]),
        "prefill_ms_p50_later_turns": _p50(later["prefill_ms"]),
        "ttft_ms_p50_later_turns": _p50(later["ttft_ms"]),
        "external_ms_p50": _p50(ext),
        "context_ms_p50": _p50(ok["context_ms"]),
        "decomposition_adds_up": adds_up,
        "cost_per_successful_session_usd": cost.get("cost_per_successful_session_usd"),
    }


def _clean(figures: dict) -> dict:
    return {k: (None if isinstance(v, float) and not np.isfinite(v) else v) for k, v in figures.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default=str(ROOT / "configs/workloads/agentic-sessions.yaml"))
    ap.add_argument("--system", default=str(ROOT / "configs/systems/hf-tiny.yaml"))
    ap.add_argument("--slo", default=str(ROOT / "configs/slo/interactive.yaml"))
    ap.add_argument("--hardware", default=str(ROOT / "configs/hardware/cpu.yaml"))
    ap.add_argument("--prefix-cache", choices=["on", "off", "both"], default="on",
                    help="both: the same workload with the cache on, then off (the off run's figures under "
                         "'prefix_cache_off', and the later turns' TTFT ratio off/on)")  # fmt: skip
    args = ap.parse_args()
    workload, slo = load_config(args.workload), load_config(args.slo)
    system, hw_cfg = load_config(args.system), load_config(args.hardware)
    if args.prefix_cache != "both":
        print(json.dumps(_clean(run_once(with_prefix_cache(system, args.prefix_cache == "on"), workload, slo, hw_cfg))))
        return
    on = _clean(run_once(with_prefix_cache(system, True), workload, slo, hw_cfg))
    off = _clean(run_once(with_prefix_cache(system, False), workload, slo, hw_cfg))
    ratio = None
    if on["ttft_ms_p50_later_turns"] and off["ttft_ms_p50_later_turns"]:
        ratio = round(off["ttft_ms_p50_later_turns"] / on["ttft_ms_p50_later_turns"], 3)
    print(json.dumps({**on, "prefix_cache_off": off, "later_turns_ttft_off_over_on": ratio}))


if __name__ == "__main__":
    main()
