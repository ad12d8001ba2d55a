"""Config-level cheat checks (SPEC V4), run before any model loads: undeclared forced EOS / output lengths on an
arm's system, one fixed output length in the workload, forced lengths shorter than the production distribution
or forced on arms that can change outputs (`workload.output_lengths`), single-request runs, no burst scenario.
`refuse_cheats` is
the pre-run gate (raises `CheatRefused`); `check_config` returns the findings (the verdict re-runs it, so an
allowed cheat is recorded there too). `workload_tables` builds the request tables the run will send.

Deliberately not here: the cheat catalogue, `Finding` and `lint.allow` (`cheats.py`), anything that needs a
run's artifacts (`postrun.py`), loading a model or sending a request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pandas as pd

from inferopt.choose.output_lengths import arm_workload, can_change_outputs
from inferopt.config import AnySystem, CandidateConfig
from inferopt.validate import scenarios
from inferopt.verdict.lint.cheats import FORCED_LENGTH_KEYS, CheatRefused, Finding, apply_allow
from inferopt.workload.build import build_workload
from inferopt.workload.output_lengths import ATTR, production_output_median

SHORT_OUTPUT_TOKENS = 16  # a fixed length at or below this is called "short" in the message
FORCED_SHORT_FRACTION = 0.75  # forced lengths whose median is below this share of production's are "short"


def _forced_length_in_args(args: Iterable[str]) -> list[str]:
    return [a for a in args if any(k in a.replace("-", "_") for k in FORCED_LENGTH_KEYS)]


def _eos_findings(system: AnySystem, where: str) -> list[Finding]:
    fix = (
        "fix: let the engine stop at EOS and, to replay the target lengths, declare workload.output_lengths: "
        "forced (per request, the same for every arm, linted against the production lengths); or, for a "
        "deliberate length-controlled microbenchmark, lint.allow: [fixed_outputs] with a lint.reason"
    )
    caps = system.capabilities
    if caps.stops_at_eos is False:
        return [
            Finding(
                "fixed_outputs",
                "refuse",
                f"{where} system '{system.name}' ({caps.engine}) has stop_at_eos: false: every output is forced to "
                "its max_new_tokens, so output lengths are imposed, not served, and the change's effect on "
                f"how long answers run (and on decode cost) is hidden; {fix}",
                {"check": "eos_ignored", "where": where, "engine": caps.engine, "stop_at_eos": False},
            )
        ]
    hits = _forced_length_in_args(caps.verbatim_args)
    if hits:
        return [
            Finding(
                "fixed_outputs",
                "refuse",
                f"{where} system '{system.name}' ({caps.engine}) forces output lengths via {hits} "
                f"({'/'.join(FORCED_LENGTH_KEYS)}): outputs are imposed, not served; {fix}",
                {"check": "eos_ignored", "where": where, "engine": caps.engine, "args": hits},
            )
        ]
    return []


def _fake_note(system: AnySystem) -> list[Finding]:
    if not system.capabilities.scripted_timings:
        return []
    return [
        Finding(
            "fixed_outputs",
            "note",
            f"system '{system.name}' is the fake engine, a test double that never emits EOS: every output "
            "runs to its target length by construction and its timings are scripted; this run tests the "
            "pipeline, not a served model (not a cheat, not evidence for production)",
            {"check": "fake_engine", "engine": "fake"},
        )
    ]


def workload_tables(candidate: CandidateConfig) -> dict[str, pd.DataFrame]:
    """The request tables the run will send (seeded, cheap: no model): measure, ablation, each scenario."""

    def scenario_table(wl, sc):  # the table a scenario replays (re-timed trace bursts where supported)
        if hasattr(scenarios, "scenario_requests"):
            return scenarios.scenario_requests(wl, sc)
        return build_workload(scenarios.scenario_workload(wl, sc))

    wl, arms = candidate.workload, arm_workload(candidate)  # the arms' lengths mode may differ (natural)
    tables = {"measure": build_workload(wl)}
    if arms is not wl or (candidate.ablation.num_requests and candidate.ablation.num_requests != wl.num_requests):
        tables["ablation"] = build_workload(arms, candidate.ablation.num_requests)
    else:
        tables["ablation"] = tables["measure"]
    for sc in candidate.validation.scenarios:
        tables[f"validate:{sc.name}"] = scenario_table(arms, sc)
    return tables


def _forced_findings(candidate: CandidateConfig, tables: Mapping[str, pd.DataFrame]) -> list[Finding]:
    """Forced lengths shorter than the production distribution's (median below FORCED_SHORT_FRACTION of it),
    and a declared `forced` on arms whose changes can change outputs (it hides a change in verbosity)."""
    findings: list[Finding] = []
    forced = {k: t for k, t in tables.items() if t.attrs.get(ATTR) == "forced" and len(t)}
    if forced and candidate.baseline.capabilities.forces_lengths:
        production = production_output_median(candidate.workload)
        short = {k: float(t["output_len"].median()) for k, t in forced.items()}
        short = {k: v for k, v in short.items() if v < FORCED_SHORT_FRACTION * production}
        if short:
            shown = ", ".join(f"{k} {v:g}" for k, v in short.items())
            findings.append(
                Finding(
                    "fixed_outputs",
                    "flag",
                    f"forced output lengths are shorter than production's: median target {shown} tokens against "
                    f"the production median {production:g} ({_lengths_text(candidate)}); forcing short outputs "
                    "understates decode cost; fix: replay the production lengths (raise lengths.output_max, drop "
                    "trace.limit or a short scenario's override), or output_lengths: natural",
                    {"check": "forced_short", "median_target": short, "production_median": production},
                )
            )
    if candidate.workload.output_lengths == "forced" and can_change_outputs(candidate.changes):
        findings.append(
            Finding(
                "fixed_outputs",
                "flag",
                f"output_lengths: forced on a candidate whose changes ({', '.join(candidate.changes)}) can change "
                "outputs: a change in how long answers run is part of its effect, and forcing hides it; fix: "
                "output_lengths: natural (the default for such arms), or keep forced for a capacity-only question",
                {"check": "forced_on_output_change", "changes": sorted(candidate.changes)},
            )
        )
    return findings


def _lengths_text(candidate: CandidateConfig) -> str:
    if candidate.workload.trace is not None:
        return f"trace {candidate.workload.trace.path}"
    ln = candidate.workload.lengths
    return (
        f"output_median {ln.output_median}, output_sigma {ln.output_sigma:g}, output_min {ln.output_min}, "
        f"output_max {ln.output_max}"
    )


def check_config(candidate: CandidateConfig, tables: Mapping[str, pd.DataFrame] | None = None) -> list[Finding]:
    """Config-level cheats, found before any model loads (SPEC V4): undeclared forced EOS/lengths on any arm's
    system, one fixed output length in the workload, forced lengths short of production's or on arms that can
    change outputs, single-request runs, no burst scenario. `tables` defaults to `workload_tables(candidate)`."""
    findings: list[Finding] = []
    findings += _eos_findings(candidate.baseline, "baseline")
    cand = candidate.candidate_system
    if not _eos_findings(candidate.baseline, "baseline"):
        findings += _eos_findings(cand, "candidate")
    findings += _fake_note(candidate.baseline)

    if tables is None:
        try:
            tables = workload_tables(candidate)
        except Exception as exc:  # noqa: BLE001 - the lint must not mask the step's own error
            return findings + [
                Finding(
                    "fixed_outputs",
                    "note",
                    f"could not build the workload tables to lint them: {type(exc).__name__}: {exc}",
                    {"check": "workload_tables"},
                )
            ]
    findings += _forced_findings(candidate, tables)
    fixed = {
        label: int(t["output_len"].iloc[0])
        for label, t in tables.items()
        if len(t) >= 2 and t["output_len"].nunique() == 1
    }
    if fixed:
        values = sorted(set(fixed.values()))
        short = all(v <= SHORT_OUTPUT_TOKENS for v in values)
        findings.append(
            Finding(
                "fixed_outputs",
                "refuse",
                f"every request asks for exactly {', '.join(map(str, values))} output token(s)"
                f"{' (fixed and short)' if short else ' (fixed)'} in {', '.join(fixed)} ({_lengths_text(candidate)}): "
                "one output length hides decode cost and length variance — a static batch runs until its longest "
                "member ends (B1), so equal lengths make batching look free — and is not the production length "
                "distribution the verdict is about (V1); fix: output_sigma > 0 and output_min < output_max (or a trace "
                "with real lengths), or, for a deliberate fixed-length microbenchmark, lint.allow: [fixed_outputs] "
                "with a lint.reason",
                {"check": "fixed_workload_lengths", "tables": fixed, "short": short},
            )
        )

    single = {label: len(t) for label, t in tables.items() if len(t) < 2}
    if single:
        findings.append(
            Finding(
                "no_queueing",
                "refuse",
                f"{', '.join(f'{k} sends {v} request' for k, v in single.items())}: a single-request test never "
                "queues, so its latency says nothing about production under load (V4); fix: send a workload of many "
                "requests (workload.num_requests / ablation.num_requests / validation.scenarios[].num_requests >= 2, "
                "in practice dozens), or lint.allow: [no_queueing] with a lint.reason",
                {"check": "single_request", "requests": single},
            )
        )
    if not any(sc.kind == "burst" for sc in candidate.validation.scenarios):
        findings.append(
            Finding(
                "no_queueing",
                "flag",
                "validation has no burst scenario: queue absorption is never tested (V2); fix: add "
                "{name: burst, kind: burst} to validation.scenarios",
                {"check": "no_burst_scenario", "scenarios": [sc.name for sc in candidate.validation.scenarios]},
            )
        )
    return findings


def refuse_cheats(candidate: CandidateConfig, tables: Mapping[str, pd.DataFrame] | None = None) -> list[Finding]:
    """The pre-run gate: raise `CheatRefused` (a `ConfigError`) when the config has a cheat not allowed by
    `lint.allow`; otherwise return the config-level findings (flags and notes)."""
    findings = apply_allow(check_config(candidate, tables), candidate.lint)
    refused = [f for f in findings if f.severity == "refuse"]
    if refused:
        raise CheatRefused(refused)
    return findings
