"""Planted key outliers (issue 20): the rescaled model answers exactly as before, its keys carry the outlier
channels asked for, and a per-token 4-bit quantizer loses more of its keys than before."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from inferopt.model.builtin import shipped_dir  # noqa: E402
from inferopt.model.quality.corpus import TASK_DATA_DIR as DATA  # noqa: E402
from inferopt.model.quality.key_outliers import key_abs_mean, max_over_median, plant_key_outliers  # noqa: E402

pytestmark = pytest.mark.skipif(shipped_dir("quality-tiny") is None, reason="the quality model is not shipped")


@pytest.fixture(scope="module")
def model_and_prompts():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d = shipped_dir("quality-tiny")
    model, tok = AutoModelForCausalLM.from_pretrained(d).eval(), AutoTokenizer.from_pretrained(d)
    docs = [json.loads(x) for x in (DATA / "kv.jsonl").read_text(encoding="utf-8").splitlines()[:6]]
    return model, [tok(x["prompt"], return_tensors="pt")["input_ids"] for x in docs]


def _layer0_keys(model, ids):
    layer = model.model.layers[0]
    return layer.self_attn.k_proj(layer.input_layernorm(model.model.embed_tokens(ids)))


def _int4_per_token_rel_err(k) -> float:
    """Relative error of asymmetric 4-bit min-max quantization in groups of 64 along each token's channels."""
    g = k.reshape(-1, 64)
    lo, hi = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    step = (hi - lo).clamp(min=1e-8) / 15
    q = torch.round((g - lo) / step) * step + lo
    return float((q - g).norm() / g.norm())


def test_outliers_are_planted_without_changing_a_single_answer(model_and_prompts) -> None:
    model, prompts = model_and_prompts
    with torch.no_grad():
        before = [model(p).logits for p in prompts]
        keys_before = [_layer0_keys(model, p) for p in prompts]
    abs_mean = key_abs_mean(model, prompts)
    assert max(max(r) for r in max_over_median(abs_mean)) < 8  # the trained proxy's keys are flat
    planted = plant_key_outliers(model, abs_mean, ratio=10.0)
    assert len(planted) == model.config.num_hidden_layers * model.config.num_key_value_heads
    with torch.no_grad():
        after = [model(p).logits for p in prompts]
        keys_after = [_layer0_keys(model, p) for p in prompts]
    assert max(float((a - b).abs().max()) for a, b in zip(after, before, strict=True)) < 1e-3
    assert all(min(r) >= 10 for r in max_over_median(key_abs_mean(model, prompts)))
    err_before = _int4_per_token_rel_err(torch.cat(keys_before, 1))
    err_after = _int4_per_token_rel_err(torch.cat(keys_after, 1))
    # each group's range is set by its outlier pair: the other channels lose their precision
    assert err_after > 1.5 * err_before


def test_a_ratio_that_cannot_be_planted_is_refused_before_any_weight_changes(model_and_prompts) -> None:
    model, prompts = model_and_prompts
    w = model.model.layers[0].self_attn.k_proj.weight.clone()
    with pytest.raises(ValueError, match="fix: a positive ratio"):
        plant_key_outliers(model, key_abs_mean(model, prompts[:1]), ratio=0.0)
    assert torch.equal(w, model.model.layers[0].self_attn.k_proj.weight)
