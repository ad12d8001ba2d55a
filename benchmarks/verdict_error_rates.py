"""How often does the ablation verdict engine cry wolf, and how often does it miss? (issue 5, SPEC A1)

A verdict engine is worth its false-alarm and miss rates, so this script measures them on the scripted fake
engine with realistic noise. Each simulated ablation is one call of the real pipeline,
`inferopt.ablate.run.ablate`: plan the arms, run interleaved trials through `run_system` on a fresh
FakeEngine per trial, the pipeline's test per metric (default: paired t-test over repeats), the target metric
first and the five others only if it moved (gatekeeping, Holm in each family), per-arm verdicts. Its arms:

- A  = `baseline`: the fake system below, noise `jitter_cv` (lognormal on every delay);
- A' = `aa`: the same system again (the pipeline's A/A arm);
- B  = `candidate`: `decode_step_ms` x 1.1 — a planted 10 % TPOT regression (the system's decode step is all
  decode work: `decode_ms_per_seq` = 0, and the step is long enough that the event loop's own overhead
  dilutes the 10 % only a little; the realised TPOT p50 ratio is printed).

Every trial gets its own noise stream (`fresh_fake_noise`): the fake engine seeds its noise from
`system.seed`, and without this every trial — and A' against A — would replay the same noise.
Each simulated ablation has its own system seed and its own ablation seed (trial order, bootstrap).

Designs: `--design fixed` (default; one look after `--repeats` = 6 at alpha = 0.05: the cleanest check of the
false-alarm rate at the nominal level) or `--design sequential` (looks after repeats 3..8 at alpha / 6 each).
`--test two_level_bootstrap` measures the previous statistics on the same design.

Counted, at the run's final look and its alpha (alpha / number of planned looks):
- A/A false positive: the A/A arm shows *any* of the six metrics significant (after Holm). This is stricter
  than its verdict, which only reads the target metric; the verdict-based rate is printed too;
- detection: B's verdict is `regresses` (target metric: TPOT p50).

Targets (issue 5): false-positive rate <= 5 % at alpha = 0.05; detection >= 90 %. The rates come with
Wilson 95 % intervals: with a few hundred simulated ablations a rate is known to about +-2-3 points.

Cost: a trial is ~0.4-0.6 s of mostly sleeping; simulations run in `--workers` processes. Defaults (120
simulations x 18 trials) take about 7-9 minutes on 2 cores. Usage:

    .venv/bin/python benchmarks/verdict_error_rates.py [--sims 120] [--workers 3] [--design fixed|sequential]

`--engine hf`: the same counts on the real hf engine (builtin tiny Llama, CPU, batch 1): arm B sets the
diagnostic knob `diagnostic_decode_delay_ms` (a sleep inside every decode step: real engine time, declared
`diagnostic: true`), sized to `--planted` x the baseline's TPOT p50 measured by one calibration trial; short
trials (`--requests`), one model load shared by every trial's fresh engine, ablations run one after another.
It also counts `harm_detection_rate`: the same trials judged with TPOT as a side effect (target TTFT p99), so
only the harm family (one-sided against the 5 % tolerance) can catch the planted regression, and, from the A/A
arm's measured spread, `repeats_for_90pct_detection`: the repeats a fixed design would need to catch the
planted change 90 % of the time (`stats.inference.repeats_needed`). `--design sequential` works here too.
Run it under the bench lock:
`flock /tmp/inferopt-bench.lock nice -n 5 .venv/bin/python benchmarks/verdict_error_rates.py --engine hf --sims 12`.
`--engine vllm`: the same on vLLM-CPU (`configs/systems/vllm-tiny.yaml`, a fresh `vllm serve` per trial as the
pipeline starts one; the delay is slept by vLLM's scheduler in every step that decodes, through our vLLM
plugin, `scripts/vllm_plugin`); add the vLLM lock: `flock /tmp/inferopt-vllm.lock`.

The last line printed is one JSON object:
{"engine": ..., "aa_false_positive_rate": ..., "planted_detection_rate": ..., "harm_detection_rate": ...,
"trials": <simulated ablations>, "repeats": ...}.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PLANTED = 1.10  # decode_step_ms multiplier of arm B
TARGET = "tpot_ms_p50"


def candidate_dict(args: argparse.Namespace) -> dict:
    """The candidate (as a dict; each simulation sets its seeds): fake-small workload, a fake system whose
    decode step dominates TPOT, the A/A arm on, sequential design."""
    from inferopt.config import load_config

    base = load_config(ROOT / "configs/candidates/fake-batching.yaml")
    d = base.model_dump()
    d["name"] = "verdict-error-rates"
    d["baseline"].update(
        name="fake-decode",
        decode_step_ms=args.decode_step_ms,
        decode_ms_per_seq=0.0,
        jitter_cv=args.jitter_cv,
        batching={"policy": "static", "max_batch_size": 8, "batch_wait_ms": 2.0, "max_queue": None},
    )
    d["workload"]["arrival"] = {"kind": "poisson", "rate_per_s": args.rate}
    d["changes"] = {"decode_step_ms": round(args.decode_step_ms * PLANTED, 6)}
    d["target_metrics"] = [TARGET]
    if args.design == "fixed":
        d["ablation"].update(
            aa_arm=True,
            repeats=args.repeats,
            min_repeats=None,
            max_repeats=None,
            bootstrap_samples=args.bootstrap,
            alpha=args.alpha,
            test=args.test,
        )
    else:
        d["ablation"].update(
            aa_arm=True,
            repeats=args.min_repeats,
            min_repeats=args.min_repeats,
            max_repeats=args.max_repeats,
            bootstrap_samples=args.bootstrap,
            alpha=args.alpha,
            test=args.test,
        )
    return d


def one_ablation(d: dict, i: int, seeded: tuple[str, int], run_tag: str, **kw):
    """The real `ablate` on candidate dict `d` with simulation i's seeds (the ablation's, and `seeded`: the
    section whose seed varies per simulation and its value); returns (candidate, result)."""
    from inferopt.ablate.run import ablate
    from inferopt.config import CandidateConfig

    d = json.loads(json.dumps(d))
    d[seeded[0]]["seed"] = seeded[1]
    d["ablation"]["seed"] = i
    cand = CandidateConfig.model_validate(d)
    with tempfile.TemporaryDirectory() as tmp:
        return cand, ablate(cand, tmp, run_tag=run_tag, **kw)


def _parts(res):
    """(effects by arm and metric, the A/A arm's rows, the trials that ran)."""
    return (
        res.effects.set_index(["arm", "metric"]),
        res.effects[res.effects["arm"] == "aa"],
        res.trials[~res.trials["failed"]],
    )


def _decided(res, eff, aa) -> dict:
    """What one ablation decided about the A/A arm and arm B."""
    return {
        "aa_any_significant": bool(aa["significant"].any()),
        "aa_significant_metrics": aa.loc[aa["significant"], "metric"].tolist(),
        "aa_verdict": res.verdicts["aa"].verdict,
        "b_verdict": res.verdicts["candidate"].verdict,
        "b_ratio": float(eff.loc[("candidate", TARGET), "ratio"]),
        "b_p": float(eff.loc[("candidate", TARGET), "p_value"]),
    }


def simulate(job: tuple[dict, int]) -> dict:
    """One simulated ablation: the real `ablate` on A, A' and B; returns what it decided."""
    d, i = job
    import numpy as np

    from inferopt.ablate.compare import METRICS_BY_NAME, arm_trial_values
    from inferopt.ablate.run import fresh_fake_noise

    _, res = one_ablation(d, i, ("baseline", 10_000 + i), f"sim-{i}", system_for_trial=fresh_fake_noise)
    eff, aa, ok = _parts(res)
    spec = METRICS_BY_NAME[TARGET]
    per_trial = {a: [float(np.median(v)) for v in arm_trial_values(ok, a, spec)] for a in ("baseline", "candidate")}
    return {
        "sim": i,
        **_decided(res, eff, aa),
        "repeats": res.stopping["repeats_done"],
        "stopped_early": res.stopping["stopped_early"],
        "alpha_used": res.stopping["alpha_used"],
        "failed_trials": int(res.trials["failed"].sum()),
        "trial_ratio": float(np.mean(per_trial["candidate"]) / np.mean(per_trial["baseline"])),
    }


REAL_BASELINES = {"hf": "configs/systems/hf-tiny.yaml", "vllm": "configs/systems/vllm-tiny.yaml"}


def hf_candidate_dict(args: argparse.Namespace, delay_ms: float) -> dict:
    """The real-engine candidate: the default run's workload shape on `args.engine`'s tiny baseline (hf-tiny,
    batch 1; vllm-tiny, continuous batching), short trials, arm B the planted diagnostic decode delay, target
    TPOT p50, the A/A arm on, the fixed design at --repeats (or --design sequential: looks from --min-repeats
    to --max-repeats, the pipeline's sequential stopping)."""
    from inferopt.config import load_config

    d = load_config(ROOT / "configs/candidates/batching.yaml").model_dump()
    d["baseline"] = load_config(ROOT / REAL_BASELINES[args.engine], kind="system").model_dump()
    d.update(name=f"verdict-error-rates-{args.engine}", diagnostic=True, target_metrics=[TARGET])
    d["changes"] = {"diagnostic_decode_delay_ms": round(delay_ms, 4)}
    d["workload"].update(num_requests=args.requests, arrival={"kind": "poisson", "rate_per_s": args.rate})
    d["workload"]["lengths"].update(output_median=args.output_median, output_min=4)
    sequential = args.design == "sequential"
    d["ablation"].update(
        aa_arm=True,
        repeats=args.min_repeats if sequential else args.repeats,
        min_repeats=args.min_repeats if sequential else None,
        max_repeats=args.max_repeats if sequential else None,
        alpha=args.alpha,
        test="repeat_t",
    )
    return d


def shared_model_factory(engine: str = "hf"):
    """An engine factory: a fresh HFEngine per trial (as the pipeline starts one), the weights loaded once.
    vLLM: the pipeline's own (a fresh `vllm serve` per trial)."""
    from inferopt.engines import make_engine
    from inferopt.engines.hf.engine import HFEngine
    from inferopt.model.loading import load_system_model

    if engine != "hf":
        return make_engine
    models: dict = {}

    def factory(system):
        key = (system.model.path, system.dtype, system.attn_implementation, system.device)
        if key not in models:
            models[key] = load_system_model(system)
        return HFEngine(system, preloaded=models[key])

    return factory


def calibrate_tpot_ms(args: argparse.Namespace, factory) -> float:
    """The baseline's TPOT p50 (ms) on this machine now: one trial of the hf baseline, nothing planted."""
    import numpy as np

    from inferopt.config import CandidateConfig
    from inferopt.measure.runner import RunTags
    from inferopt.measure.session import run_system
    from inferopt.workload.build import build_workload

    cand = CandidateConfig.model_validate(hf_candidate_dict(args, 1.0))  # only its baseline runs here
    table = build_workload(cand.workload, None)
    run = run_system(
        cand.baseline,
        table,
        RunTags("calibrate", "baseline", 0, "ablation"),
        timeout_s=cand.workload.timeout_s,
        warmup_requests=cand.measure.warmup_requests,
        engine_factory=factory,
    )
    tpot = run.phases["tpot_ms"].dropna().to_numpy(float) if "tpot_ms" in run.phases else []
    if not len(tpot):
        why = f"calibration trial produced no TPOT (failed: {run.error})"
        raise SystemExit(f"{why}; fix: check the {args.engine} engine")
    return float(np.median(tpot))


def simulate_hf(d: dict, i: int, factory, engine: str = "hf") -> dict:
    """One ablation on the hf engine through the real `ablate`; also the same trials judged with TPOT as a
    side effect (target TTFT p99), where only the harm family can flag the planted regression."""
    from inferopt.ablate.compare import compare_arms
    from inferopt.measure.slo import RequestSLO

    cand, res = one_ablation(d, i, ("workload", 1000 + i), f"{engine}-sim-{i}", engine_factory=factory)
    eff, aa, ok = _parts(res)
    s = cand.ablation
    side = compare_arms(
        ok,
        "baseline",
        "candidate",
        alpha=s.alpha,
        targets=("ttft_ms_p99",),
        primary_harm=s.primary_harm,
        context=RequestSLO.of(cand.workload, cand.slo),
    ).set_index("metric")
    return {
        "sim": i,
        **_decided(res, eff, aa),
        "b_se_d": float(eff.loc[("candidate", TARGET), "se_d"]),
        "aa_se_d": float(eff.loc[("aa", TARGET), "se_d"]),
        "harm_caught": bool(side.loc[TARGET, "harm"]),
        "harm_p": float(side.loc[TARGET, "harm_p"]),
        "repeats": res.stopping["repeats_done"],
        "failed_trials": int(res.trials["failed"].sum()),
    }


def main_hf(args: argparse.Namespace) -> int:
    t0 = time.time()
    factory = shared_model_factory(args.engine)
    tpot_ms = calibrate_tpot_ms(args, factory)
    delay_ms = (args.planted - 1.0) * tpot_ms
    d = hf_candidate_dict(args, delay_ms)
    print(
        f"[error-rates] {args.engine}: baseline TPOT p50 {tpot_ms:.2f} ms -> diagnostic_decode_delay_ms {delay_ms:.3f} "
        f"(x{args.planted}); {args.sims} ablations x (baseline, aa, candidate) x {args.repeats} repeats of "
        f"{args.requests} requests at {args.rate}/s; alpha {args.alpha}",
        flush=True,
    )
    results = []
    sink = args.out.open("w") if args.out else None
    for i in range(args.seed_offset, args.seed_offset + args.sims):
        r = simulate_hf(d, i, factory, args.engine)
        results.append(r)
        if sink:
            sink.write(json.dumps(r) + "\n")
            sink.flush()
        print(f"[error-rates] {len(results)}/{args.sims} ({time.time() - t0:.0f} s): {json.dumps(r)}", flush=True)
        if time.time() - t0 > args.budget_s:
            print(f"[error-rates] stopping: the {args.budget_s:.0f} s budget is spent", flush=True)
            break
    if sink:
        sink.close()
    return report(args, results, t0, engine=args.engine, extra={"calibrated_tpot_ms": tpot_ms, "delay_ms": delay_ms})


def report(args: argparse.Namespace, results: list[dict], t0: float, engine: str, extra: dict) -> int:
    import numpy as np

    from inferopt.stats.inference import repeats_needed

    n = len(results)
    k_fp = sum(r["aa_any_significant"] for r in results)
    k_det = sum(r["b_verdict"] == "regresses" for r in results)
    k_harm = sum(r["harm_caught"] for r in results)
    done = [r.get("repeats", args.repeats) for r in results]
    sd = float(np.sqrt(np.mean([r["aa_se_d"] ** 2 * k for r, k in zip(results, done, strict=True)])))  # A/A arm
    planted_log = math.log(getattr(args, "planted", PLANTED))
    need = repeats_needed(sd / math.sqrt(2), 2, planted_log, args.alpha, power=0.9) if n and sd > 0 else None
    detail = {
        "engine": engine,
        "simulated_ablations": n,
        "aa_false_positive_ci95": wilson(k_fp, n),
        "aa_verdict_false_positive_rate": sum(r["aa_verdict"] != "no detectable change" for r in results) / n,
        "planted_detection_ci95": wilson(k_det, n),
        "harm_detection_ci95": wilson(k_harm, n),
        "realised_tpot_p50_ratio_mean": sum(r["b_ratio"] for r in results) / n,
        "tpot_p50_log_sd_per_pair": sd,
        "design": args.design,
        "repeats_done_mean": float(np.mean(done)) if n else math.nan,
        "repeats_for_90pct_detection": need,  # at this sd, a two-sided paired t-test at alpha (the target's)
        "failed_trials": sum(r["failed_trials"] for r in results),
        "wall_s": round(time.time() - t0, 1),
        **extra,
    }
    print(json.dumps(detail))
    summary = {
        "engine": engine,
        "aa_false_positive_rate": round(k_fp / n, 4),
        "planted_detection_rate": round(k_det / n, 4),
        "harm_detection_rate": round(k_harm / n, 4),
        "trials": n,
        "repeats": args.repeats if args.design == "fixed" else f"{args.min_repeats}..{args.max_repeats}",
    }
    print(json.dumps(summary))
    return 0


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sims", type=int, default=120, help="simulated ablations (each: A vs A' and A vs B)")
    ap.add_argument("--workers", type=int, default=3, help="processes (trials mostly sleep: > cores is fine)")
    ap.add_argument("--jitter-cv", type=float, default=0.15, help="lognormal noise on every fake delay")
    ap.add_argument("--decode-step-ms", type=float, default=3.0)
    ap.add_argument("--rate", type=float, default=120.0, help="arrivals per second (fake-small: 40 requests)")
    ap.add_argument(
        "--design",
        choices=["fixed", "sequential"],
        default="fixed",
        help="fixed: one look after --repeats at alpha (the pipeline's default design); sequential: "
        "looks from --min-repeats to --max-repeats at alpha / looks each",
    )
    ap.add_argument("--repeats", type=int, default=6, help="fixed design: trials per arm")
    ap.add_argument("--min-repeats", type=int, default=3)
    ap.add_argument("--max-repeats", type=int, default=8)
    ap.add_argument("--test", choices=["repeat_t", "two_level_bootstrap"], default="repeat_t")
    ap.add_argument("--bootstrap", type=int, default=2000, help="resamples for --test two_level_bootstrap")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--seed-offset", type=int, default=0, help="first simulation index (fresh seeds)")
    ap.add_argument("--out", type=Path, default=None, help="also write one JSON line per simulation here")
    ap.add_argument(
        "--engine",
        choices=["fake", "hf", "vllm"],
        default="fake",
        help="hf: the real in-process engine; vllm: vLLM-CPU (a server per trial; run under the vLLM lock)",
    )
    ap.add_argument("--planted", type=float, default=1.10, help="hf: the planted TPOT ratio of arm B")
    ap.add_argument("--requests", type=int, default=10, help="hf: requests per trial")
    ap.add_argument("--output-median", type=int, default=8, help="hf: median output tokens (min 4)")
    ap.add_argument("--budget-s", type=float, default=420.0, help="hf: stop starting ablations after this")
    args = ap.parse_args(argv)
    if args.engine in ("hf", "vllm"):
        if "--rate" not in (argv if argv is not None else sys.argv):
            args.rate = 4.0  # batch 1 queues a little at 4 req/s; TPOT (decode only) is the decode step either way
        if "--repeats" not in (argv if argv is not None else sys.argv):
            args.repeats = 3  # the candidates' default
        return main_hf(args)

    d = candidate_dict(args)
    from inferopt.config import CandidateConfig

    cand = CandidateConfig.model_validate(d)
    print(
        f"[error-rates] {args.sims} simulated ablations x arms (baseline, aa, candidate); jitter_cv "
        f"{args.jitter_cv}; decode_step_ms {args.decode_step_ms} -> x{PLANTED}; target {TARGET}; looks after "
        f"repeats {list(cand.ablation.look_repeats)} at alpha {cand.ablation.alpha_per_look:.4g} each "
        f"(Bonferroni over looks; target first, then the other 5 metrics: Holm in each); test {args.test}; "
        f"{args.workers} workers",
        flush=True,
    )
    t0 = time.time()
    results = []
    jobs = [(d, args.seed_offset + i) for i in range(args.sims)]
    sink = args.out.open("w") if args.out else None
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for r in pool.map(simulate, jobs):
            results.append(r)
            if sink:
                sink.write(json.dumps(r) + "\n")
                sink.flush()
            if len(results) % 10 == 0:
                fp = sum(x["aa_any_significant"] for x in results) / len(results)
                det = sum(x["b_verdict"] == "regresses" for x in results) / len(results)
                print(
                    f"[error-rates] {len(results)}/{args.sims}: A/A false positives {fp:.3f}, detection {det:.3f} "
                    f"({time.time() - t0:.0f} s)",
                    flush=True,
                )
    if sink:
        sink.close()

    n = len(results)
    k_fp = sum(r["aa_any_significant"] for r in results)
    k_fp_verdict = sum(r["aa_verdict"] != "no detectable change" for r in results)
    k_det = sum(r["b_verdict"] == "regresses" for r in results)
    k_wrong = sum(r["b_verdict"] == "improves" for r in results)
    detail = {
        "simulated_ablations": n,
        "aa_false_positive_rate": k_fp / n,
        "aa_false_positive_ci95": wilson(k_fp, n),
        "aa_verdict_false_positive_rate": k_fp_verdict / n,
        "planted_detection_rate": k_det / n,
        "planted_detection_ci95": wilson(k_det, n),
        "planted_wrong_direction_rate": k_wrong / n,
        "realised_tpot_p50_ratio_mean": sum(r["b_ratio"] for r in results) / n,
        "mean_repeats": sum(r["repeats"] for r in results) / n,
        "stopped_early_rate": sum(r["stopped_early"] for r in results) / n,
        "design": args.design,
        "test": args.test,
        "alpha": args.alpha,
        "alpha_per_look": cand.ablation.alpha_per_look,
        "looks": list(cand.ablation.look_repeats),
        "jitter_cv": args.jitter_cv,
        "failed_trials": sum(r["failed_trials"] for r in results),
        "wall_s": round(time.time() - t0, 1),
    }
    print(json.dumps(detail))
    print(
        json.dumps(
            {"aa_false_positive_rate": round(k_fp / n, 4), "planted_detection_rate": round(k_det / n, 4), "trials": n}
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
