"""How wrong is the fitted serving simulator on probes it was not fitted on? (issue 18)

hf (configs/systems/hf-tiny.yaml, interactive workload, prompts <= 128 and outputs <= 32 tokens, SLO TTFT p99
1.5 s / TPOT p95 60 ms / E2E p99 3 s): fit on one capacity search (static batches of 4, 5 ms window); held back
are searches at batch 2 (no window) and 1, interleaved probe by probe. Then every configuration runs at
50/70/85 % of its measured capacity (`OPERATING_SHARES`, >= 200 requests): these operating points give
`median_rel_err`, |predicted - measured| / measured per p50/p99 TTFT, TPOT, E2E and throughput.
`capacity_rel_err`: each held-back search's capacity against the search's policy on simulated probes;
`search_median_rel_err`: the held-back searches' probes (at and past the knee). `--engines hf,vllm` adds
vLLM-CPU (fit at max_num_seqs 16, held back at 4). `--repeat` measures every operating point twice: the
machine's own error (`repeat_median_rel_err`) and the model's against the mean of both (`median_rel_err_vs_two`).
`--reuse` recalibrates on the probes a run left in `--out`. With --repeat: hf 19 min, vLLM 22 min. Last line:
one JSON object. Usage: flock /tmp/inferopt-bench.lock .venv/bin/python benchmarks/simulator_error.py [--engines
hf,vllm]
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
from inferopt.simulate.calibrate import (  # noqa: E402
    METRICS,
    MeasuredProbe,
    calibrate,
    error_table,
    judge,
    measured_probes,
    rel_err,
)
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
    slo_bounds_ms,
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


# Latency is judged at these shares of each configuration's own measured capacity (Vidur reports its fidelity at
# 85 %): below the knee, where a service is run. The capacity searches' probes bracket the knee and pass it; there
# a percent of service rate moves the queue by tens of percent and an overloaded probe's TTFT grows with its
# length, so they are judged by the capacity error (their latency errors: `search_median_rel_err`).
OPERATING_SHARES = (0.5, 0.7, 0.85)


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


def operating_probes(configs, results, workload, slo, budget: CapacityBudget, reuse: bool) -> dict[str, list[Probe]]:
    """Every configuration at OPERATING_SHARES of its own measured capacity, share by share with the
    configurations in turn (the box's drift spread over all), in `out/operating` (`--reuse`: a run's own,
    picked up by `_probe_or_kept`). A configuration whose search found no capacity has none."""
    ops: dict[str, list[Probe]] = {}
    for k, share in enumerate(OPERATING_SHARES):
        for label, (system, _, out, _) in configs.items():
            cap = results[label].req_per_s
            if math.isfinite(cap) and cap > 0:
                earlier = ops.setdefault(label, [])
                where = (k, "fixed", round(share * cap, 4))
                earlier.append(_probe_or_kept(system, workload, slo, budget, out / "operating", where, earlier, reuse))
    return ops


def _probe_or_kept(system, workload, slo, budget, out: Path, where, earlier, reuse: bool) -> Probe:
    """`reuse`: the probe at `where` an earlier run left in `out` (same index and rate); else measured now."""
    rows = _rows_of(out / "probes.jsonl") if reuse else []
    kept = [p for p in rows if (p.index, p.offered_req_per_s) == (where[0], where[2])]
    return kept[-1] if kept else _probe(system, workload, slo, budget, out, where, earlier)


Pairs = dict[str, list[tuple[Probe, Probe]]]


def repeated_probes(runs, firsts: dict[str, list[Probe]], workload, slo, reuse: bool) -> Pairs:
    """Each probe of `firsts` once more after all of them (minutes later), same rate, requests and seed, the
    configurations taken in turn, into `runs[label]`'s (system, budget, dir) dir/repeat: (first, repeat) pairs.
    Their difference is this machine's own run-to-run error, the floor under the simulator's."""
    pairs: Pairs = {}
    todo = {label: [p for p in probes if p.failed_at is None] for label, probes in firsts.items()}
    for k in range(max(map(len, todo.values()), default=0)):
        for label, probes in todo.items():
            if k < len(probes):
                system, budget, out = runs[label]
                first, seen = probes[k], [b for _, b in pairs.get(label, [])]
                where = (first.index, first.phase, first.offered_req_per_s)
                again = _probe_or_kept(system, workload, slo, budget, out / "repeat", where, seen, reuse)
                pairs.setdefault(label, []).append((first, again))
    return pairs


def vs_two_measurements(table: pd.DataFrame, pairs: Pairs) -> pd.Series:
    """Per row of an operating-point error table, |predicted - m| / m with m the mean of the point's first
    measurement and its repeat (`--repeat`; NaN without one): a reference with half the first's noise
    variance, when the box's speed held between the two."""
    again = {(label, a.index): b for label, ps in pairs.items() for a, b in ps}

    def one(row) -> float:
        b = again.get((row["config"], row["probe"]))
        return rel_err(row["predicted"], (row["measured"] + getattr(b, row["metric"])) / 2) if b else math.nan

    return table.apply(one, axis=1) if len(table) else pd.Series(dtype=float)


def repeat_rel_err(pairs: Pairs, metrics: list[str]) -> dict[str, float | None]:
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
    op_budget = dataclasses.replace(
        configs[fit[0]][1], min_probe_s=args.operating_s, requests_per_probe=args.operating_requests
    )
    ops = operating_probes(configs, results, workload, slo, op_budget, args.reuse)
    op_runs = {label: (configs[label][0], op_budget, configs[label][2] / "operating") for label in ops}
    pairs = repeated_probes(op_runs, ops, workload, slo, args.reuse) if args.repeat else {}
    searches = {label: (configs[label][0], results[label], configs[label][1]) for label in configs}
    for label, (_, result, _) in searches.items():
        print(f"{engine} {label}: measured {result.message}", flush=True)
    fit_sys, fit_res, budget = searches[fit[0]]
    fit_on = measured_probes(fit[0], fit_sys, fit_res)
    held = [mp for label, *_ in held_cfgs for mp in measured_probes(label, *searches[label][:2])]
    caps = {label: searches[label][:2] for label, *_ in held_cfgs}
    cal = calibrate(fit_on, held, fitter_for(fit_sys), workload, slo, budget, capacities=caps, bound=args.bound)
    at_ops = [MeasuredProbe(lab, configs[lab][0], p) for lab, ps in ops.items() for p in ps if p.failed_at is None]
    op_table = error_table(cal.cost, [(mp, "held_back") for mp in at_ops], workload, slo, op_budget)
    op_table["share"] = op_table["probe"].map(lambda k: OPERATING_SHARES[k]) if len(op_table) else []
    op_table["rel_err_vs_two"] = vs_two_measurements(op_table, pairs)
    print(cal.table.to_string(max_rows=200, float_format=lambda v: f"{v:.4g}"))
    print("operating points (held back):")
    print(op_table.to_string(max_rows=200, float_format=lambda v: f"{v:.4g}"))
    print(cal.capacity.to_string(float_format=lambda v: f"{v:.4g}"))
    print(json.dumps(cal.cost.summary(), default=float))
    fit_rates = {round(mp.probe.offered_req_per_s, 4) for mp in fit_on}
    overlap = sorted(r for p in ops.get(fit[0], []) if (r := round(p.offered_req_per_s, 4)) in fit_rates)
    print(f"{engine}: on the search probes, {cal.message}", flush=True)
    plan = replica_plan(cal.cost, fit_sys, workload, slo, budget, (1, 2, 4), calibration=cal)
    print(f"{engine}: PREDICTED capacity under the SLO by replica count (not measured):")
    print(plan[["kind", "replicas", "capacity_req_per_s", "per_replica_req_per_s", "status"]].to_string())
    return cal, op_table, overlap, pairs


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
    ap.add_argument(
        "--operating-s", type=float, default=20.0, help="each operating point's arrivals span at least this long"
    )
    ap.add_argument(
        "--operating-requests",
        type=int,
        default=200,  # with 30 (20 s at 2.4-4 req/s: 50-80 requests) hf's own repeat error on TTFT p99 was 22 %
        help="each operating point replays at least this many requests (at most 400): its p99 is then the "
        "n/100-th slowest",
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
    cals, ops, overlap, pairs = {}, {}, [], {}
    for engine in engines:
        cals[engine], ops[engine], ov, ps = run_engine(engine, args, workload, slo, out)
        overlap += ov
        pairs.update({f"{engine} {label}": p for label, p in ps.items()})
    table = pd.concat([c.table.assign(engine=e) for e, c in cals.items()], ignore_index=True)
    held_parts = [t.assign(engine=e) for e, t in ops.items() if len(t)]
    # no search found a capacity to take shares of: nothing is held back (every error None)
    none = pd.DataFrame(columns=[*table.columns, "share", "rel_err_vs_two"])
    held = pd.concat(held_parts, ignore_index=True) if held_parts else none
    fitted, searched = table[table["split"] == "fit"], table[table["split"] == "held_back"]
    plots.sim_error(pd.concat([fitted, held]), args.bound).savefig(out / "simulator_error.png", dpi=110)
    print(f"plot: {out / 'simulator_error.png'}")
    metrics = list(dict.fromkeys(table["metric"]))
    caps = pd.concat([c.capacity for c in cals.values()], ignore_index=True)
    line = {
        "engines": engines,
        # at OPERATING_SHARES of each configuration's measured capacity (the fit's own included: other rates)
        "median_rel_err": _medians(held, metrics),
        "p99_rel_err": {m: _num(held.loc[held["metric"] == m, "rel_err"].quantile(0.99)) for m in metrics},
        # (predicted - measured) / measured, median: near 0 with a large median_rel_err is scatter, not bias
        "median_signed_err": {m: _num(signed_err(held[held["metric"] == m]).median()) for m in metrics},
        "median_rel_err_by_share": {str(s): _medians(held[held["share"] == s], metrics) for s in OPERATING_SHARES},
        "capacity_rel_err": _num(caps["rel_err"].median()) if len(caps) else None,
        # the held-back configurations' capacity-search probes, at and past the knee (overloaded ones included)
        "search_median_rel_err": _medians(searched, metrics),
        # the same errors on the probes it was fitted on: a floor set by run-to-run noise, not by the model
        "fit_median_rel_err": _medians(fitted, metrics),
        # --repeat: each operating point measured twice, |second - first| / first: the machine's own error
        "repeat_median_rel_err": repeat_rel_err(pairs, metrics) if pairs else None,
        # --repeat: the same operating points against the mean of both measurements (the reference's noise halved)
        "median_rel_err_vs_two": _medians(held, metrics, "rel_err_vs_two") if pairs else None,
        "probes_repeated": sum(map(len, pairs.values())),
        "probes_fit": sum(c.probes_fit for c in cals.values()),
        "probes_held_back": int(held["probe"].groupby([held["engine"], held["config"]]).nunique().sum()),
        "search_probes_held_back": sum(c.probes_held_back for c in cals.values()),
        "usable": {e: _usable(held[held["engine"] == e], c, slo) for e, c in cals.items()},
        "bound": args.bound,
        "rates_overlap": overlap,
    }
    print(json.dumps(line))


def _medians(rows: pd.DataFrame, metrics: list[str], column: str = "rel_err") -> dict[str, float | None]:
    return {m: _num(rows.loc[rows["metric"] == m, column].median()) for m in metrics}


def _usable(held: pd.DataFrame, cal, slo: SLOConfig) -> bool:
    """The calibration's own judgement (`calibrate.judge`) on the operating points' errors."""
    med = {m: float(held.loc[held["metric"] == m, "rel_err"].median()) for m in METRICS}
    in_range = bool(len(cal.capacity) and cal.capacity["in_range"].all())
    gating = [m for m in slo_bounds_ms(slo) if m in METRICS]
    n = int(held["probe"].groupby(held["config"]).nunique().sum()) if len(held) else 0
    return judge(med, cal.capacity_rel_err, cal.bound, n, in_range, gating)[0]


def signed_err(rows: pd.DataFrame) -> pd.Series:
    """(predicted - measured) / measured per row (NaN where nothing was measured)."""
    return (rows["predicted"] - rows["measured"]) / rows["measured"].where(rows["measured"] != 0)


def _num(v: float) -> float | None:
    return round(float(v), 4) if math.isfinite(v) else None


if __name__ == "__main__":
    main()
