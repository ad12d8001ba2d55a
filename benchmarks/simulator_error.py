"""How wrong is the fitted serving simulator on probes it was not fitted on? (issue 18)

On the hf engine (configs/systems/hf-tiny.yaml, the interactive workload, an SLO sized to it): one capacity
search at the fit configuration (static batching, max_batch_size 4, 5 ms window) gives the fit probes; capacity
searches at held-back knob values (max_batch_size 2 without a window, and 1), started at other rates (3 x 2^k vs
4.2 x 2^k never coincide) and interleaved with the fit's probe by probe (the box's load drifts), are predicted:
every probe's p50/p99 TTFT, TPOT, E2E and throughput, and each search's capacity under the SLO (the search's
own policy on simulated probes, `inferopt.simulate.calibrate`). Errors are |predicted - measured| / measured;
median and p99 over the held-back probes; a held-back rate equal to a fit rate is listed (`rates_overlap`).
Prompts are capped at 128 tokens, outputs at 32, the SLO is TTFT p99 1.5 s / TPOT p95 60 ms / E2E p99 3 s.
`--engines hf,vllm` adds vLLM-CPU (vllm-tiny.yaml: fit at max_num_seqs 16, held back at 4; span phases).
`--repeat` measures every held-back probe twice (same rate, requests and seed): `repeat_median_rel_err`, the
machine's own error on the same metrics, is the floor under the model's. Cost: ~6-10 min per engine on a quiet
2-core box (+4-5 with --repeat); `--reuse` recalibrates on the probes a run left in `--out`. Last line: one JSON
object {"engines", "median_rel_err", "p99_rel_err", "capacity_rel_err", "probes_fit", "probes_held_back",
"usable", "median_signed_err", "repeat_median_rel_err", ...}. Usage:

    flock /tmp/inferopt-bench.lock nice -n 5 .venv/bin/python benchmarks/simulator_error.py [--engines hf,vllm]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402

from inferopt.config import SLOConfig  # noqa: E402
from inferopt.config.loader import load_config  # noqa: E402
from inferopt.config.systems import BatchingKnobs  # noqa: E402
from inferopt.measure.runner import RunTags  # noqa: E402
from inferopt.measure.session import run_system  # noqa: E402
from inferopt.measure.slo import RequestSLO  # noqa: E402
from inferopt.report import plots  # noqa: E402
from inferopt.simulate.calibrate import calibrate, measured_probes, rel_err  # noqa: E402
from inferopt.simulate.observe import fitter_for  # noqa: E402
from inferopt.simulate.plan import replica_plan  # noqa: E402
from inferopt.validate.capacity import (  # noqa: E402
    CapacityBudget,
    CapacityResult,
    Probe,
    conclude,
    next_probe,
    probe_requests,
    probe_table,
    probe_workload,
    summarize_probe,
    sustained_req_per_s,
    workload_rate_per_s,
)

# per engine: (system file, fit configuration, held-back configurations); a configuration is (label, the
# system fields it sets, the capacity search's start rate)
ENGINES = {
    "hf": (
        "configs/systems/hf-tiny.yaml",
        ("max_batch_size=4,wait=5ms", {"batching": BatchingKnobs(max_batch_size=4, batch_wait_ms=5.0)}, 3.0),
        (
            ("max_batch_size=2,wait=0", {"batching": BatchingKnobs(max_batch_size=2, batch_wait_ms=0.0)}, 4.2),
            ("max_batch_size=1", {"batching": BatchingKnobs(max_batch_size=1, batch_wait_ms=0.0)}, 4.2),
        ),
    ),
    "vllm": (
        "configs/systems/vllm-tiny.yaml",
        ("max_num_seqs=16", {"max_num_seqs": 16}, 3.0),
        (("max_num_seqs=4", {"max_num_seqs": 4}, 4.2),),
    ),
}


def _rows_of(path: Path) -> list[Probe]:
    """The probes `_probe` appended to `path` (a probes.jsonl; none when it does not exist)."""
    names = {f.name for f in dataclasses.fields(Probe)} - {"reasons", "records_path"}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
    return [
        Probe(
            **{k: v for k, v in r.items() if k in names},
            reasons=tuple(r["reasons"].split("; ")),
            records_path=str(path.parent / f"probe-{int(r['index']):02d}" / "requests.jsonl"),
        )
        for r in rows
    ]


def _reused(out: Path, budget: CapacityBudget, slo: SLOConfig) -> CapacityResult | None:
    """The capacity search an earlier run of this script left in `out` (None: there is none)."""
    probes = _rows_of(out / "probes.jsonl")
    return conclude(probes, (), budget, slo) if probes else None


def _probe(system, workload, slo, budget, out: Path, where, earlier) -> Probe:
    """One capacity probe, as `inferopt.validate.capacity.capacity` runs it (records in `probe-NN/`)."""
    index, phase, rate = where
    n = probe_requests(budget, rate, workload.num_requests)
    wl = probe_workload(workload, rate, workload_rate_per_s(workload), n, workload.seed)
    path = out / f"probe-{index:02d}" / "requests.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    tags = RunTags(run_tag="simulator-error", arm=system.name, trial=index, scenario=f"capacity-{index:02d}")
    run = run_system(
        system, probe_table(wl, rate), tags, timeout_s=wl.timeout_s, records_path=path, prompt_seed=wl.seed
    )
    below = [p for p in earlier if p.offered_req_per_s < rate and p.failed_at is None]
    prev = max(below, key=lambda p: p.offered_req_per_s) if below else None
    req_slo, sustained = RequestSLO.of(wl, slo), sustained_req_per_s(earlier)
    probe = summarize_probe(run, (index, phase, rate, str(path)), slo, budget, prev, req_slo, None, sustained)
    with (out / "probes.jsonl").open("a") as fh:
        fh.write(json.dumps(probe.row(), default=str) + "\n")
    return probe


def interleaved_searches(configs, workload, slo, reuse: bool) -> dict[str, CapacityResult]:
    """The capacity searches of every configuration, one probe of each in turn (the search's own policy,
    `next_probe`): on a shared machine whose load drifts, fit and held-back probes then see the same drift
    instead of the fit's minutes being busier (or calmer) than the held-back ones'."""
    done = {label: r for label, (_, budget, out, _) in configs.items() if reuse and (r := _reused(out, budget, slo))}
    probes: dict[str, list[Probe]] = {label: [] for label in configs if label not in done}
    while probes:
        for label in list(probes):
            system, budget, out, start = configs[label]
            nxt = next_probe(probes[label], start, budget)
            if nxt is None or any(p.failed_at == "start" for p in probes[label]):
                done[label] = conclude(probes.pop(label), (), budget, slo)
                continue
            rate, phase = nxt
            out.mkdir(parents=True, exist_ok=True)
            where = (len(probes[label]), phase, rate)
            probes[label].append(_probe(system, workload, slo, budget, out, where, probes[label]))
    return done


def repeated_probes(configs, results, workload, slo, reuse: bool) -> dict[str, list[tuple[Probe, Probe]]]:
    """Each held-back search's probes run once more after the searches (minutes later), same rate, requests and
    seed, the configurations taken in turn: (first, repeat) pairs. Their difference is this machine's own
    run-to-run error, the floor under the simulator's (`--reuse`: the repeats a run left in `out/repeat`)."""
    pairs: dict[str, list[tuple[Probe, Probe]]] = {}
    todo = {label: [p for p in results[label].probes if p.failed_at is None] for label in configs}
    kept = {
        label: {round(p.offered_req_per_s, 6): p for p in _rows_of(out / "repeat" / "probes.jsonl")} if reuse else {}
        for label, (_, _, out, _) in configs.items()
    }
    for k in range(max(map(len, todo.values()), default=0)):
        for label, probes in todo.items():
            if k >= len(probes):
                continue
            system, budget, out, _ = configs[label]
            first = probes[k]
            again = kept[label].get(round(first.offered_req_per_s, 6)) or _probe(
                system, workload, slo, budget, out / "repeat", (k, first.phase, first.offered_req_per_s), probes[:k]
            )
            pairs.setdefault(label, []).append((first, again))
    return pairs


def repeat_rel_err(pairs: dict[str, list[tuple[Probe, Probe]]], metrics: list[str]) -> dict[str, float | None]:
    """Per metric, the median over the repeated probes of |repeat - first| / first (as the simulator's error)."""
    errs = {m: [rel_err(getattr(b, m), getattr(a, m)) for ps in pairs.values() for a, b in ps] for m in metrics}
    return {m: _num(pd.Series(v, dtype=float).median()) if v else None for m, v in errs.items()}


def run_engine(engine: str, args, workload, slo, out: Path):
    path, fit, held_cfgs = ENGINES[engine]
    base = load_config(ROOT / path, kind="system")
    configs = {}
    for label, fields, start in (fit, *held_cfgs):
        system = base.model_copy(update={**fields, "name": f"{base.name}-{label}"})
        budget = CapacityBudget(
            start_req_per_s=start,
            max_probes=args.max_probes,
            rel_tol=0.1,
            requests_per_probe=args.requests,
            min_probe_s=args.min_probe_s or None,
            max_requests_per_probe=400,
        )
        configs[label] = (system, budget, out / engine / label.replace(",", "_").replace("=", "-"), start)
    results = interleaved_searches(configs, workload, slo, args.reuse)
    held_configs = {label: configs[label] for label, *_ in held_cfgs}
    pairs = repeated_probes(held_configs, results, workload, slo, args.reuse) if args.repeat else {}
    searches = {label: (configs[label][0], results[label], configs[label][1]) for label in configs}
    for label, (_, result, _) in searches.items():
        print(f"{engine} {label}: measured {result.message}", flush=True)
    fit_sys, fit_res, budget = searches[fit[0]]
    fit_on = measured_probes(fit[0], fit_sys, fit_res)
    held = [mp for label, *_ in held_cfgs for mp in measured_probes(label, *searches[label][:2])]
    cal = calibrate(
        fit_on,
        held,
        fitter_for(fit_sys),
        workload,
        slo,
        budget,
        capacities={label: searches[label][:2] for label, *_ in held_cfgs},
        bound=args.bound,
    )
    print(cal.table.to_string(max_rows=200, float_format=lambda v: f"{v:.4g}"))
    print(cal.capacity.to_string(float_format=lambda v: f"{v:.4g}"))
    print(json.dumps(cal.cost.summary(), default=float))
    fit_rates = {round(mp.probe.offered_req_per_s, 6) for mp in fit_on}
    overlap = sorted(r for mp in held if (r := round(mp.probe.offered_req_per_s, 6)) in fit_rates)
    print(f"{engine}: {cal.message}", flush=True)
    plan = replica_plan(cal.cost, fit_sys, workload, slo, budget, (1, 2, 4), calibration=cal)
    print(f"{engine}: PREDICTED capacity under the SLO by replica count (not measured):")
    print(plan[["kind", "replicas", "capacity_req_per_s", "per_replica_req_per_s", "status"]].to_string())
    return cal, overlap, pairs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engines", default="hf", help="comma-separated: hf, vllm (vllm: under the vLLM lock too)")
    ap.add_argument("--requests", type=int, default=30, help="requests per probe")
    ap.add_argument(
        "--max-probes",
        type=int,
        default=8,  # with 5 the measured brackets stayed 25-100 % wide: too coarse to check a 15 % capacity error
        help="probes per capacity search",
    )
    ap.add_argument(
        "--min-probe-s",
        type=float,
        default=10.0,
        help="each probe's arrivals span at least this long (0: a fixed count; with 30 requests vLLM's 16 "
        "sequences absorbed a 'rate' of 384 req/s, a 0.08 s burst, and near capacity the few requests still "
        "queued when the arrivals end decided the verdict)",
    )
    ap.add_argument("--bound", type=float, default=0.15, help="the held-back error above which it is unusable")
    ap.add_argument("--out", default="", help="keep the probes and the plot here (default: a temp dir)")
    ap.add_argument("--reuse", action="store_true", help="recalibrate on the probes an earlier run left in --out")
    ap.add_argument(
        "--repeat", action="store_true", help="measure every held-back probe twice: the machine's own error, as a floor"
    )
    args = ap.parse_args()
    workload = load_config(
        ROOT / "configs/workloads/interactive.yaml",
        kind="workload",
        **{"lengths.input_max": 128, "lengths.output_max": 32},
    )
    slo = SLOConfig(name="sim-bench", ttft_p99_ms=1500, tpot_p95_ms=60, e2e_p99_ms=3000)
    out = Path(args.out or tempfile.mkdtemp(prefix="simulator-error-"))
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    cals, overlap, pairs = {}, [], {}
    for engine in engines:
        cals[engine], ov, ps = run_engine(engine, args, workload, slo, out)
        overlap += ov
        pairs.update({f"{engine} {label}": p for label, p in ps.items()})
    table = pd.concat([c.table.assign(engine=e) for e, c in cals.items()], ignore_index=True)
    plots.sim_error(table, args.bound).savefig(out / "simulator_error.png", dpi=110)
    print(f"plot: {out / 'simulator_error.png'}")
    held, fitted = table[table["split"] == "held_back"], table[table["split"] == "fit"]
    metrics = list(dict.fromkeys(held["metric"]))
    caps = pd.concat([c.capacity for c in cals.values()], ignore_index=True)
    line = {
        "engines": engines,
        "median_rel_err": {m: _num(held.loc[held["metric"] == m, "rel_err"].median()) for m in metrics},
        "p99_rel_err": {m: _num(held.loc[held["metric"] == m, "rel_err"].quantile(0.99)) for m in metrics},
        # (predicted - measured) / measured, median: near 0 with a large median_rel_err is scatter, not bias
        "median_signed_err": {m: _num(signed_err(held[held["metric"] == m]).median()) for m in metrics},
        "capacity_rel_err": _num(caps["rel_err"].median()) if len(caps) else None,
        # the same errors on the probes it was fitted on: a floor set by run-to-run noise, not by the model
        "fit_median_rel_err": {m: _num(fitted.loc[fitted["metric"] == m, "rel_err"].median()) for m in metrics},
        # --repeat: the held-back probes measured twice, |second - first| / first: the machine's own error
        "repeat_median_rel_err": repeat_rel_err(pairs, metrics) if pairs else None,
        "probes_repeated": sum(map(len, pairs.values())),
        "probes_fit": sum(c.probes_fit for c in cals.values()),
        "probes_held_back": sum(c.probes_held_back for c in cals.values()),
        "usable": {e: c.usable for e, c in cals.items()},
        "bound": args.bound,
        "rates_overlap": overlap,
    }
    print(json.dumps(line))


def signed_err(rows: pd.DataFrame) -> pd.Series:
    """(predicted - measured) / measured per row (NaN where nothing was measured)."""
    return (rows["predicted"] - rows["measured"]) / rows["measured"].where(rows["measured"] != 0)


def _num(v: float) -> float | None:
    return round(float(v), 4) if math.isfinite(v) else None


if __name__ == "__main__":
    main()
