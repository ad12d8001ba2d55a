"""Quantization / KV / kernel options as config (clear errors), KV and weight bytes measured from tensors, and
memory effects compared like latency (paired CI of difference and ratio, Holm). Fast: a tiny in-memory Llama."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from inferopt.ablate.availability import unavailable_reason  # noqa: E402
from inferopt.ablate.compare import RESOURCE_METRICS, compare_arms, trial_resources  # noqa: E402
from inferopt.ablate.plan import plan_arms  # noqa: E402
from inferopt.ablate.run import _skip_reason  # noqa: E402
from inferopt.config import CandidateConfig, HFSystem, ModelSpec, load_config  # noqa: E402
from inferopt.engines.hf.loop import GreedyBatch, left_pad, make_cache  # noqa: E402
from inferopt.model.loading import kv_cache_bits, quantization_config, quantized_cache_kwargs  # noqa: E402
from inferopt.model.memory import KVMeter, cache_bytes, tensor_bytes, weight_bytes  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TINY = ModelSpec(path="builtin:tiny-llama")


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    "fields,needle",
    [
        ({"bnb_double_quant": True}, "bnb_double_quant: true applies to bitsandbytes 4-bit"),
        ({"bnb_double_quant": True, "weight_quantization": "bnb-int8"}, "fix: weight_quantization: bnb-nf4"),
        ({"kv_residual_length": 32}, "kv_residual_length: 32 applies to quantized KV caches"),
        ({"kv_cache": "int4"}, "kv_cache"),
        ({"weight_quantization": "torchao-int4"}, "torchao-int8"),
        ({"attn_implementation": "flash"}, "flash_attention_2"),
    ],
)
def test_bad_options_name_the_field_and_the_fix(fields: dict, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        HFSystem(model=TINY, **fields)


def test_sub_options_are_accepted_with_their_parent() -> None:
    s = HFSystem(
        model=TINY, weight_quantization="bnb-nf4", bnb_double_quant=True, kv_cache="hqq-int8", kv_residual_length=32
    )
    assert quantization_config(s.weight_quantization, s.bnb_double_quant).bnb_4bit_use_double_quant is True
    assert quantized_cache_kwargs(s.kv_cache, s.kv_residual_length) == {
        "backend": "hqq",
        "nbits": 8,
        "residual_length": 32,
    }
    assert quantized_cache_kwargs("fp8") == {"backend": "fp8"} and quantized_cache_kwargs("static") is None
    assert kv_cache_bits("quantized-int4") == kv_cache_bits("quanto-int4") == 4 and kv_cache_bits("dynamic") is None


def _candidate(changes: dict, extra: list | None = None) -> CandidateConfig:
    d = load_config(ROOT / "configs/candidates/sdpa.yaml").model_dump(mode="json")
    d["changes"] = changes
    d["ablation"] = {"repeats": 2, "extra_arms": extra or []}
    return CandidateConfig.model_validate(json.loads(json.dumps(d)))


def test_extra_arms_are_one_change_alternatives_outside_the_candidate() -> None:
    cand = _candidate(
        {"attn_implementation": "sdpa", "kv_cache": "quanto-int4"}, [{"attn_implementation": "flash_attention_2"}]
    )
    arms = {a.name: a for a in plan_arms(cand)}
    extra = arms["attn_implementation=flash_attention_2"]
    assert extra.role == "extra" and extra.tested and extra.system.attn_implementation == "flash_attention_2"
    assert extra.system.kv_cache == "dynamic"  # only its own field moved
    assert arms["candidate"].system.attn_implementation == "sdpa"  # not part of the combination
    assert "GPU-only" in unavailable_reason(extra.system)
    with pytest.raises(ValueError, match="one dotted path per extra arm"):
        _candidate({"attn_implementation": "sdpa"}, [{"attn_implementation": "eager", "dtype": "bfloat16"}])
    with pytest.raises(ValueError, match="extra_arms\\[0\\].*did you mean"):
        _candidate({"attn_implementation": "sdpa"}, [{"attn_implementaton": "eager"}])


def test_a_combined_candidate_with_an_unrunnable_change_is_skipped_with_the_reason() -> None:
    cand = _candidate({"attn_implementation": "flash_attention_2", "kv_cache": "quanto-int4"})
    arms = {a.name: a for a in plan_arms(cand)}
    why = unavailable_reason(arms["candidate"].system)
    assert why and "flash_attention_2" in why
    assert "combined candidate includes a change that cannot run here" in _skip_reason(arms["candidate"], why)
    assert unavailable_reason(arms["kv_cache"].system) is None  # the runnable change's arm still runs
    assert _skip_reason(arms["attn_implementation"], why) == why


def test_sliding_window_on_llama_is_unavailable_with_the_reason() -> None:
    why = unavailable_reason(HFSystem(model=TINY, sliding_window=64))
    assert why and "llama" in why and "no sliding-window attention" in why


# --------------------------------------------------------------------------- bytes from tensors


def _tiny_llama() -> object:
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=64,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval()


def test_weight_bytes_count_tied_storage_once() -> None:
    model = _tiny_llama()
    naive = sum(p.numel() * p.element_size() for p in model.parameters())  # parameters() dedupes tied weights
    assert weight_bytes(model) == naive
    assert tensor_bytes([model.lm_head.weight, model.model.embed_tokens.weight]) == model.lm_head.weight.nbytes


@pytest.mark.parametrize("kind,max_ratio", [("quanto-int4", 0.45), ("fp8", 0.35)])
def test_quantized_kv_cache_holds_fewer_bytes(kind: str, max_ratio: float) -> None:
    if kind.startswith("quanto"):
        pytest.importorskip("optimum.quanto")
    model = _tiny_llama()
    ids, mask = left_pad([[1] + list(range(3, 60)), [1] + list(range(5, 40))], 0)
    sizes = {}
    for kv in ("dynamic", kind, "static"):
        batch = GreedyBatch(model, ids, mask, 4, kv_cache=kv)
        batch.prefill()
        for _ in range(3):
            batch.step()
        sizes[kv] = cache_bytes(batch.cache)
    # dynamic: 2 layers x (K, V) x 2 kv-heads x 16 dims x fp32 per position, rows x positions (padding included)
    assert sizes["dynamic"] == 2 * 2 * 2 * 16 * 4 * ids.shape[0] * (ids.shape[1] + 3)
    assert sizes[kind] < max_ratio * sizes["dynamic"]
    static = 2 * 2 * 2 * 16 * 4 * ids.shape[0] * (ids.shape[1] + 4)  # preallocated prompt + max new tokens
    assert static <= sizes["static"] <= static + 64  # + a position counter per layer


def test_kv_meter_reports_nothing_until_a_batch_and_then_peak_and_per_token() -> None:
    meter = KVMeter()
    assert meter.summary(1000, cuda=False) == {}  # no zero that would read as a saving
    model = _tiny_llama()
    cache = make_cache(model, "dynamic")
    ids = torch.tensor([[1, 5, 6, 7]])
    model(input_ids=ids, cache=cache, use_cache=True)
    meter.note(cache, 4)
    out = meter.summary(1000, cuda=False)
    assert out["kv_peak_bytes"] == cache_bytes(cache) == 2 * 2 * 2 * 16 * 4 * 4
    assert (
        out["kv_bytes_per_token"] == out["kv_peak_bytes"] / 4
        and out["peak_memory_bytes"] == 1000 + out["kv_peak_bytes"]
    )


# --------------------------------------------------------------------------- effects


def _trials(res: dict[str, list[dict]]) -> pd.DataFrame:
    phases = pd.DataFrame(
        {
            "outcome": ["ok"] * 3,
            "ttft_ms": [1.0, 2.0, 3.0],
            "tpot_ms": [1.0, 1.0, 1.0],
            "e2e_ms": [5.0, 6.0, 7.0],
            "output_len": [4, 4, 4],
        }
    )
    rows = [
        {"arm": arm, "repeat": i, "duration_s": 1.0, "phases": phases, "resources": r}
        for arm, rs in res.items()
        for i, r in enumerate(rs)
    ]
    return pd.DataFrame(rows)


def test_memory_effects_have_paired_cis_and_holm() -> None:
    base = [{"weight_bytes": 1000.0, "kv_peak_bytes": 400.0 + i} for i in range(4)]
    arm = [{"weight_bytes": 250.0, "kv_peak_bytes": 100.0 + 2 * i} for i in range(4)]
    eff = compare_arms(_trials({"baseline": base, "q": arm}), "baseline", "q", alpha=0.05).set_index("metric")
    w, kv = eff.loc["weight_bytes"], eff.loc["kv_peak_bytes"]
    assert w["ratio"] == pytest.approx(0.25) and w["ratio_lo"] == w["ratio_hi"] == pytest.approx(0.25)  # deterministic
    assert w["significant"] and w["direction"] == "better" and w["unit"] == "bytes"
    assert kv["ratio_lo"] < kv["ratio"] < kv["ratio_hi"] < 1.0 and kv["diff_hi"] < 0 and kv["significant"]
    assert "peak_rss_bytes" not in eff.index  # a metric no trial reported: no row


def test_aa_memory_is_no_change_and_frames_without_resources_keep_the_latency_table() -> None:
    same = [{"peak_memory_bytes": 5e6} for _ in range(3)]
    eff = compare_arms(_trials({"baseline": same, "aa": same}), "baseline", "aa", alpha=0.05).set_index("metric")
    assert eff.loc["peak_memory_bytes", "p_value"] == 1.0 and not eff.loc["peak_memory_bytes", "significant"]
    bare = _trials({"baseline": same, "aa": same}).drop(columns=["resources"])
    eff = compare_arms(bare, "baseline", "aa", alpha=0.05)
    assert not set(eff["metric"]) & {m.name for m in RESOURCE_METRICS}


def test_trial_resources_take_the_first_finite_number_per_key() -> None:
    out = trial_resources(
        {"weight_bytes": 10, "kv_peak_bytes": float("nan"), "peak_rss_bytes": True},
        {"kv_peak_bytes": 7, "peak_rss_bytes": 99, "cpu_time_s": np.float64(0.5)},
        None,
    )
    assert out == {"weight_bytes": 10.0, "kv_peak_bytes": 7.0, "peak_rss_bytes": 99.0, "cpu_time_s": 0.5}


def test_sliding_window_is_applied_at_load_and_the_cache_keeps_only_the_window(tmp_path: Path) -> None:
    from transformers import MistralConfig, MistralForCausalLM

    from inferopt.model.loading import load_system_model, resolve_model_dir

    cfg = MistralConfig(
        vocab_size=288,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        sliding_window=None,
    )
    torch.manual_seed(0)
    MistralForCausalLM(cfg).save_pretrained(tmp_path)
    spec = ModelSpec(path=str(tmp_path), tokenizer=str(resolve_model_dir(TINY)))
    sizes = {}
    for window in (None, 8):
        system = HFSystem(model=spec, sliding_window=window)
        assert unavailable_reason(system) is None
        model = load_system_model(system).model
        assert model.config.sliding_window == window
        batch = GreedyBatch(model, torch.tensor([list(range(3, 33))]), None, 3)
        batch.prefill()
        batch.step()
        sizes[window] = cache_bytes(batch.cache)
    assert sizes[None] == 2 * 2 * 2 * 16 * 4 * 31  # every position kept
    assert sizes[8] < sizes[None] / 2  # only about the window


def test_byte_metrics_compose_additively_in_the_interaction_test() -> None:
    from inferopt.ablate.compare import interaction_table

    # peak = weights + KV: weights 1000 -> 270, KV 100 -> 20; together 290 = the sum of both savings, no interaction
    def res(w: float, kv: float, n: int = 3) -> list[dict]:
        return [{"peak_memory_bytes": w + kv + 0.01 * i} for i in range(n)]

    trials = _trials({"baseline": res(1000, 100), "w": res(270, 100), "kv": res(1000, 20), "both": res(270, 20)})
    effects = pd.concat([compare_arms(trials, "baseline", a, alpha=0.05) for a in ("w", "kv", "both")])
    table = interaction_table(trials, "baseline", ["w", "kv"], "both", effects, ("peak_memory_bytes",), alpha=0.05)
    row = table.iloc[0]
    assert row["model"] == "additive" and row["predicted_ratio"] == pytest.approx(290 / 1100, rel=1e-4)
    assert row["interaction"] == pytest.approx(1.0, abs=1e-4) and not row["flagged"]


def test_exactly_additive_bytes_with_float_round_off_are_no_interaction() -> None:
    from inferopt.ablate.compare import interaction_table

    # the cpu-ablation run's per-trial peaks: torchao int8 weights, 4-bit KV, both (bytes add up exactly)
    b, w, kv, both = 41129472.0, 12921600.0, 39168576.0, 10960704.0
    trials = _trials(
        {
            "baseline": [{"peak_memory_bytes": b}] * 3,
            "w": [{"peak_memory_bytes": w}] * 3,
            "kv": [{"peak_memory_bytes": kv}] * 3,
            "both": [{"peak_memory_bytes": both}] * 3,
        }
    )
    effects = pd.concat([compare_arms(trials, "baseline", a, alpha=0.05) for a in ("w", "kv", "both")])
    row = interaction_table(trials, "baseline", ["w", "kv"], "both", effects, ("peak_memory_bytes",), alpha=0.05).iloc[
        0
    ]
    assert row["p_value"] == 1.0 and not row["significant"] and not row["flagged"]
