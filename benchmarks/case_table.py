"""The seed's case reproduced in shape (SPEC E; issue 7 item 3, issue 14 item 5): one mixed load (short
interactive chats + long offline jobs), three batching strategies — static small batches (our `hf` engine),
aggressive continuous batching (vLLM, large max-num-seqs, no chunked prefill), pooled + chunked prefill (an
interactive and an offline vLLM pool routed by tenant) — measured one after another on the same request table
(the seed's table, read in the seed's order: throughput first, then TTFT p50 and p99 against the SLO,
`case_study.decide`: `one_run_chosen`), then decided beyond noise: each strategy's capacity under the
interactive SLO on the same mix (`choose.case`, the case's `capacity:` budget), a winner only when it
clears the runner-up's bracket and wins their head-to-head, else a tie broken by cost per successful request
at capacity (`--hardware`'s price), said so (`chosen`, `decision`, `message`). `--no-capacity`: the table only.

Prints the table (markdown), the decision's steps, the capacity table; the LAST line is one JSON object:
{"rows": [{"strategy", "throughput_tok_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p95_ms", "meets_slo", "verdict"}],
 "one_run_chosen", "chosen": name or null, "decision": winner|tie|none_meets|null, "message",
 "capacity": [{"strategy", "capacity_req_per_s", "capacity_lo", "capacity_hi", "status", "probes",
 "goodput_req_per_s", "cost_per_1k_ok_usd", "message"}], "duels", "workload_hash", "requests", "wall_s"}.
Every request's record is under results/case/<time>/<strategy>/requests.jsonl. The numbers hold for this load
on this machine only; re-measure when either changes.

On this shared 2-core box wrap it in the vLLM lock (two vLLM servers run at once in the pooled strategy):
  flock /tmp/inferopt-vllm.lock .venv/bin/python benchmarks/case_table.py
Options: --case FILE (default configs/case/case.yaml), --scale F (every tenant's request count × F, same
rates: a reduced run), --only NAME ... (a subset of strategies), --out DIR.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from inferopt.choose.case import capacity_rows, case_capacity  # noqa: E402
from inferopt.config import load_case, load_config  # noqa: E402
from inferopt.config.case import CaseConfig  # noqa: E402
from inferopt.validate.capacity import CapacityBudget  # noqa: E402
from inferopt.validate.case_study import (  # noqa: E402
    case_json,
    case_requests,
    decide,
    format_table,
    run_case,
)


def scaled(case: CaseConfig, factor: float) -> CaseConfig:
    """The same case with every tenant's request count × `factor` (at least 2 each; rates unchanged)."""
    if factor == 1.0:
        return case
    tenants = {
        name: t.model_copy(
            update={
                "workload": t.workload.model_copy(
                    update={"num_requests": max(2, round(t.workload.num_requests * factor))}
                )
            }
        )
        for name, t in case.tenants.items()
    }
    return case.model_copy(update={"tenants": tenants})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default=str(ROOT / "configs/case/case.yaml"))
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--only", nargs="*", default=[])
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-capacity", action="store_true", help="the one-run table only (no capacity decision)")
    ap.add_argument("--hardware", default=str(ROOT / "configs/hardware/cpu.yaml"), help="its price_per_hour_usd")
    args = ap.parse_args(argv)
    case = scaled(load_case(args.case), args.scale)
    unknown = [s for s in args.only if s not in case.strategies]
    if unknown:
        ap.error(f"--only {unknown}: not strategies of {args.case}; choose from {list(case.strategies)}")
    out = Path(args.out) if args.out else ROOT / "results" / "case" / time.strftime("%Y%m%d-%H%M%S")
    table = case_requests(case)
    counts = table["tenant"].value_counts().to_dict()
    print(
        f"case {case.name}: {len(table)} requests {counts} over {table['arrival_offset_s'].max():.1f} s, "
        f"workload {table.attrs['content_hash']}; records under {out}",
        flush=True,
    )
    t0 = time.monotonic()
    rows, runs = run_case(case, out, only=tuple(args.only))
    for r, run in zip(rows, runs, strict=False):
        where = f"failed at {run.failed_at}: {r.error}" if run.failed else f"{run.duration_s:.1f} s window"
        print(f"  {r.strategy}: {r.requests} requests, {where}", flush=True)
    decision = decide(rows, case.slo)
    print()
    print(format_table(rows, decision, case.slo))
    result = case_json(rows, decision)
    result["one_run_chosen"] = result.pop("chosen")
    result.update(decide_by_capacity_run(case, out, args) if not args.no_capacity else {"chosen": None})
    result.update(
        {
            "workload_hash": table.attrs["content_hash"],
            "requests": len(table),
            "wall_s": round(time.monotonic() - t0, 1),
        }
    )
    print(json.dumps(result))
    return 0


def decide_by_capacity_run(case: CaseConfig, out: Path, args: argparse.Namespace) -> dict:
    """Every strategy's capacity under the SLO on the case's mix, and the decision beyond noise (printed)."""
    price = float(load_config(args.hardware, kind="hardware").price_per_hour_usd)
    budget = CapacityBudget(**case.capacity.budget_fields())
    print(f"\ncapacity under the SLO ({budget}), head-to-head x{case.capacity.duel_repeats}:", flush=True)
    caps, d = case_capacity(
        case,
        out,
        budget=budget,
        duel_repeats=case.capacity.duel_repeats,
        price_per_hour_usd=price,
        only=tuple(args.only),
    )
    rows = capacity_rows(caps)
    for r in rows:
        cost = r["cost_per_1k_ok_usd"]
        cost_text = f"${cost:.4f}" if cost is not None else "none (no rate met the SLO)"
        print(f"  {r['strategy']}: {r['message']}; cost per 1000 ok at capacity {cost_text}")
    print(f"Decision by capacity: {d.decision}: {d.message}")
    return {
        "chosen": d.chosen,
        "decision": d.decision,
        "message": d.message,
        "tied": list(d.tied),
        "capacity": rows,
        "duels": [x.sentence() for x in d.duels],
    }


if __name__ == "__main__":
    raise SystemExit(main())
