import pytest

from inferopt.choose.remedies import CATALOGUE, choose, remedies_for, remedies_for_changes
from inferopt.locate.bottleneck import CAUSES


def test_canonical_wrong_choice_queueing_with_kernel_swap_warns():
    choice = choose("queueing", {"attn_implementation": "sdpa"})
    assert not choice.matches
    assert [r.name for r in choice.candidate] == ["attention_kernel"]
    assert "QUEUEING" in choice.warning and "faster kernel" in choice.warning
    assert "admission_control" in choice.warning
    assert not choice.quality_gate_required and choice.numeric_check_required


def test_matching_remedies():
    assert choose("queueing", {"batching.max_queue": 16}).matches
    kv = choose("kv_capacity", {"kv_cache_dtype": "fp8"})
    assert kv.matches and kv.warning is None and kv.quality_gate_required  # K2: shrinking KV is an algorithm change
    low = choose("bandwidth", {"dtype": "bfloat16"})
    assert low.matches and low.quality_gate_required
    assert choose("compute", {"attn_implementation": "sdpa"}).matches
    assert choose("kv_capacity", {"kv_cache.paged": True}).matches  # parent field covers the child path


def test_kernel_does_not_fix_kv_capacity_and_spec_decoding_not_prefill():
    assert "K3" in choose("kv_capacity", {"attn_implementation": "sdpa"}).warning
    assert not choose("compute", {"speculative": {"k": 4}}).matches


def test_unknown_fields_need_the_gate_and_none_warns():
    choice = choose("bandwidth", {"device": "cuda"})
    assert choice.unmatched_fields == ("device",) and not choice.matches and choice.quality_gate_required
    assert "NO BOTTLENECK" in choose("none", {"dtype": "bfloat16"}).warning
    with pytest.raises(ValueError):
        choose("slowness", {"dtype": "bfloat16"})


def test_catalogue_is_consistent():
    for cause in CAUSES:
        if cause != "none":
            assert remedies_for(cause), cause
    for remedy in CATALOGUE:
        assert set(remedy.targets) <= set(CAUSES) and remedy.config_fields and remedy.risk and remedy.effect
    found, unmatched = remedies_for_changes({"batching.batch_wait_ms": 1.0, "batching.max_batch_size": 8})
    assert {r.name for r in found} == {"batch_wait_window", "batch_size"} and not unmatched


def test_the_hf_quantization_knobs_are_catalogued_and_need_the_gate():
    found, unmatched = remedies_for_changes(
        {
            "weight_quantization": "torchao-int8",
            "kv_cache": "quanto-int4",
            "kv_residual_length": 64,
            "bnb_double_quant": True,
        }
    )
    assert {r.name for r in found} == {"low_precision_weights", "kv_quantization"} and not unmatched
    assert choose("bandwidth", {"weight_quantization": "nf4"}).matches
    assert choose("kv_capacity", {"kv_cache": "quanto-int2"}).matches
    assert choose("bandwidth", {"weight_quantization": "nf4"}).quality_gate_required
