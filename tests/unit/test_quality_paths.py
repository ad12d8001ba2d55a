"""How the quality gate evaluates each arm (issue 6): hf in memory, vLLM served with the arm's knobs on the
quality model, OpenAI endpoints served only for `quality_model: system`; the labels and skipped tasks reach
the result. The suite itself is replaced by a stub here (the real runs are in tests/integration)."""

from __future__ import annotations

import pandas as pd
import pytest

from inferopt.config import (
    FakeSystem,
    GateSettings,
    HFSystem,
    ModelSpec,
    OpenAISystem,
    VLLMSystem,
)
from inferopt.gate import suite_gate
from inferopt.gate.lmeval import SUITE, SuiteResult
from inferopt.gate.served import quality_system
from inferopt.model.builtin import shipped_dir

VLLM = VLLMSystem(
    name="v",
    model=ModelSpec(path="builtin:tiny-llama"),
    max_model_len=2048,
    max_num_seqs=8,
    max_num_batched_tokens=256,
    enable_chunked_prefill=True,
    kv_cache_dtype="fp8",
    max_num_queued_reqs=4,
)
OPENAI = OpenAISystem(base_url="http://127.0.0.1:9", served_model="m", vocab_size=100)
HF = HFSystem(model=ModelSpec(path="builtin:tiny-llama"))


def _samples(values: list[float], with_mc: bool = True) -> pd.DataFrame:
    rows = [
        {
            "task_name": "inferopt_arith",
            "doc_id": i,
            "id": f"a{i}",
            "task": "arith",
            "lang": "en",
            "context": "short",
            "risk": "normal",
            "metric": "exact",
            "value": v,
            "response": str(v),
        }
        for i, v in enumerate(values)
    ]
    if with_mc:
        rows += [
            {
                "task_name": "inferopt_mc",
                "doc_id": i,
                "id": f"m{i}",
                "task": "mc",
                "lang": "en",
                "context": "short",
                "risk": "normal",
                "metric": "acc",
                "value": 1.0,
                "p_gold": 0.9,
                "p_max": 0.9,
                "pred": 0,
                "gold": 0,
                "response": "0",
            }
            for i in range(len(values))
        ]
    return pd.DataFrame(rows)


def test_quality_system_keeps_the_arms_knobs_on_the_quality_model(tmp_path) -> None:
    (tmp_path / "config.json").write_text('{"max_position_embeddings": 512}')
    q, notes = quality_system(VLLM, GateSettings(), tmp_path)
    assert q.model.path == "builtin:quality-tiny"
    assert (q.enable_chunked_prefill, q.max_num_batched_tokens, q.kv_cache_dtype, q.max_num_seqs) == (
        True,
        256,
        "fp8",
        8,
    )
    assert q.max_model_len == 512 and not q.tracing and q.max_num_queued_reqs is None
    assert any("2048 -> 512" in n for n in notes)
    own, _ = quality_system(VLLM, GateSettings(quality_model="system"), tmp_path)
    assert own.model.path == "builtin:tiny-llama"


@pytest.mark.parametrize(
    ("system", "quality_model", "path"),
    [
        (HF, "builtin:quality-tiny", "in-memory proxy"),
        (HF, "system", "in-memory"),
        (VLLM, "builtin:quality-tiny", "served"),
        (VLLM, "system", "served"),
        (OPENAI, "builtin:quality-tiny", "in-memory proxy"),
        (OPENAI, "system", "served"),
        (FakeSystem(), "builtin:quality-tiny", None),
    ],
)
def test_evaluation_path(system, quality_model: str, path: str | None) -> None:
    assert suite_gate.evaluation_path(system, GateSettings(quality_model=quality_model)) == path


def _stub(monkeypatch: pytest.MonkeyPatch, by_engine: dict[str, SuiteResult]) -> list[str]:
    called: list[str] = []

    def run_arm(system, gate, tasks=SUITE):
        called.append(system.engine)
        return by_engine[system.engine], f"stub {system.engine}"

    monkeypatch.setattr(suite_gate, "run_arm", run_arm)
    return called


def test_served_arms_are_labelled_and_a_skipped_task_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    served = SuiteResult(
        {}, _samples([1.0] * 30, with_mc=False), skipped={"inferopt_mc": "no prompt log-probabilities"}
    )
    called = _stub(monkeypatch, {"vllm": served})
    res = suite_gate.sliced_gate(VLLM, VLLM.model_copy(update={"max_num_seqs": 4}), GateSettings(quality_bootstrap=200))
    assert called == ["vllm", "vllm"]
    assert res.paths == {"baseline": "served", "candidate": "served"}
    assert res.skipped_tasks["candidate"] == {"inferopt_mc": "no prompt log-probabilities"}
    assert any("task inferopt_mc skipped (no prompt log-probabilities)" in r for r in res.reasons)
    assert any("baseline [served]" in r for r in res.reasons)
    assert res.status == "pass" and res.calibration.empty and not res.table.empty


def test_a_drop_on_a_served_arm_still_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    _stub(monkeypatch, {"hf": SuiteResult({}, _samples([1.0] * 40)), "vllm": SuiteResult({}, _samples([0.0] * 40))})
    res = suite_gate.sliced_gate(HF, VLLM, GateSettings(quality_bootstrap=200))
    assert res.paths == {"baseline": "in-memory proxy", "candidate": "served"}
    assert res.status == "fail"


def test_two_external_endpoints_on_the_proxy_claim_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    _stub(monkeypatch, {"openai": SuiteResult({}, _samples([1.0] * 30))})
    res = suite_gate.sliced_gate(OPENAI, OPENAI.model_copy(update={"name": "o2"}), GateSettings(quality_bootstrap=200))
    assert res.status == "skipped" and res.paths["candidate"] == "in-memory proxy"
    assert res.task_success_rate["candidate"] == 1.0


def test_a_server_that_does_not_start_skips_the_suite_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    def run_arm(system, gate, tasks=SUITE):
        raise RuntimeError("vllm server exited with code 1")

    monkeypatch.setattr(suite_gate, "run_arm", run_arm)
    res = suite_gate.sliced_gate(VLLM, VLLM, GateSettings())
    assert res.status == "skipped" and "baseline (served)" in res.reasons[0] and "exited with code 1" in res.reasons[0]


@pytest.mark.skipif(
    shipped_dir("quality-tiny") is None, reason="the trained quality model is not shipped in this checkout"
)
def test_the_proxy_context_comes_from_the_shipped_model() -> None:
    q, _ = quality_system(VLLM, GateSettings())
    assert q.max_model_len == 512


def _kv_samples(correct_below: int) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "task_name": "inferopt_kv",
                "doc_id": i,
                "id": f"k{i}",
                "task": "kv",
                "lang": "en",
                "context": "long",
                "risk": "high",
                "distance": float(d),
                "metric": "exact",
                "value": float(d < correct_below),
                "response": "",
            }
            for i, d in enumerate(range(0, 448, 8))
        ]
    )


def test_the_gate_reports_retrieval_by_distance(monkeypatch: pytest.MonkeyPatch) -> None:
    """A candidate that forgets beyond 128 tokens: the long slice fails and the distance table says where."""
    _stub(monkeypatch, {"hf": SuiteResult({}, _kv_samples(448)), "vllm": SuiteResult({}, _kv_samples(128))})
    res = suite_gate.sliced_gate(HF, VLLM, GateSettings(quality_bootstrap=200))
    assert res.status == "fail"
    pooled = res.distance[res.distance["lang"] == "all"].set_index("bucket_lo")
    assert pooled.loc[64, "cand_acc"] == 1.0 and pooled.loc[128, "cand_acc"] == 0.0
    assert (pooled["base_acc"] == 1.0).all()
    assert any("retrieval by key-to-query distance" in r for r in res.reasons)
    assert any(r.strip().startswith("128-191 1.000 -> 0.000") for r in res.reasons)


def test_a_cache_runs_a_shared_baseline_once_and_keeps_the_statistics(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three candidates against one baseline: the baseline runs once; the tables equal uncached runs."""
    asked: list[tuple[str, tuple[str, ...]]] = []
    by_name = {"hf": _kv_samples(448), "c1": _kv_samples(128), "c2": _kv_samples(256), "c3": _kv_samples(448)}

    def run_arm(system, gate, tasks=SUITE):
        asked.append((system.name, tasks))
        return SuiteResult({}, by_name[system.name]), f"stub {system.name}"

    monkeypatch.setattr(suite_gate, "run_arm", run_arm)
    gate, kv = GateSettings(quality_bootstrap=200), ("inferopt_kv",)
    base = HF.model_copy(update={"name": "hf"})
    cands = [
        HF.model_copy(update={"name": n, "kv_cache": "quanto-int4", "kv_residual_length": r})
        for n, r in (("c1", 32), ("c2", 64), ("c3", 96))
    ]
    cache: dict = {}
    cached = [suite_gate.sliced_gate(base, c, gate, tasks=kv, cache=cache) for c in cands]
    assert [n for n, _ in asked] == ["hf", "c1", "c2", "c3"] and {t for _, t in asked} == {kv}
    plain = [suite_gate.sliced_gate(base, c, gate, tasks=kv) for c in cands]
    assert len(asked) == 10  # without a cache every call runs both arms
    for a, b in zip(cached, plain, strict=True):
        pd.testing.assert_frame_equal(a.table, b.table)
        assert a.status == b.status
    assert [r.status for r in cached] == ["fail", "fail", "pass"]
    other = base.model_copy(
        update={"torch_threads": base.torch_threads + 1}
    )  # any setting of the system is part of the key
    assert suite_gate.arm_key(other, gate, kv) != suite_gate.arm_key(base, gate, kv)
    assert suite_gate.arm_key(base, gate, SUITE) != suite_gate.arm_key(base, gate, kv)


def test_arms_that_differ_only_in_the_serving_queue_are_evaluated_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batching candidate on hf: the in-memory suite reads nothing of the queue, so it runs once and says so;
    a setting it does read (the KV cache) and a served arm's scheduling still run each arm."""
    called = _stub(
        monkeypatch, {"hf": SuiteResult({}, _samples([1.0] * 30)), "vllm": SuiteResult({}, _samples([1.0] * 30))}
    )
    gate = GateSettings(quality_bootstrap=200)
    batching = HF.model_copy(
        update={"name": "bigger-batch", "batching": HF.batching.model_copy(update={"max_batch_size": 16})}
    )
    res = suite_gate.sliced_gate(HF, batching, gate)
    assert called == ["hf"] and res.status == "pass"
    assert "reused" in res.evaluated["candidate"] and "reused" not in res.evaluated["baseline"]
    suite_gate.sliced_gate(HF, batching.model_copy(update={"kv_cache": "quanto-int4"}), gate)
    assert called == ["hf", "hf", "hf"]
    suite_gate.sliced_gate(VLLM, VLLM.model_copy(update={"name": "v2", "max_num_seqs": 4}), gate)
    assert called[3:] == ["vllm", "vllm"]
