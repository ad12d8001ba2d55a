"""Does the capacity search find a planted capacity? (issue 14)

Each case is the scripted fake engine with a known service rate: batch size 1, no jitter, fixed lengths
(16-token prompts, 2-token outputs), evenly spaced arrivals — a D/D/1 queue, whose capacity under a
generous latency SLO is exactly 1 / service time, the service time read off the engine's knobs (context +
prefill + one decode step between consecutive tokens; here all of it in the decode step). The search
(`inferopt.validate.capacity.capacity`) starts at 0.6 x the planted capacity with 40-request probes and must
find it from saturation alone (the SLO's bounds are a minute). The realised capacity sits a few per cent
below the planted one: each asyncio sleep overshoots by up to ~1 ms (epoll rounds its timeout up to the
millisecond), more on a busy box; each case also prints the engine's realised rate (its best saturated
throughput) to tell that apart from the search.

Printed per case: planted vs found capacity, the bracket, the relative error, probes and why it stopped.
The last line is one JSON object: {"fake_rel_err": <max |found / planted - 1|>, "probes": <mean probes>}.
Cost: mostly sleeping, ~7 probes of 40 requests per case (about a minute for the defaults). Usage:

    .venv/bin/python benchmarks/capacity_accuracy.py [--services-ms 25,50,100] [--requests 40] [--rel-tol 0.05]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from inferopt.config import ConstantArrivals, FakeSystem, LengthConfig, SLOConfig, WorkloadConfig  # noqa: E402
from inferopt.config.systems import BatchingKnobs  # noqa: E402
from inferopt.validate.capacity import CapacityBudget, CapacityResult, capacity  # noqa: E402

INPUT_LEN, OUTPUT_LEN = 16, 2
GENEROUS = SLOConfig(ttft_p99_ms=60_000, tpot_p95_ms=60_000)


def service_ms(s: FakeSystem, input_len: int, output_len: int) -> float:
    """The fake engine's time per request at batch size 1 (inferopt/engines/fake.py)."""
    prefill_ms = s.prefill_base_ms + s.prefill_ms_per_token * input_len
    return s.context_ms + prefill_ms + (output_len - 1) * (s.decode_step_ms + s.decode_ms_per_seq)


def planted_system(total_ms: float) -> FakeSystem:
    """All of the service in the one decode step: one timed sleep a request, so the event loop's overshoot
    counts once (with a quarter in prefill, two sleeps, a 10 ms service realised ~13.5 ms on the busy box)."""
    return FakeSystem(
        context_ms=0.0,
        prefill_base_ms=0.0,
        prefill_ms_per_token=0.0,
        decode_step_ms=total_ms,
        decode_ms_per_seq=0.0,
        jitter_cv=0.0,
        batching=BatchingKnobs(max_batch_size=1, batch_wait_ms=0.0),
    )


def run_case(total_ms: float, requests: int, rel_tol: float, out_dir: Path) -> tuple[float, CapacityResult]:
    system = planted_system(total_ms)
    planted = 1000.0 / service_ms(system, INPUT_LEN, OUTPUT_LEN)
    lengths = LengthConfig(input_median=INPUT_LEN, input_sigma=0, output_median=OUTPUT_LEN, output_sigma=0)
    wl = WorkloadConfig(
        name=f"planted-{total_ms:g}ms",
        num_requests=requests,
        arrival=ConstantArrivals(rate_per_s=0.6 * planted),
        lengths=lengths,
    )
    return planted, capacity(system, wl, GENEROUS, out_dir, budget=CapacityBudget(max_probes=12, rel_tol=rel_tol))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--services-ms", default="25,50,100", help="planted service times per request, comma-separated")
    ap.add_argument("--requests", type=int, default=40, help="requests per probe")
    ap.add_argument("--rel-tol", type=float, default=0.05, help="the search's bracket tolerance")
    args = ap.parse_args()
    errors, probes = [], []
    with tempfile.TemporaryDirectory(prefix="capacity-accuracy-") as tmp:
        for total_ms in (float(x) for x in args.services_ms.split(",")):
            planted, r = run_case(total_ms, args.requests, args.rel_tol, Path(tmp) / f"{total_ms:g}")
            err = abs(r.req_per_s / planted - 1.0) if r.lo_req_per_s is not None else float("inf")
            realised = max((p.achieved_req_per_s for p in r.probes if p.saturated), default=float("nan"))
            errors.append(err)
            probes.append(len(r.probes))
            print(
                f"service {total_ms:g} ms: planted {planted:.2f} req/s, found {r.req_per_s:.2f} "
                f"[{r.lo_req_per_s:.4g}, {r.hi_req_per_s:.4g}] rel err {err:.1%} (the engine's realised rate, its "
                f"best saturated throughput: {realised:.2f}), {len(r.probes)} probes, {r.status}: {r.message}"
            )
    print(json.dumps({"fake_rel_err": round(max(errors), 4), "probes": round(sum(probes) / len(probes), 2)}))


if __name__ == "__main__":
    main()
