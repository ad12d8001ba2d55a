"""Prefix caching on the embedded default engine (hf): the cache-hit slices and the prefill saving it shows.

Runs `configs/candidates/hf-prefix-cache.yaml`'s baseline (cache off) and candidate (`enable_prefix_caching`)
on its prefix-heavy workload (`--requests` of it, the workload's own seed and arrivals) through the measure step
(`measure_system`: warm-ups, then the cache emptied, then the measured load), and a third arm that keeps the
warm-ups' blocks (`prefix_cache_reset_after_warmup: false`) to show the warm_cache lint refusing it. Arms
alternate order over `--repeats` (ABBA); medians pool the repeats.

Reported: per arm prefill / TTFT p50 over ok requests; in the cache-on arm the same per cache_hit slice (hit /
miss) and the hit shares seen two ways (the engine's own token counters, and the records' `cached_tokens`), which
must agree; the lint's warm_cache checks per arm.

The LAST stdout line is one JSON object: {"requests", "cache_hit_request_share", "cached_token_share",
"engine_cache_hit_rate", "counters_match_records", "prefill_ms_p50_off", "prefill_ms_p50_on",
"prefill_ms_p50_on_hit", "prefill_ms_p50_on_miss", "prefill_ms_p50_off_same_requests_as_hits",
"ttft_ms_p50_off", "ttft_ms_p50_on", "slice_values_off", "warm_cache_lint_cold", "warm_cache_lint_kept_warm"}.

Usage: python benchmarks/hf_prefix_cache.py [--requests 24] [--repeats 1]
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

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from inferopt.config import load_config  # noqa: E402
from inferopt.measure.step import measure_system  # noqa: E402
from inferopt.verdict.lint.postrun import RunEvidence, check_warm_cache  # noqa: E402

CANDIDATE = ROOT / "configs" / "candidates" / "hf-prefix-cache.yaml"


def _p50(values: pd.Series) -> float:
    vals = pd.to_numeric(values).dropna().to_numpy(float)
    return float(np.median(vals)) if len(vals) else float("nan")


def _run(system, cfg, workload, out: Path) -> dict:
    res = measure_system(system, workload, cfg.slo, out, warmup_requests=cfg.measure.warmup_requests)
    lint = check_warm_cache([RunEvidence("measure", "measure", res.run, sent=len(res.workload))], 2)
    return {"phases": res.phases, "headline": res.headline, "lint": sorted(f.evidence["check"] for f in lint)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    cfg = load_config(CANDIDATE)
    workload = cfg.workload.model_copy(update={"num_requests": args.requests})
    on = cfg.candidate_system
    arms = {
        "off": cfg.baseline,
        "on": on,
        "kept_warm": on.model_copy(update={"prefix_cache_reset_after_warmup": False}),
    }
    runs: dict[str, list[dict]] = {k: [] for k in arms}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeats):
            order = list(arms) if rep % 2 == 0 else list(reversed(arms))
            for name in order:
                runs[name].append(_run(arms[name], cfg, workload, Path(tmp) / f"{name}-{rep}"))
                ph = runs[name][-1]["phases"]
                ok = ph[ph["outcome"] == "ok"]
                print(
                    f"repeat {rep} {name:9s}: ok {len(ok)}/{len(ph)}, prefill p50 {_p50(ok['prefill_ms']):.2f} ms, "
                    f"ttft p50 {_p50(ok['ttft_ms']):.2f} ms, cached tokens {int(ok['cached_tokens'].sum())}, "
                    f"lint {runs[name][-1]['lint']}"
                )
    pooled = {k: pd.concat([r["phases"] for r in v]) for k, v in runs.items()}
    ok = {k: v[v["outcome"] == "ok"] for k, v in pooled.items()}
    hits = ok["on"][ok["on"]["cache_hit"] == "hit"]
    misses = ok["on"][ok["on"]["cache_hit"] == "miss"]
    heads = [r["headline"] for r in runs["on"]]
    engine_rate = float(np.mean([h.get("engine_cache_hit_rate", float("nan")) for h in heads]))
    token_share = float(np.mean([h.get("cached_token_share", float("nan")) for h in heads]))
    print(
        f"cache-on slices: hit n={len(hits)} prefill p50 {_p50(hits['prefill_ms']):.2f} ms; "
        f"miss n={len(misses)} prefill p50 {_p50(misses['prefill_ms']):.2f} ms"
    )
    out = {
        "requests": int(len(pooled["on"])),
        "cache_hit_request_share": float(np.mean([h.get("cache_hit_request_share", float("nan")) for h in heads])),
        "cached_token_share": token_share,
        "engine_cache_hit_rate": engine_rate,
        # the engine counts every ok and failed request's prompt; the records' share is over ok requests
        "counters_match_records": bool(all(ph["outcome"].eq("ok").all() for ph in pooled.values()))
        and abs(engine_rate - token_share) < 1e-9,
        "prefill_ms_p50_off": _p50(ok["off"]["prefill_ms"]),
        "prefill_ms_p50_on": _p50(ok["on"]["prefill_ms"]),
        "prefill_ms_p50_on_hit": _p50(hits["prefill_ms"]),
        "prefill_ms_p50_on_miss": _p50(misses["prefill_ms"]),
        # the same requests with the cache off (paired by request id): what the hits saved
        "prefill_ms_p50_off_same_requests_as_hits": _p50(
            ok["off"][ok["off"]["request_id"].isin(set(hits["request_id"]))]["prefill_ms"]
        ),
        "ttft_ms_p50_off": _p50(ok["off"]["ttft_ms"]),
        "ttft_ms_p50_on": _p50(ok["on"]["ttft_ms"]),
        "slice_values_off": sorted(set(pooled["off"]["cache_hit"])),
        "warm_cache_lint_cold": sorted({c for r in runs["on"] for c in r["lint"]}),
        "warm_cache_lint_kept_warm": sorted({c for r in runs["kept_warm"] for c in r["lint"]}),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
