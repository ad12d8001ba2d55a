"""Output lengths as the load says (`workload.output_lengths`): the defaults (forced for trace replay and
capacity probes, natural for synthetic loads and for arms that can change outputs), what each engine is sent,
the pre-run refusal of a declared forced an engine cannot do, and the lint both ways: forced lengths shorter
than production's, and natural runs whose lengths collapsed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pandas as pd
import pytest

from inferopt.choose.output_lengths import arm_workload, can_change_outputs
from inferopt.config import (
    ConfigError,
    ConstantArrivals,
    FakeSystem,
    HFSystem,
    LengthConfig,
    ModelSpec,
    OpenAISystem,
    TraceConfig,
    WorkloadConfig,
    load_config,
)
from inferopt.config.precheck import check_candidate
from inferopt.engines import make_engine
from inferopt.engines.base import FinishEvent, GenRequest, TokenEvent
from inferopt.measure.runner import RunTags, materialize
from inferopt.measure.session import MeasuredRun, run_system
from inferopt.validate.capacity import probe_table
from inferopt.verdict.lint import RunEvidence, check_config, check_outputs
from inferopt.workload.build import build_workload
from inferopt.workload.output_lengths import declared_default, mark, production_output_median, run_mode

ROOT = Path(__file__).resolve().parents[2]
FAKE = ROOT / "configs/candidates/fake-batching.yaml"
TRACE = ROOT / "configs/traces/example.jsonl"
FAST = {"context_ms": 0.1, "prefill_base_ms": 0.5, "prefill_ms_per_token": 0.01, "decode_step_ms": 0.3}


def _synthetic(**kw) -> WorkloadConfig:
    lengths = LengthConfig(input_median=16, output_median=12, output_max=40)
    return WorkloadConfig(name="s", num_requests=24, arrival=ConstantArrivals(rate_per_s=500), lengths=lengths, **kw)


def _trace(**kw) -> WorkloadConfig:
    return WorkloadConfig(name="t", trace=TraceConfig(path=str(TRACE)), **kw)


def test_defaults_forced_for_replay_natural_for_synthetic_and_declared_wins() -> None:
    assert declared_default(_trace()) == "forced" and declared_default(_synthetic()) == "natural"
    assert declared_default(_trace(output_lengths="natural")) == "natural"
    assert build_workload(_trace()).attrs["output_lengths"] == "forced"
    assert build_workload(_synthetic(output_lengths="forced")).attrs["output_lengths"] == "forced"


def test_capacity_probes_default_to_forced_unless_declared() -> None:
    assert probe_table(_synthetic(), 100.0).attrs["output_lengths"] == "forced"
    assert probe_table(_synthetic(output_lengths="natural"), 100.0).attrs["output_lengths"] == "natural"


def test_arms_that_can_change_outputs_default_to_natural() -> None:
    cfg = load_config(FAKE, kind="candidate", **{"workload": _trace().model_dump()})
    assert not can_change_outputs(cfg.changes) and arm_workload(cfg) is cfg.workload
    quant = cfg.model_copy(update={"changes": {"dtype": "bfloat16"}})
    assert can_change_outputs(quant.changes) and arm_workload(quant).output_lengths == "natural"
    declared = quant.model_copy(update={"workload": _trace(output_lengths="forced")})
    assert arm_workload(declared).output_lengths == "forced"  # declared wins (and the lint flags it, below)


def test_run_mode_falls_back_to_natural_where_the_engine_cannot_force() -> None:
    table = mark(build_workload(_synthetic()), "forced")
    plain = OpenAISystem(base_url="http://127.0.0.1:9", served_model="m", vocab_size=50)
    assert run_mode(table, FakeSystem().capabilities) == "forced" and run_mode(table, plain.capabilities) == "natural"
    assert all(r.force_length for r in materialize(table, 100, force_lengths=True))
    assert not any(r.force_length for r in materialize(table, 100))


def test_a_run_records_the_mode_it_sent() -> None:
    run = run_system(FakeSystem(**FAST), build_workload(_trace()), RunTags(arm="a"), timeout_s=10)
    assert not run.failed and run.engine_info["output_lengths"] == "forced"


def test_declared_forced_on_an_endpoint_that_cannot_is_refused_before_the_run(tmp_path) -> None:
    (tmp_path / "sys.yaml").write_text(
        "engine: openai\nname: o\nbase_url: http://127.0.0.1:8000\nserved_model: m\nvocab_size: 288\n"
    )
    over = {"baseline": str(tmp_path / "sys.yaml"), "changes": {"temperature": 0.5}}
    over["workload.output_lengths"] = "forced"
    with pytest.raises(ConfigError, match=r"output_lengths.*cannot hold a request.*forced_length_params: true"):
        check_candidate(FAKE, over)
    check_candidate(FAKE, {**over, "workload.output_lengths": "natural"})  # natural is fine


# ------------------------------------------------------------------ the lint, both ways


def _cfg(**over):
    return load_config(FAKE, kind="candidate", **over)


def _forced_checks(cfg) -> set[str]:
    return {f.evidence["check"] for f in check_config(cfg) if f.severity == "flag" and f.cheat == "fixed_outputs"}


def test_forced_lengths_shorter_than_production_are_flagged_and_production_lengths_are_not() -> None:
    base = {"workload.output_lengths": "forced", "workload.lengths.output_median": 40}
    assert "forced_short" not in _forced_checks(_cfg(**base, **{"workload.lengths.output_max": 200}))
    short = _cfg(**base, **{"workload.lengths.output_max": 12, "workload.lengths.output_min": 1})
    [f] = [f for f in check_config(short) if f.evidence.get("check") == "forced_short"]
    assert f.severity == "flag" and f.evidence["production_median"] == 40.0 and "fix:" in f.message
    assert "forced_short" not in _forced_checks(_cfg(**{**base, "workload.output_lengths": "natural"}))


def test_a_trace_limit_that_keeps_only_short_rows_is_flagged(tmp_path) -> None:
    rows = [f'{{"timestamp": {i}, "input_len": 8, "output_len": {4 if i < 10 else 60}}}' for i in range(30)]
    (tmp_path / "t.jsonl").write_text("\n".join(rows) + "\n")
    wl = {"name": "t", "trace": {"path": str(tmp_path / "t.jsonl"), "limit": 10}}
    assert production_output_median(WorkloadConfig(**wl)) == 60.0
    assert "forced_short" in _forced_checks(_cfg(workload=wl))
    assert "forced_short" not in _forced_checks(_cfg(workload={**wl, "trace": {"path": wl["trace"]["path"]}}))


def test_declared_forced_on_an_output_changing_arm_is_flagged() -> None:
    assert "forced_on_output_change" not in _forced_checks(_cfg(**{"workload.output_lengths": "forced"}))
    changed = _cfg(**{"workload.output_lengths": "forced", "changes": {"eos_token_id": 5}})
    assert "forced_on_output_change" in _forced_checks(changed)


def _phases(outputs: list[int], target: int) -> pd.DataFrame:
    return pd.DataFrame({"outcome": "ok", "output_len": outputs, "target_output_len": target})


def _evidence(outputs: list[int], target: int, mode: str | None) -> RunEvidence:
    info = {} if mode is None else {"output_lengths": mode}
    run = MeasuredRun(tags=RunTags(arm="a"), phases=_phases(outputs, target), engine_info=info)
    return RunEvidence("measure", "measure", run, sent=len(outputs))


def test_natural_lengths_that_collapse_are_flagged_and_healthy_ones_are_not() -> None:
    collapsed = [1, 2, 3, 2, 4, 1, 5, 3]
    for mode in ("natural", None):  # a run that does not say is natural
        [f] = check_outputs([_evidence(collapsed, 24, mode)])
        assert f.severity == "flag" and f.evidence["check"] == "natural_collapsed" and "fix:" in f.message
    assert not check_outputs([_evidence([20, 14, 24, 9, 17, 22, 11, 19], 24, "natural")])
    assert not check_outputs([_evidence(collapsed, 24, "forced")])  # forced runs are judged by the pre-run lint


@pytest.mark.slow
def test_hf_forced_request_runs_past_eos_and_a_natural_one_stops() -> None:
    system = HFSystem(model=ModelSpec(path="builtin:quality-tiny"), attn_implementation="sdpa")

    async def lengths() -> list[tuple[int, str | None]]:
        engine = make_engine(system)
        await engine.start()
        out = []
        try:
            for i, force in enumerate((False, True) * 3):
                req = GenRequest(f"r{i}", list(range(10 + i, 30 + i)), 32, force_length=force)
                n, reason = 0, None
                async for ev in engine.stream(req):
                    n += len(ev.token_ids) if isinstance(ev, TokenEvent) else 0
                    reason = ev.server.finish_reason if isinstance(ev, FinishEvent) else reason
                out.append((n, reason))
        finally:
            await engine.stop()
        return out

    got = asyncio.run(lengths())
    assert all(n == 32 for n, _ in got[1::2])  # forced: every one to its target, past any EOS
    assert any(reason == "eos" and n < 32 for n, reason in got[0::2]), got  # natural: this model stops early
