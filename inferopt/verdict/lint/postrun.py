"""Post-run cheat checks (SPEC V4) over a flow run's artifacts: engine-forced or identical output lengths and
natural lengths that collapsed (`check_outputs`), warm caches at the start of the measured window
(`check_warm_cache`), runs that never queued (`check_queueing`), failures missing from a denominator
(`check_denominators`, `check_cost`), and planned ablation arms not reported (`check_arms`). Each reads
`RunEvidence` (or the ablation result / cost table) and returns `Finding`s; a `refuse` here makes the verdict
at best inconclusive.

Deliberately not here: the cheat catalogue, `Finding` and `lint.allow` (`cheats.py`), config-level checks
(`prerun.py`), turning the steps' results into `RunEvidence` (`collect.py`), running anything, tracking.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from inferopt.verdict.lint.cheats import FORCED_LENGTH_KEYS, Finding

OUTCOMES: tuple[str, ...] = ("ok", "timeout", "rejected", "error")
MIN_OK_FOR_LENGTHS = 4  # identical measured lengths mean something only over this many ok requests
COLLAPSE_FRACTION = 0.25  # natural outputs whose median is below this share of the target median "collapsed"
RATE_TOL = 1e-9


@dataclass
class RunEvidence:
    """One measured run as the lint reads it. `run` is a `inferopt.measure.session.MeasuredRun` (records,
    phases, engine_info, warmup_declared, failed); `sent` the requests its workload table sent in the measured
    window; `reported` the metrics reported for it (a `headline` dict), if any."""

    label: str  # "measure", "ablation:candidate#1", "validate:burst"
    stage: str  # "measure" | "ablation" | "validate"
    run: Any
    sent: int | None = None
    reported: Mapping[str, float] | None = None


def _usable(runs: Iterable[RunEvidence]) -> list[RunEvidence]:
    return [r for r in runs if not getattr(r.run, "failed", False)]


def _find_keys(data: Any, keys: tuple[str, ...], path: str = "") -> dict[str, Any]:
    """Every (nested) entry of `data` whose key is in `keys`, as dotted path -> value."""
    out: dict[str, Any] = {}
    if isinstance(data, Mapping):
        for k, v in data.items():
            p = f"{path}{k}"
            if k in keys:
                out[p] = v
            out.update(_find_keys(v, keys, p + "."))
    elif isinstance(data, (list, tuple)):
        for i, v in enumerate(data):
            out.update(_find_keys(v, keys, f"{path}{i}."))
    return out


def _collapsed(runs: Sequence[RunEvidence]) -> list[Finding]:
    """Natural runs (`engine_info["output_lengths"]`, natural when unsaid) whose ok outputs' median is below
    COLLAPSE_FRACTION of the target median: the model stops long before the load's lengths, so decode cost is
    a fraction of what the workload describes (an EOS at once on synthetic prompts, a verbosity collapse)."""
    hits: dict[str, dict[str, float]] = {}
    for r in _usable(runs):
        ph = r.run.phases
        if r.run.engine_info.get("output_lengths", "natural") != "natural" or not len(ph):
            continue
        ok = ph[ph["outcome"] == "ok"]
        if len(ok) < MIN_OK_FOR_LENGTHS:
            continue
        got, want = float(ok["output_len"].median()), float(ph["target_output_len"].median())
        if want > 0 and got < COLLAPSE_FRACTION * want:
            hits[r.label] = {"median_output_len": got, "median_target": want}
    if not hits:
        return []
    shown = ", ".join(f"{k} {v['median_output_len']:g} of {v['median_target']:g}" for k, v in hits.items())
    return [
        Finding(
            "fixed_outputs",
            "flag",
            f"natural output lengths collapsed: median output vs target tokens {shown} (below "
            f"{COLLAPSE_FRACTION:g} of the target): the model stops long before the workload's lengths, so decode "
            "cost and any verbosity effect are measured on outputs production does not see; fix: for capacity or "
            "replay, workload.output_lengths: forced; otherwise check the prompts and the model's EOS",
            {"check": "natural_collapsed", "runs": hits},
        )
    ]


def check_outputs(runs: Sequence[RunEvidence]) -> list[Finding]:
    """Post-run `fixed_outputs`: the engine reports a forced length (`ignore_eos` true or `min_tokens` > 0 in
    its info — request defaults included), or every ok request of a run came back with the same length although
    the workload asked for several (forced or truncated outputs)."""
    findings: list[Finding] = []
    forced: dict[str, dict[str, Any]] = {}
    identical: dict[str, dict[str, Any]] = {}
    for r in _usable(runs):
        hits = {
            p: v
            for p, v in _find_keys(r.run.engine_info, FORCED_LENGTH_KEYS).items()
            if (p.rsplit(".", 1)[-1] == "ignore_eos" and v is True)
            or (
                p.rsplit(".", 1)[-1] == "min_tokens"
                and isinstance(v, (int, float))
                and not isinstance(v, bool)
                and v > 0
            )
        }
        if hits:
            forced[r.label] = hits
        ph = r.run.phases
        if not len(ph):
            continue
        ok = ph[ph["outcome"] == "ok"]
        if len(ok) >= MIN_OK_FOR_LENGTHS and ok["output_len"].nunique() == 1 and ph["target_output_len"].nunique() > 1:
            identical[r.label] = {
                "output_len": int(ok["output_len"].iloc[0]),
                "ok": len(ok),
                "distinct_targets": int(ph["target_output_len"].nunique()),
            }
    if forced:
        first = next(iter(forced.values()))
        findings.append(
            Finding(
                "fixed_outputs",
                "refuse",
                f"the engine forced output lengths in {', '.join(forced)} (engine info {first}): outputs are imposed, "
                "not served; fix: drop ignore_eos / min_tokens from the engine's defaults and declare "
                "workload.output_lengths: forced (per request, every arm), or lint.allow: [fixed_outputs] with a "
                "lint.reason for a deliberate length-controlled benchmark",
                {"check": "eos_ignored_at_run", "runs": forced},
            )
        )
    if identical:
        lens = sorted({v["output_len"] for v in identical.values()})
        findings.append(
            Finding(
                "fixed_outputs",
                "refuse",
                f"every ok request came back with exactly {', '.join(map(str, lens))} output token(s) in "
                f"{', '.join(identical)} although the workload asked for "
                f"{max(v['distinct_targets'] for v in identical.values())} different lengths: the outputs were forced "
                "or truncated to one length (an engine-side max/min tokens, an EOS at the first step), so decode cost "
                "is not what production sees; fix: find what caps or pads the outputs (engine defaults, the client's "
                "request body) and remove it",
                {"check": "identical_measured_lengths", "runs": identical},
            )
        )
    return findings + _collapsed(runs)


def has_prefix_cache(info: Mapping[str, Any]) -> bool | None:
    """Does the engine keep a cross-request prefix cache? True / False, or None when it cannot be told
    (an external endpoint). An explicit `prefix_cache` / `enable_prefix_caching` in the info wins."""
    system = info.get("system") if isinstance(info.get("system"), Mapping) else {}  # vllm nests its config
    for key in ("prefix_cache", "enable_prefix_caching"):
        for where in (info, system):
            if isinstance(where.get(key), bool):
                return where[key]
    engine = info.get("engine")
    if engine == "hf":
        return False  # an info without `prefix_cache` (the hf engine before it started): no cache then
    if engine == "fake":
        return float(info.get("cached_prefix_fraction") or 0.0) > 0.0
    if engine == "vllm":
        return True  # vLLM's v1 engine caches prefixes unless enable_prefix_caching is false
    return None


def check_warm_cache(runs: Sequence[RunEvidence], warmup_requests: int) -> list[Finding]:
    """Post-run `warm_cache`: warm-up records counted in the measured records / phase table; a warm-up count
    other than configured (`measure.warmup_requests`) and declared; a prefix cache not reset after warm-ups."""
    counted: dict[str, int] = {}
    undeclared: dict[str, dict[str, int]] = {}
    warm: dict[str, dict[str, Any]] = {}
    unknown: dict[str, Any] = {}
    for r in _usable(runs):
        run = r.run
        in_records = sum(1 for rec in run.records if getattr(rec, "warmup", False))
        ph = run.phases
        in_phases = int(ph["request_id"].astype(str).str.startswith("warmup-").sum()) if len(ph) else 0
        if in_records or in_phases:
            counted[r.label] = max(in_records, in_phases)
        expected = min(warmup_requests, r.sent) if r.sent is not None else warmup_requests
        if run.warmup_declared != expected:
            undeclared[r.label] = {"declared": int(run.warmup_declared), "configured": int(expected)}
        info = run.engine_info or {}
        cache = has_prefix_cache(info)
        reset = info.get("prefix_cache_reset")
        if run.warmup_declared > 0 and reset is not True:
            if cache is True:
                warm[r.label] = {
                    "engine": info.get("engine"),
                    "warmup": int(run.warmup_declared),
                    "prefix_cache_reset": reset,
                }
            elif cache is None:
                unknown[r.label] = {"engine": info.get("engine"), "prefix_cache_reset": reset}
    findings = []
    if counted:
        findings.append(
            Finding(
                "warm_cache",
                "refuse",
                "warm-up requests are inside the measured table in "
                f"{', '.join(f'{k} ({v})' for k, v in counted.items())}: warm-ups run on a cold engine and are "
                "excluded by design, counting them mixes the warm-up into the metrics; fix: keep warm-ups out of the "
                "records metrics are computed from (phase_table drops warmup=True)",
                {"check": "warmup_counted", "runs": counted},
            )
        )
    if undeclared:
        findings.append(
            Finding(
                "warm_cache",
                "refuse",
                f"warm-up requests not as configured and declared in {', '.join(undeclared)} ("
                f"{next(iter(undeclared.values()))}): the measured window's starting state is unknown; fix: send "
                "exactly measure.warmup_requests warm-ups through the runner, which declares them on the run",
                {"check": "warmup_undeclared", "runs": undeclared},
            )
        )
    if warm:
        first = next(iter(warm.values()))
        findings.append(
            Finding(
                "warm_cache",
                "refuse",
                f"the {first['engine']} engine keeps a prefix cache and did not reset it after {first['warmup']} "
                f"warm-up request(s) (engine info prefix_cache_reset = {first['prefix_cache_reset']!r}) in "
                f"{', '.join(warm)}: warm-ups replay the workload's own first prompts, so the measured window starts "
                "with their prefixes cached and cold-start TTFT is hidden; fix: reset the prefix cache before the "
                "measured window (the engine then reports prefix_cache_reset: true), or measure.warmup_requests: 0, or "
                "lint.allow: [warm_cache] with a lint.reason",
                {"check": "prefix_cache_not_reset", "runs": warm},
            )
        )
    if unknown:
        findings.append(
            Finding(
                "warm_cache",
                "flag",
                f"cannot tell whether the engine's prefix cache was cold after the warm-ups in {', '.join(unknown)} "
                "(an external endpoint; no prefix_cache_reset in its info): cold-start TTFT may be hidden; fix: reset "
                "the endpoint's prefix cache before measuring, or measure.warmup_requests: 0",
                {"check": "prefix_cache_unknown", "runs": unknown},
            )
        )
    return findings


def check_queueing(runs: Sequence[RunEvidence]) -> list[Finding]:
    """Post-run `no_queueing`: the phase table's `concurrency` (requests in flight at each intended start,
    itself included) never exceeded 1 in any run — refuse; never in the ablation while other runs queued —
    flag (the effects hold for an idle server only)."""
    by_stage: dict[str, dict[str, float]] = {}
    for r in _usable(runs):
        ph = r.run.phases
        if not len(ph) or "concurrency" not in ph:
            continue
        c = pd.to_numeric(ph["concurrency"])
        s = by_stage.setdefault(r.stage, {"max_concurrency": 0, "requests": 0, "queued": 0})
        s["max_concurrency"] = max(s["max_concurrency"], int(c.max()))
        s["requests"] += len(c)
        s["queued"] += int((c > 1).sum())
    if not by_stage:
        return []
    for s in by_stage.values():
        s["share_concurrent"] = s["queued"] / s["requests"] if s["requests"] else 0.0
    if all(s["max_concurrency"] <= 1 for s in by_stage.values()):
        return [
            Finding(
                "no_queueing",
                "refuse",
                f"no request ever had another in flight: max concurrency 1 in every run ({', '.join(by_stage)}): a "
                "latency claim without queueing says nothing about production (V4); fix: raise the arrival rate "
                "(workload.arrival.rate_per_s) until requests overlap, keep a burst scenario, or lint.allow: "
                "[no_queueing] with a lint.reason",
                {"check": "concurrency_one", "stages": by_stage},
            )
        ]
    if "ablation" in by_stage and by_stage["ablation"]["max_concurrency"] <= 1:
        return [
            Finding(
                "no_queueing",
                "flag",
                "the ablation never had two requests in flight (max concurrency 1): its effects hold for an idle "
                "server only, while other runs did queue; fix: ablate at a rate where requests overlap",
                {"check": "ablation_concurrency_one", "stages": by_stage},
            )
        ]
    return []


def _outcome_counts(records: Iterable[Any]) -> dict[str, int]:
    counts = dict.fromkeys(OUTCOMES, 0)
    for rec in records:
        counts[rec.outcome] = counts.get(rec.outcome, 0) + 1
    return counts


def check_denominators(runs: Sequence[RunEvidence]) -> list[Finding]:
    """Post-run `dropped_failures`: per run, records (all outcomes, warm-ups aside) == requests sent, phase-table
    rows == records, and every reported rate == (records with that outcome) / (requests sent)."""
    dropped: dict[str, dict[str, Any]] = {}
    table: dict[str, dict[str, int]] = {}
    rates: dict[str, dict[str, Any]] = {}
    for r in _usable(runs):
        records = [rec for rec in r.run.records if not getattr(rec, "warmup", False)]
        counts = _outcome_counts(records)
        if r.sent is not None and len(records) != r.sent:
            dropped[r.label] = {"sent": r.sent, "records": len(records), "outcomes": counts}
        if len(r.run.phases) != len(records):
            table[r.label] = {"records": len(records), "phase_rows": len(r.run.phases)}
        if r.reported:
            denom = r.sent if r.sent is not None else len(records)
            bad = {}
            if "requests" in r.reported and r.reported["requests"] != denom:
                bad["requests"] = {"reported": r.reported["requests"], "sent": denom}
            for o in OUTCOMES:
                key = f"{o}_rate"
                if key in r.reported and denom:
                    want = counts.get(o, 0) / denom
                    got = float(r.reported[key])
                    if not abs(got - want) <= RATE_TOL:
                        bad[key] = {"reported": got, "over_all_sent": want, "count": counts.get(o, 0), "sent": denom}
            if bad:
                rates[r.label] = bad
    findings = []
    fix = "fix: every request ends as a record with its outcome (M2) and every rate divides by all requests sent"
    if dropped:
        k, v = next(iter(dropped.items()))
        findings.append(
            Finding(
                "dropped_failures",
                "refuse",
                f"requests sent and records disagree in {', '.join(dropped)} (e.g. {k}: {v['sent']} sent, "
                f"{v['records']} records, outcomes {v['outcomes']}): failed requests are missing, so every rate is "
                f"computed over the survivors; {fix}",
                {"check": "records_missing", "runs": dropped},
            )
        )
    if table:
        k, v = next(iter(table.items()))
        findings.append(
            Finding(
                "dropped_failures",
                "refuse",
                f"the phase table the metrics come from has {v['phase_rows']} rows for {v['records']} records in "
                f"{', '.join(table)}: requests were dropped before the metrics; {fix}",
                {"check": "phase_rows_missing", "runs": table},
            )
        )
    if rates:
        k, v = next(iter(rates.items()))
        m, d = next(iter(v.items()))
        example = (
            f"{k} reports {d['reported']:g} requests, {d['sent']} were sent"
            if m == "requests"
            else f"{k} {m}: reported {d['reported']:.4g}, over all {d['sent']} sent it is {d['over_all_sent']:.4g}"
        )
        findings.append(
            Finding(
                "dropped_failures",
                "refuse",
                f"reported rates do not divide by all requests sent in {', '.join(rates)} (e.g. {example}): a rate "
                f"over the ok requests only hides failures; {fix}",
                {"check": "rate_denominator", "runs": rates},
            )
        )
    return findings


def check_cost(cost: pd.DataFrame | None, sent_by_arm: Mapping[str, int]) -> list[Finding]:
    """Post-run `dropped_failures` on the cost table (G3): per arm, `requests` == all requests sent in its
    trials and `success_rate` == successful / requests (cost per success divides the whole cost)."""
    if cost is None or not len(cost):
        return []
    bad: dict[str, dict[str, Any]] = {}
    for row in cost.to_dict("records"):
        arm = row.get("arm")
        sent = sent_by_arm.get(arm)
        if sent is not None and "requests" in row and int(row["requests"]) != sent:
            bad[arm] = {"requests": int(row["requests"]), "sent": int(sent)}
        elif "success_rate" in row and row.get("requests"):
            # the denominator is the tasks: requests, or sessions when the load has them (gate.judge.successful_tasks)
            want = row["successful"] / (row.get("tasks") or row["requests"])
            if abs(float(row["success_rate"]) - want) > RATE_TOL:
                bad[arm] = {"success_rate": float(row["success_rate"]), "successful_over_requests": want}
    if not bad:
        return []
    return [
        Finding(
            "dropped_failures",
            "refuse",
            f"the cost table does not count every request sent for {', '.join(map(str, bad))} ("
            f"{next(iter(bad.values()))}): cost per successful task must spread the whole device time over all "
            "requests sent; fix: pool every trial's full phase table",
            {"check": "cost_denominator", "arms": bad},
        )
    ]


def check_arms(planned: Sequence[Any], result: Any, logged: Iterable[str] | None = None) -> list[Finding]:
    """Post-run `best_only`: every planned arm (`plan_arms`: `.name`, `.role`) is in the result's arms, has an
    outcome (a verdict — the baseline excepted — and trials, or a skip reason), and, when `logged` (the arm
    names found on the tracking server) is given, was logged."""
    names = [a.name for a in planned]
    returned = {a.name for a in getattr(result, "arms", [])}
    verdicts = getattr(result, "verdicts", {}) or {}
    skipped = getattr(result, "skipped", {}) or {}
    trials = getattr(result, "trials", None)
    ran = set(trials["arm"]) if trials is not None and len(trials) else set()
    missing: dict[str, str] = {}
    for a in planned:
        if a.name not in returned:
            missing[a.name] = "not in the result's arms"
        elif a.role != "baseline" and a.name not in verdicts:
            missing[a.name] = "no verdict (improves / regresses / no detectable change / failed / skipped)"
        elif a.name not in ran and a.name not in skipped:
            missing[a.name] = "no trial and no skip reason"
    if logged is not None:
        logged = set(logged)
        for n in names:
            if n not in logged and n not in missing:
                missing[n] = "not logged to the tracking server"
    if not missing:
        return []
    return [
        Finding(
            "best_only",
            "refuse",
            f"planned arms {', '.join(names)}; not reported with an outcome: "
            f"{'; '.join(f'{k} ({v})' for k, v in missing.items())} — reporting a subset (the best one) hides the "
            "noise floor, the failed and the losing configurations (V4, A1); fix: return and log every planned arm "
            "with its outcome, failed and skipped arms included",
            {
                "check": "arms_missing",
                "planned": names,
                "missing": missing,
                "returned": sorted(returned),
                "logged": sorted(logged) if logged is not None else None,
            },
        )
    ]
