"""The gate's composition (`inferopt.gate.gate`) with the suite and the drift check injected as fakes: it passes,
fails on quality, fails on cost, goes on without a suite, and takes the sessions' tool-call turns as slices — no
Prefect, no model, no patching."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

from inferopt.ablate import AblationResult
from inferopt.ablate.plan import plan_arms
from inferopt.choose import choose
from inferopt.config import load_config
from inferopt.gate import GateResult, gate
from inferopt.gate.suite_gate import SuiteGate
from inferopt.locate import Diagnosis, LocateResult
from inferopt.locate.hardware import load_hardware
from inferopt.measure.runner import RunTags
from inferopt.measure.session import MeasuredRun
from inferopt.records import RequestRecord

ROOT = Path(__file__).resolve().parents[2]
CFG = load_config(ROOT / "configs/candidates/fake-batching.yaml", kind="candidate")
CHOICE = choose("queueing", dict(CFG.changes))  # batching: a pure systems change, the quality gate not required
NO_DRIFT = {"status": "measured", "prompts": 8, "mean_kl": 0.0, "top1_agreement": 1.0}
PATHS = {"baseline": "in-memory proxy", "candidate": "in-memory proxy"}


def _phases(n: int, ttft_ms: float) -> pd.DataFrame:
    """`n` requests that all finish ok within the fake SLO (TTFT 200 ms, TPOT 20 ms, E2E 1 s)."""
    return pd.DataFrame({"outcome": ["ok"] * n, "ttft_ms": ttft_ms, "tpot_ms": 5.0, "e2e_ms": ttft_ms + 100.0})


def _ablation(candidate_s: float = 1.0, baseline_s: float = 2.0) -> AblationResult:
    """Two trials per arm of the same 10 requests; the arms' device time is what differs in cost."""
    rows = [
        {"arm": arm, "repeat": rep, "duration_s": secs, "failed": False, "skipped": False, "phases": _phases(10, 50.0)}
        for arm, secs in (("baseline", baseline_s), ("candidate", candidate_s))
        for rep in range(2)
    ]
    return AblationResult(arms=plan_arms(CFG), order=[], trials=pd.DataFrame(rows), effects=pd.DataFrame(), verdicts={})


LOCATED = LocateResult(
    hardware=load_hardware(CFG.hardware.model_copy(update={"measure_at_runtime": False}), "float32", 1),
    dims=None,
    roofline=pd.DataFrame(),
    measured=pd.DataFrame(),
    kv=pd.DataFrame(),
    diagnosis=Diagnosis("queueing", 0.9, "planted"),
)


class FakeSuite:
    """A suite that returns `status` with a task success rate per arm, and records what it was asked."""

    def __init__(self, status: str, reasons: tuple[str, ...] = ("sliced suite on the proxy: ok",), rates=None):
        self.status, self.reasons, self.calls = status, list(reasons), []
        self.rates = rates if rates is not None else {"baseline": 0.9, "candidate": 0.9}

    def __call__(self, base, cand, settings) -> SuiteGate:
        self.calls.append((base, cand, settings))
        if self.status == "skipped":
            return SuiteGate("skipped", self.reasons)
        table = pd.DataFrame([{"slice": "arithmetic/en", "metric": "acc", "status": self.status}])
        return SuiteGate(
            self.status, self.reasons, model="proxy", table=table, task_success_rate=self.rates, paths=PATHS
        )


def _gate(suite: FakeSuite, ablation: AblationResult | None = None, choice=CHOICE, drift=NO_DRIFT) -> GateResult:
    def drift_fn(base, cand, settings):
        if isinstance(drift, Exception):
            raise drift
        return drift

    return gate(CFG, ablation or _ablation(), LOCATED, choice, suite_fn=suite, drift_fn=drift_fn)


def test_passes_when_the_suite_passes_and_the_candidate_is_cheaper() -> None:
    suite = FakeSuite("pass")
    res = _gate(suite)
    assert (res.quality_status, res.cost_status) == ("pass", "pass")
    assert suite.calls == [(CFG.baseline, CFG.candidate_system, CFG.gate)]  # baseline first, the candidate as run
    assert res.quality_reasons[0] == "sliced suite on the proxy: ok" and "drift: pass" in res.quality_reasons
    assert (
        res.cost_reasons[0].startswith("cost per successful task: baseline")
        and "not more expensive" in res.cost_reasons[0]
    )
    cost = res.cost.set_index("arm")
    assert cost.loc["candidate", "total_cost_usd"] == pytest.approx(cost.loc["baseline", "total_cost_usd"] / 2)
    assert cost.loc["candidate", "successful_tasks"] == pytest.approx(20 * 0.9)  # 20 within SLO x 0.9 answered right
    doc = json.loads(json.dumps(res.to_dict()))  # gate.json
    assert (
        doc["quality"]["suite"]["paths"] == PATHS and doc["quality"]["suite"]["task_success_rate"]["candidate"] == 0.9
    )
    assert doc["quality"]["next_token"] == NO_DRIFT and doc["quality"]["served"]["status"] == "skipped"
    assert doc["cost"] == {"status": "pass", "reasons": list(res.cost_reasons)}
    assert res.metrics()["task_success_rate.candidate"] == 0.9 and res.metrics()["next_token.mean_kl"] == 0.0


def test_fails_on_quality_when_the_suite_fails() -> None:
    res = _gate(FakeSuite("fail", ("sliced suite on the proxy: fail (kv_retrieval/en below the margin)",)))
    assert (res.quality_status, res.cost_status) == ("fail", "pass")
    assert "kv_retrieval/en below the margin" in res.quality_reasons[0]


def test_fails_on_quality_when_a_pure_systems_change_drifts() -> None:
    drifted = {"status": "measured", "prompts": 8, "mean_kl": 0.5, "top1_agreement": 0.9}
    res = _gate(FakeSuite("pass"), drift=drifted)
    assert res.quality_status == "fail"
    assert res.quality_reasons[-1] == "a pure systems change must not change outputs, and these drifted"


def test_fails_on_cost_when_the_candidate_costs_more_per_successful_task() -> None:
    res = _gate(FakeSuite("pass"), _ablation(candidate_s=4.0, baseline_s=2.0))
    assert (res.quality_status, res.cost_status) == ("pass", "fail")
    assert res.cost_reasons[0].endswith("-> more expensive")


def test_cost_counts_the_suite_task_success_rates() -> None:
    """Same device time, but the candidate answers fewer tasks right: more expensive per successful task."""
    res = _gate(FakeSuite("pass", rates={"baseline": 0.9, "candidate": 0.45}), _ablation(1.0, 1.0))
    assert res.cost_status == "fail"


def test_skipped_suite_leaves_the_drift_check_to_decide() -> None:
    why = "the suite cannot evaluate fake/fake arms (a fake engine generates no text)"
    res = _gate(FakeSuite("skipped", (why,)))
    assert res.suite.status == "skipped" and res.quality_status == "pass"  # a pure systems change: no drift is enough
    assert res.quality_reasons[0] == why and "task_success_rate" not in res.cost
    assert res.cost_reasons[0].startswith("cost per successful request:")  # no suite: per request, not per task


def test_skipped_suite_and_a_failed_drift_check_fail_a_gate_that_is_required() -> None:
    """A change that can alter outputs with no quality evidence at all: the gate fails, saying why."""
    required = dataclasses.replace(CHOICE, quality_gate_required=True)
    res = _gate(FakeSuite("skipped", ("quality suite failed to run",)), choice=required, drift=RuntimeError("no GPU"))
    assert res.quality_status == "fail" and res.quality_required
    assert res.next_token == {"status": "skipped", "reason": "drift check failed: RuntimeError: no GPU"}
    assert res.quality_reasons[-1] == "  the change can alter outputs but no quality evidence was measured"


def test_no_trial_to_cost_is_skipped() -> None:
    empty = dataclasses.replace(_ablation(), trials=pd.DataFrame())
    res = _gate(FakeSuite("pass"), empty)
    assert (res.cost_status, res.cost_reasons, res.cost) == ("skipped", ("no successful trial to cost",), None)


def _tool_turns(arm: str, ok: bool, n: int = 40) -> MeasuredRun:
    """`n` session turns that asked for a tool call, all answered right (`ok`) or all with wrong arguments."""
    recs = [
        RequestRecord(
            f"s{i}-t000", "ok", arm=arm, tool_ask_id=f"tool-en-short-{i}", tool_lang="en", tool_expected='{"a":1}',
            tool_answer='{"a":1}' if ok else '{"a":2}', tool_json_valid=True, tool_args_ok=ok, tool_numbers_ok=ok,
            tool_args_source="model",
        )
        for i in range(n)
    ]  # fmt: skip
    return MeasuredRun(tags=RunTags(arm=arm), records=recs)


def test_sessions_tool_turns_are_slices_of_the_suite() -> None:
    """The ablation's own served tool-call answers: a candidate that gets the arguments wrong fails the gate even
    when the suite (on the proxy) passes; the slice and its reason are in the suite's table and reasons."""
    runs = [_tool_turns("baseline", True), _tool_turns("candidate", False)]
    res = _gate(FakeSuite("pass"), dataclasses.replace(_ablation(), runs=runs))
    assert res.suite.status == "fail" and res.quality_status == "fail"
    row = res.suite.table.set_index(["slice", "metric"]).loc[("sessions:task=tool", "args_exact")]
    assert (row["n"], row["base_mean"], row["cand_mean"], row["status"]) == (40, 1.0, 0.0, "fail")
    assert any(r.startswith("  sessions' tool-call turns") for r in res.quality_reasons)
    same = [_tool_turns("baseline", True), _tool_turns("candidate", True)]
    assert _gate(FakeSuite("pass"), dataclasses.replace(_ablation(), runs=same)).quality_status == "pass"
