"""The benchmark-cheat lint (SPEC V4): each cheat is planted in a real run on the fake engine (or in a config)
and caught, and a clean control of the same shape is not flagged. The default candidates are not refused."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest
from step_results import arm, passing_steps

from inferopt.ablate.arm_verdicts import ArmVerdict
from inferopt.ablate.plan import plan_arms
from inferopt.ablate.run import ablate, fresh_fake_noise
from inferopt.config import (
    ConfigError,
    ConstantArrivals,
    FakeSystem,
    LengthConfig,
    LintSettings,
    PoissonArrivals,
    PrefixConfig,
    WorkloadConfig,
    load_config,
)
from inferopt.engines import make_engine
from inferopt.engines.fake import FakeEngine
from inferopt.measure.phases import phase_table
from inferopt.measure.runner import RunTags
from inferopt.measure.session import MeasuredRun, run_system
from inferopt.measure.slices import headline
from inferopt.records import read_records
from inferopt.verdict.decide import decide
from inferopt.verdict.lint import (
    CheatRefused,
    Finding,
    RunEvidence,
    apply_allow,
    check_arms,
    check_config,
    check_cost,
    check_denominators,
    check_outputs,
    check_queueing,
    check_warm_cache,
    lint_summary,
    refuse_cheats,
)
from inferopt.verdict.lint.collect import lint_run
from inferopt.workload.build import build_workload

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "configs/candidates/fake-batching.yaml"
BATCHING = ROOT / "configs/candidates/batching.yaml"
FAST = {
    "context_ms": 0.1,
    "prefill_base_ms": 0.5,
    "prefill_ms_per_token": 0.01,
    "decode_step_ms": 0.5,
    "decode_ms_per_seq": 0.05,
}


def _fake_cfg(**overrides):
    return load_config(FAKE, kind="candidate", **overrides)


def _workload(n: int = 24, rate: float = 300.0, constant: bool = False, **kw) -> pd.DataFrame:
    arrival = ConstantArrivals(rate_per_s=rate) if constant else PoissonArrivals(rate_per_s=rate)
    return build_workload(
        WorkloadConfig(
            name="lint",
            seed=4,
            num_requests=n,
            arrival=arrival,
            lengths=LengthConfig(input_median=16, output_median=6, output_max=16),
            **kw,
        )
    )


def _run(
    system: FakeSystem, table: pd.DataFrame, warmup: int = 0, path: Path | None = None, engine_factory=make_engine
) -> MeasuredRun:
    run = run_system(
        system,
        table,
        RunTags(arm="baseline", scenario="lint"),
        timeout_s=5.0,
        records_path=path,
        warmup_requests=warmup,
        engine_factory=engine_factory,
    )
    assert not run.failed, run.error
    return run


def _ev(
    run: MeasuredRun, table: pd.DataFrame, label: str = "measure", stage: str = "measure", reported=None
) -> RunEvidence:
    return RunEvidence(label, stage, run, sent=len(table), reported=reported)


def _blocking(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity in ("refuse", "flag")]


def _decide(lint, ablation_verdict: str = "improves", scenarios_passed: bool = True):
    steady = dataclasses.replace(passing_steps()["scenarios"][0], passed=scenarios_passed)
    return decide(**passing_steps(ablation=arm(ablation_verdict), scenarios=[steady]), lint=lint)


# --------------------------------------------------------------------------- the shipped candidates (controls)


CANDIDATES = sorted(p for p in (ROOT / "configs").glob("*/*.yaml") if p.read_text().count("\nbaseline:"))


@pytest.mark.parametrize("path", CANDIDATES, ids=lambda p: str(p.relative_to(ROOT)))
def test_shipped_candidates_are_not_refused(path: Path) -> None:
    """V4: the default hf candidate (stop_at_eos true), the fake candidate and the planted cases all pass the
    pre-run gate; the fake engine gets a note, never a refusal."""
    findings = refuse_cheats(load_config(path, kind="candidate"))
    assert not [f for f in findings if f.severity == "refuse"]
    if path == BATCHING:
        assert findings == []


# --------------------------------------------------------------------------- 1. outputs forced short or fixed


def test_the_candidates_are_all_linted() -> None:
    assert {BATCHING, FAKE} <= set(CANDIDATES) and len(CANDIDATES) >= 8


def test_hf_stop_at_eos_false_is_refused_before_any_model_loads() -> None:
    cfg = load_config(BATCHING, kind="candidate", **{"baseline.stop_at_eos": False})
    with pytest.raises(CheatRefused) as exc:
        refuse_cheats(cfg)
    assert isinstance(exc.value, ConfigError)  # exits like a config error
    [f] = exc.value.findings
    assert (f.cheat, f.severity, f.evidence["check"]) == ("fixed_outputs", "refuse", "eos_ignored")
    assert "stop_at_eos: false" in f.message and "fix:" in f.message


def test_vllm_ignore_eos_in_extra_args_is_refused() -> None:
    data = _fake_cfg().model_dump()
    data["baseline"] = {
        "engine": "vllm",
        "model": {"path": "builtin:tiny-llama"},
        "extra_args": ["--override-generation-config", '{"ignore_eos": true, "min_tokens": 32}'],
    }
    data["changes"] = {"max_num_seqs": 8}
    cfg = type(_fake_cfg()).model_validate(data)
    [f] = [f for f in check_config(cfg) if f.severity == "refuse"]
    assert f.cheat == "fixed_outputs" and f.evidence["engine"] == "vllm"
    clean = cfg.model_copy(update={"baseline": cfg.baseline.model_copy(update={"extra_args": ("--seed", "0")})})
    assert not _blocking(check_config(clean))


@pytest.mark.parametrize("lengths", [{"output_min": 8, "output_max": 8}, {"output_sigma": 0.0}])
def test_a_single_fixed_output_length_in_the_workload_is_refused(lengths: dict) -> None:
    cfg = _fake_cfg(**{f"workload.lengths.{k}": v for k, v in lengths.items()})
    with pytest.raises(CheatRefused) as exc:
        refuse_cheats(cfg)
    [f] = exc.value.findings
    assert f.cheat == "fixed_outputs" and f.evidence["check"] == "fixed_workload_lengths"
    assert f.evidence["tables"]["measure"] == 8 and f.evidence["short"]
    assert "exactly 8 output token(s) (fixed and short)" in f.message


def test_a_narrow_length_distribution_is_not_a_fixed_length() -> None:
    """Sampled caps from a (narrow) distribution are how a length mix is replayed: not a cheat."""
    cfg = _fake_cfg(
        **{"workload.lengths.output_sigma": 0.1, "workload.lengths.output_min": 6, "workload.lengths.output_max": 10}
    )
    assert not _blocking(check_config(cfg))


def test_fixed_length_microbenchmark_opts_in_and_is_flagged_not_refused() -> None:
    over = {
        "workload.lengths.output_sigma": 0.0,
        "lint.allow": ["fixed_outputs"],
        "lint.reason": "fixed-length kernel microbenchmark",
    }
    cfg = _fake_cfg(**over)
    findings = refuse_cheats(cfg)  # does not raise
    [f] = [f for f in findings if f.cheat == "fixed_outputs" and f.severity != "note"]
    assert f.severity == "flag" and f.evidence["allowed"] and "fixed-length kernel microbenchmark" in f.message
    v = _decide(findings)
    assert v.decision == "accept" and any("fixed_outputs (flagged)" in w for w in v.warnings)
    with pytest.raises(ConfigError, match="lint.reason"):
        _fake_cfg(**{"lint.allow": ["fixed_outputs"]})
    with pytest.raises(ConfigError, match="lint.allow"):
        _fake_cfg(**{"lint.allow": ["dropped_failures"], "lint.reason": "no"})  # integrity cheats cannot be allowed


def test_fake_engine_is_a_note_not_a_refusal() -> None:
    notes = [f for f in check_config(_fake_cfg()) if f.cheat == "fixed_outputs"]
    assert [(f.severity, f.evidence["check"]) for f in notes] == [("note", "fake_engine")]
    v = _decide(notes)
    assert v.decision == "accept" and not v.warnings and any("fake engine" in r for r in v.reasons)


class _ForcedLengthEngine(FakeEngine):
    """A planted cheat: the engine ignores EOS and forces every output to 5 tokens, and says so in info()."""

    def info(self):
        return {**super().info(), "request_defaults": {"ignore_eos": True, "min_tokens": 5}}

    def stream(self, request):
        return super().stream(dataclasses.replace(request, max_new_tokens=5))


def test_planted_engine_forcing_output_lengths_is_caught() -> None:
    table = _workload()
    clean = _run(FakeSystem(**FAST), table)
    assert not check_outputs([_ev(clean, table)])
    forced = _run(FakeSystem(**FAST), table, engine_factory=_ForcedLengthEngine)
    findings = check_outputs([_ev(forced, table)])
    checks = {f.evidence["check"]: f for f in findings}
    assert set(checks) == {"eos_ignored_at_run", "identical_measured_lengths"}
    assert all(f.severity == "refuse" for f in findings)
    assert checks["identical_measured_lengths"].evidence["runs"]["measure"]["output_len"] == 5
    assert _decide(findings).decision == "inconclusive"


# --------------------------------------------------------------------------- 2. caches warm at the start


def _prefix_table() -> pd.DataFrame:
    return _workload(prefix=PrefixConfig(num_groups=1, prefix_len=8, share_fraction=1.0))


def test_prefix_cache_warmed_by_warmups_is_caught() -> None:
    """The fake engine with a prefix cache keeps the warm-ups' prefixes (they are the workload's own first
    prompts): the first measured request already hits the cache."""
    table = _prefix_table()
    system = FakeSystem(**FAST, cached_prefix_fraction=1.0)
    warm = _run(system, table, warmup=2)
    assert warm.phases["cache_hit"].iloc[0]  # the planted cheat is real: the first request hits the warm cache
    [f] = check_warm_cache([_ev(warm, table)], warmup_requests=2)
    assert (f.cheat, f.severity, f.evidence["check"]) == ("warm_cache", "refuse", "prefix_cache_not_reset")
    # controls: no warm-up (a fresh engine starts cold); the engine reports a reset; an engine without a prefix cache
    cold = _run(system, table, warmup=0)
    assert not cold.phases["cache_hit"].iloc[0]
    assert not check_warm_cache([_ev(cold, table)], warmup_requests=0)
    warm.engine_info["prefix_cache_reset"] = True
    assert not check_warm_cache([_ev(warm, table)], warmup_requests=2)
    no_cache = _run(FakeSystem(**FAST), table, warmup=2)
    assert not check_warm_cache([_ev(no_cache, table)], warmup_requests=2)
    hf_like = dataclasses.replace(no_cache, engine_info={"engine": "hf"})
    assert not check_warm_cache([_ev(hf_like, table)], warmup_requests=2)
    external = dataclasses.replace(no_cache, engine_info={"engine": "openai"})
    [f] = check_warm_cache([_ev(external, table)], warmup_requests=2)
    assert f.severity == "flag" and f.evidence["check"] == "prefix_cache_unknown"


@pytest.mark.parametrize(
    ("info", "caught"),
    [
        ({"engine": "vllm", "prefix_cache_reset": True, "system": {"enable_prefix_caching": None}}, False),
        ({"engine": "vllm", "prefix_cache_reset": False, "system": {"enable_prefix_caching": None}}, True),
        ({"engine": "vllm", "system": {"enable_prefix_caching": True}}, True),  # no reset reported
        ({"engine": "vllm", "prefix_cache_reset": False, "system": {"enable_prefix_caching": False}}, False),
    ],
)
def test_vllm_prefix_cache_reset_is_read_from_engine_info(info: dict, caught: bool) -> None:
    """The vLLM engine reports `prefix_cache_reset` (it resets after the warm-ups); vLLM caches prefixes by default."""
    table = _workload(n=8)
    run = dataclasses.replace(_run(FakeSystem(**FAST), table, warmup=2), engine_info=info)
    found = check_warm_cache([_ev(run, table)], warmup_requests=2)
    assert [f.evidence["check"] for f in found] == (["prefix_cache_not_reset"] if caught else [])


def test_warmup_requests_counted_in_the_metrics_are_caught(tmp_path: Path) -> None:
    table = _workload()
    run = _run(FakeSystem(**FAST), table, warmup=2, path=tmp_path / "requests.jsonl")
    assert not check_warm_cache([_ev(run, table)], warmup_requests=2)
    warmups = [r for r in read_records(tmp_path / "requests.jsonl") if r.warmup]
    assert len(warmups) == 2
    # planted: the warm-ups kept in the measured records ...
    kept = dataclasses.replace(run, records=warmups + run.records)
    [f] = check_warm_cache([_ev(kept, table)], warmup_requests=2)
    assert f.evidence["check"] == "warmup_counted" and f.evidence["runs"]["measure"] == 2
    # ... or un-flagged, so the phase table the metrics come from includes them
    unflagged = [dataclasses.replace(r, warmup=False) for r in warmups] + run.records
    counted = dataclasses.replace(run, records=unflagged, phases=phase_table(unflagged))
    checks = {f.evidence["check"] for f in check_warm_cache([_ev(counted, table)], warmup_requests=2)}
    assert "warmup_counted" in checks


def test_undeclared_warmups_are_caught() -> None:
    table = _workload()
    run = _run(FakeSystem(**FAST), table, warmup=0)
    [f] = check_warm_cache([_ev(run, table)], warmup_requests=2)  # configured 2, declared 0
    assert (f.severity, f.evidence["check"]) == ("refuse", "warmup_undeclared")
    assert f.evidence["runs"]["measure"] == {"declared": 0, "configured": 2}


# --------------------------------------------------------------------------- 3. no queueing


@pytest.mark.parametrize("field", ["workload.num_requests", "ablation.num_requests"])
def test_single_request_runs_are_refused_before_work(field: str) -> None:
    with pytest.raises(CheatRefused) as exc:
        refuse_cheats(_fake_cfg(**{field: 1}))
    [f] = exc.value.findings
    assert (f.cheat, f.evidence["check"]) == ("no_queueing", "single_request")
    assert "single-request test never queues" in f.message


def test_no_burst_scenario_is_flagged() -> None:
    cfg = _fake_cfg(**{"validation.scenarios": [{"name": "steady", "kind": "steady"}]})
    [f] = [f for f in refuse_cheats(cfg) if f.cheat == "no_queueing"]
    assert f.severity == "flag" and f.evidence["check"] == "no_burst_scenario"


def test_a_run_that_never_queues_is_caught() -> None:
    """Constant gaps (100 ms) much longer than one request (~10 ms): never two requests in flight."""
    slow = _workload(n=8, rate=10.0, constant=True)
    lone = _run(FakeSystem(**FAST), slow)
    assert int(lone.phases["concurrency"].max()) == 1
    [f] = check_queueing([_ev(lone, slow), _ev(lone, slow, "validate:burst", "validate")])
    assert (f.severity, f.evidence["check"]) == ("refuse", "concurrency_one")
    busy_table = _workload()
    busy = _run(FakeSystem(**FAST), busy_table)
    assert int(busy.phases["concurrency"].max()) > 1
    assert not check_queueing([_ev(busy, busy_table)])
    # queueing elsewhere, none in the ablation: a flag (the effect holds for an idle server only)
    [f] = check_queueing([_ev(busy, busy_table), _ev(lone, slow, "ablation:candidate#0", "ablation")])
    assert (f.severity, f.evidence["check"]) == ("flag", "ablation_concurrency_one")


# --------------------------------------------------------------------------- 4. only the best configuration


@pytest.fixture(scope="module")
def small_ablation(tmp_path_factory):
    cfg = _fake_cfg(**{"ablation.num_requests": 12, "ablation.repeats": 2})
    return cfg, ablate(cfg, tmp_path_factory.mktemp("abl"), system_for_trial=fresh_fake_noise)


def test_every_planned_arm_reported_is_clean(small_ablation) -> None:
    cfg, result = small_ablation
    planned = plan_arms(cfg)
    assert {a.name for a in planned} == {
        "baseline",
        "aa",
        "batching.batch_wait_ms",
        "batching.max_batch_size",
        "candidate",
    }
    assert not check_arms(planned, result, logged=[a.name for a in planned])
    # a skipped arm (no trial, a skip reason and a "skipped" verdict) counts as reported
    skipped = dataclasses.replace(
        result,
        trials=result.trials[result.trials["arm"] != "aa"],
        skipped={"aa": "cannot run here"},
        verdicts={**result.verdicts, "aa": ArmVerdict("aa", 0.05, 0, "skipped", ("skipped",))},
    )
    assert not check_arms(planned, skipped)


def test_reporting_only_the_best_arm_is_caught(small_ablation) -> None:
    cfg, result = small_ablation
    planned = plan_arms(cfg)
    keep = {"baseline", "candidate"}
    best_only = dataclasses.replace(
        result,
        arms=[a for a in result.arms if a.name in keep],
        verdicts={k: v for k, v in result.verdicts.items() if k in keep},
        trials=result.trials[result.trials["arm"].isin(keep)],
    )
    [f] = check_arms(planned, best_only)
    assert (f.cheat, f.severity) == ("best_only", "refuse")
    assert set(f.evidence["missing"]) == {"aa", "batching.batch_wait_ms", "batching.max_batch_size"}
    # an arm run but its outcome dropped, or run but never logged
    no_verdict = dataclasses.replace(result, verdicts={k: v for k, v in result.verdicts.items() if k != "aa"})
    assert check_arms(planned, no_verdict)[0].evidence["missing"] == {
        "aa": "no verdict (improves / regresses / no detectable change / failed / skipped)"
    }
    [f] = check_arms(planned, result, logged=["baseline", "candidate"])
    assert f.evidence["missing"]["aa"] == "not logged to the tracking server"
    # best_only is an integrity failure: lint.allow cannot turn it into a flag
    allowed = apply_allow([f], LintSettings.model_construct(allow=("best_only",), reason="x"))
    assert allowed[0].severity == "refuse"


# --------------------------------------------------------------------------- 5. failures in the denominator


@pytest.fixture(scope="module")
def failing_run():
    table = _workload(n=30)
    run = _run(FakeSystem(**FAST, error_rate=0.3, seed=5), table)
    assert (run.phases["outcome"] == "error").sum() >= 3
    return run, table


def test_failures_counted_in_every_denominator_is_clean(failing_run) -> None:
    run, table = failing_run
    assert not check_denominators([_ev(run, table, reported=headline(run.phases, run.duration_s))])


def test_failed_requests_dropped_are_caught(failing_run) -> None:
    run, table = failing_run
    ok_records = [r for r in run.records if r.outcome == "ok"]
    dropped = dataclasses.replace(run, records=ok_records, phases=phase_table(ok_records))
    findings = check_denominators([_ev(dropped, table, reported=headline(dropped.phases, run.duration_s))])
    checks = {f.evidence["check"] for f in findings}
    assert {"records_missing", "rate_denominator"} <= checks
    [f] = [f for f in findings if f.evidence["check"] == "records_missing"]
    assert f.evidence["runs"]["measure"]["sent"] == 30 and f.evidence["runs"]["measure"]["records"] == len(ok_records)
    # records kept, but the phase table the metrics come from drops the failures
    ok_phases = dataclasses.replace(run, phases=run.phases[run.phases["outcome"] == "ok"])
    assert [f.evidence["check"] for f in check_denominators([_ev(ok_phases, table)])] == ["phase_rows_missing"]


def test_a_rate_over_ok_requests_only_is_caught(failing_run) -> None:
    run, table = failing_run
    n_ok = int((run.phases["outcome"] == "ok").sum())
    n_err = int((run.phases["outcome"] == "error").sum())
    reported = {**headline(run.phases, run.duration_s), "error_rate": n_err / n_ok}  # the planted wrong denominator
    [f] = check_denominators([_ev(run, table, reported=reported)])
    assert (f.cheat, f.severity, f.evidence["check"]) == ("dropped_failures", "refuse", "rate_denominator")
    assert f.evidence["runs"]["measure"]["error_rate"]["over_all_sent"] == pytest.approx(n_err / 30)


def test_cost_over_successful_requests_only_is_caught(failing_run) -> None:
    run, _ = failing_run
    n_ok = int((run.phases["outcome"] == "ok").sum())
    honest = pd.DataFrame([{"arm": "candidate", "requests": 30, "successful": n_ok, "success_rate": n_ok / 30}])
    assert not check_cost(honest, {"candidate": 30})
    planted = honest.assign(requests=n_ok, success_rate=1.0)
    [f] = check_cost(planted, {"candidate": 30})
    assert f.evidence["check"] == "cost_denominator"


# --------------------------------------------------------------------------- the verdict and the whole run


def test_a_post_run_refusal_makes_the_verdict_at_best_inconclusive() -> None:
    refuse = Finding("dropped_failures", "refuse", "3 sent, 2 records", {"check": "records_missing"})
    v = _decide([refuse])
    assert v.decision == "inconclusive" and "benchmark cheat(s) dropped_failures" in v.reasons[0]
    assert any("dropped_failures (refused)" in w for w in v.warnings)
    assert v.to_dict()["lint"][0]["cheat"] == "dropped_failures"
    assert _decide([refuse], ablation_verdict="regresses").decision == "reject"  # a reject stays a reject
    assert _decide([]).decision == "accept" and "lint (V4 benchmark cheats): clean" in _decide([]).reasons


@pytest.mark.slow  # ~10-20 s of real load: off the fast suite, still in CI
def test_lint_run_on_the_fake_candidate_is_clean(tmp_path: Path) -> None:
    """The whole lint over a real measure + ablation + validation of the fake candidate: only the fake note."""
    from inferopt.measure.step import measure
    from inferopt.validate.scenarios import validate

    cfg = _fake_cfg(**{"workload.num_requests": 24, "ablation.repeats": 2})
    measured = measure(cfg, tmp_path / "m")
    ablation = ablate(cfg, tmp_path / "a", system_for_trial=fresh_fake_noise)
    scenarios = validate(
        cfg.candidate_system,
        cfg.workload,
        cfg.validation.scenarios,
        cfg.slo,
        tmp_path / "v",
        warmup_requests=cfg.measure.warmup_requests,
    )
    findings = lint_run(cfg, measured=measured, ablation=ablation, scenarios=scenarios)
    assert [(f.cheat, f.severity) for f in findings] == [("fixed_outputs", "note")]
    summary = lint_summary(findings)
    assert summary["status"] == "clean" and summary["counts"] == {"refuse": 0, "flag": 0, "note": 1}
    # the same run with a failed request dropped from one ablation trial is refused
    run = ablation.runs[0]
    ablation.runs[0] = dataclasses.replace(run, records=run.records[1:], phases=run.phases.iloc[1:])
    refused = lint_run(cfg, measured=measured, ablation=ablation, scenarios=scenarios)
    assert lint_summary(refused)["status"] == "refused"
    assert {f.evidence["check"] for f in refused if f.cheat == "dropped_failures"} >= {"records_missing"}
