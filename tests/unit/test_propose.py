"""Proposals from the cause (issue 14): each engine's declared knob spaces load on its real system configs,
the located cause picks only the levers that serve it, and bad input (a knob the engine lacks, an unknown
cause or control lever, nothing to propose) gets a clear message."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferopt.choose.propose import propose
from inferopt.choose.remedies import CATALOGUE
from inferopt.config import FakeSystem
from inferopt.config.knob_spaces import KNOB_SPACES, KnobSpace, current_value, points
from inferopt.config.loader import load_config
from inferopt.config.models import apply_changes, changed_fields

ROOT = Path(__file__).resolve().parents[2]
HF = load_config(ROOT / "configs/systems/hf-tiny.yaml")
VLLM = load_config(ROOT / "configs/systems/vllm-tiny.yaml")
OPENAI = load_config(ROOT / "configs/systems/openai-example.yaml")
BATCHING_LEVERS = {"batch_size", "batch_wait_window", "admission_control", "continuous_batching"}


@pytest.mark.parametrize("system", [HF, VLLM, FakeSystem()], ids=lambda s: s.engine)
def test_every_declared_space_names_a_catalogue_remedy_covering_a_real_field(system):
    by_name = {r.name: r for r in CATALOGUE}
    for space in KNOB_SPACES[system.engine]:
        remedy = by_name[space.remedy]
        assert any(space.field == f or space.field.startswith(f + ".") for f in remedy.config_fields), space
        current_value(system, space.field)  # the field exists
        assert space.field.split(".")[0] in system.capabilities.knobs  # and is a lever the system declares
        kept, dropped = points(system, space)
        for value, s in kept:  # each point changes exactly that field, to that value
            assert changed_fields(system, s) == {space.field: (current_value(system, space.field), value)}
        assert len(kept) + len(dropped) >= 1


def test_a_queue_bound_hf_load_gets_only_batching_and_admission_levers():
    got = propose(HF, "queueing")
    assert {p.remedy for p in got.proposals} == {"batch_size", "batch_wait_window", "admission_control"}
    assert {p.remedy for p in got.proposals} <= BATCHING_LEVERS
    size = next(p for p in got.proposals if p.field == "batching.max_batch_size")
    assert size.values == (2, 4, 8, 16) and size.baseline_value == 1 and size.cause == "queueing"
    assert ("attn_implementation", "attention_kernel serves compute/bandwidth/host_overhead, not queueing") in (
        got.not_proposed
    )
    assert got.table()["value"].tolist()[:4] == ["2", "4", "8", "16"]


def test_a_kv_bound_vllm_load_gets_kv_levers_and_fewer_sequences():
    got = propose(VLLM, "kv_capacity", cpu_flags=frozenset({"avx2", "avx512f"}))
    assert {p.remedy for p in got.proposals} == {"kv_quantization", "kv_budget"}
    fields = {p.field: p.values for p in got.proposals}
    assert fields["kv_cache_memory_bytes"] == (2 * 268435456, 4 * 268435456)
    assert fields["max_num_seqs"] == (8, 4)  # half and a quarter of the baseline's 16
    assert fields["kv_cache_dtype"] == ("fp8",)


def test_an_fp8_kv_cache_is_not_proposed_on_a_cpu_vllm_cannot_run_it_on():
    # vLLM-CPU exits at start-up with "FP8 KV cache on CPU requires x86 with AVX-512 or AMX" (seen on an AVX2 EPYC)
    got = propose(VLLM, "kv_capacity", cpu_flags=frozenset({"avx2", "fma"}))
    assert {p.remedy for p in got.proposals} == {"kv_budget"}
    why = dict(got.not_proposed)["kv_cache_dtype"]
    assert "avx512f or amx_tile" in why and "this host has none" in why
    gpu = VLLM.model_copy(update={"device": "cuda"})  # the CPU's flags do not matter off the CPU
    assert "kv_quantization" in {p.remedy for p in propose(gpu, "kv_capacity", cpu_flags=frozenset()).proposals}


def test_slice_causes_add_their_levers_tagged_with_their_cause():
    got = propose(HF, "queueing", slice_causes=("bandwidth",))
    causes = {p.field: p.cause for p in got.proposals}
    assert causes["batching.max_batch_size"] == "queueing"  # serves both: tagged with the overall cause
    assert causes["weight_quantization"] == "bandwidth" and causes["kv_cache"] == "bandwidth"
    assert causes["speculative"] == "bandwidth"
    batched = propose(apply_changes(HF, {"batching.max_batch_size": 4}), "queueing", slice_causes=("bandwidth",))
    why = dict(batched.not_proposed)["speculative"]  # the hf draft-verify loop needs batch size 1: refused, said so
    assert "every value refused" in why and "max_batch_size" in why


def test_a_control_arm_is_declared_as_such():
    got = propose(HF, "queueing", control="attention_kernel")
    arm = next(p for p in got.proposals if p.remedy == "attention_kernel")
    assert arm.control and arm.cause == "" and arm.values == ("sdpa", "flex_attention")  # eager is the baseline's
    assert "3 levers" in got.message  # the control arm is not counted as a proposal


def test_nothing_to_propose_says_why():
    assert "no bottleneck located" in propose(HF, "none").message and not propose(HF, "none").proposals
    endpoint = propose(OPENAI, "queueing")
    assert not endpoint.proposals and "declares no knob space" in endpoint.message
    batching_only = [KnobSpace("batch_size", "batching.max_batch_size", values=(2, 8))]
    fake = propose(FakeSystem(), "kv_capacity", spaces=batching_only)
    assert not fake.proposals and "no lever of the fake engine serves kv_capacity" in fake.message
    unset = propose(FakeSystem(), "kv_capacity")  # a budget left unlimited has nothing to scale: said, not raised
    assert [p.field for p in unset.proposals] == ["kv_cache_dtype"]
    assert (
        "kv_cache_tokens",
        "every value refused: 2.0: unset (unlimited) in the baseline: nothing to scale; "
        "4.0: unset (unlimited) in the baseline: nothing to scale",
    ) in unset.not_proposed


def test_bad_input_is_refused_with_the_fields():
    with pytest.raises(ValueError, match="unknown cause 'slow'"):
        propose(HF, "slow")
    with pytest.raises(ValueError, match="control arm 'kv_budget': not a lever of the hf engine"):
        propose(HF, "queueing", control="kv_budget")
    with pytest.raises(ValueError, match="has no field 'batching.max_batch'.*max_batch_size"):
        points(HF, KnobSpace("batch_size", "batching.max_batch", values=(2,)))
    with pytest.raises(ValueError, match="empty"):
        KnobSpace("batch_size", "batching.max_batch_size")
