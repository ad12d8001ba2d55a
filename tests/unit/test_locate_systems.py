"""Step 2 on every engine kind: a vLLM baseline has no `batching` block — its batch bound is `max_num_seqs`
(vLLM's default 256 when unset) and its preemption counter feeds the KV-capacity rule."""

from __future__ import annotations

from pathlib import Path

from inferopt.ablate.availability import unavailable_reason
from inferopt.config import load_config
from inferopt.locate.step import locate_step, max_batch_size
from inferopt.measure.runner import RunTags
from inferopt.measure.session import run_system
from inferopt.workload.build import build_workload

ROOT = Path(__file__).resolve().parents[2]


def test_locate_runs_on_a_vllm_baseline() -> None:
    cand = load_config(ROOT / "configs/candidates/vllm-chunked-prefill.yaml")
    fake = load_config(ROOT / "configs/candidates/fake-batching.yaml")
    run = run_system(fake.baseline, build_workload(fake.workload), RunTags(arm="baseline"), timeout_s=30)
    assert not run.failed
    res = locate_step(cand, run.phases, server_metrics={"num_preemptions_total": 0.0})
    assert res.dims is not None and len(res.roofline) and len(res.kv)
    assert res.diagnosis.cause
    assert max_batch_size(cand.baseline) == 16
    assert max_batch_size(cand.baseline.model_copy(update={"max_num_seqs": None})) == 256


def test_a_vllm_arm_without_its_interpreter_is_skipped_with_the_fix() -> None:
    cand = load_config(ROOT / "configs/candidates/vllm-chunked-prefill.yaml")
    reason = unavailable_reason(cand.baseline.model_copy(update={"python": "/nonexistent/bin/python"}))
    assert reason is not None and "setup_vllm.sh" in reason
