import math

import pytest

from inferopt.locate.roofline import (
    ModelDims,
    PhasePoint,
    achieved,
    arithmetic_intensity,
    bound,
    decode_bytes,
    decode_flops,
    perf_max_flops_per_s,
    prefill_bytes,
    prefill_flops,
    ridge_point,
    roofline_table,
    weight_bytes,
)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _tiny_llama():
    cfg = transformers.LlamaConfig(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        tie_word_embeddings=False,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    return cfg, transformers.LlamaForCausalLM(cfg).eval()


@pytest.mark.parametrize("context_len", [16, 96])
def test_flops_match_flop_counter_mode(context_len):
    from torch.utils.flop_counter import FlopCounterMode

    cfg, model = _tiny_llama()
    dims = ModelDims.from_hf_config(cfg)
    batch = 2
    ids = torch.randint(0, cfg.vocab_size, (batch, context_len), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        with FlopCounterMode(display=False) as counter:
            out = model(ids, logits_to_keep=1, use_cache=True)
        counted_prefill = counter.get_total_flops()
        nxt = out.logits[:, -1:].argmax(-1)
        with FlopCounterMode(display=False) as counter:
            model(nxt, cache=out.cache, use_cache=True, logits_to_keep=1)
        counted_decode = counter.get_total_flops()
    assert prefill_flops(dims, context_len, batch) == pytest.approx(counted_prefill, rel=0.02)
    assert decode_flops(dims, context_len, batch) == pytest.approx(counted_decode, rel=0.02)


def test_dims_from_config_object_and_dict_and_param_count():
    cfg, model = _tiny_llama()
    dims = ModelDims.from_hf_config(cfg)
    assert dims == ModelDims.from_hf_config(cfg.to_dict())
    assert (dims.n_heads, dims.n_kv_heads, dims.head_dim) == (4, 2, 16)
    assert dims.n_params == sum(p.numel() for p in model.parameters())
    assert (
        ModelDims.from_hf_config(
            {
                "num_hidden_layers": 2,
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_attention_heads": 4,
                "vocab_size": 10,
            }
        ).n_kv_heads
        == 4
    )


def test_logits_and_causal_options():
    dims = ModelDims(2, 64, 160, 4, 2, 16, 96)
    all_logits = prefill_flops(dims, 10, 1, logits_to_keep=0)
    last = prefill_flops(dims, 10, 1, logits_to_keep=1)
    assert all_logits - last == pytest.approx(2 * 9 * 64 * 96)
    full = prefill_flops(dims, 10, 1)
    causal = prefill_flops(dims, 10, 1, count_masked=False)
    assert full - causal == pytest.approx(4 * 2 * 4 * 16 * (100 - 55))


# an 8B-class model (Llama-3-8B shapes) on an H100-class roof
BIG = ModelDims(n_layers=32, hidden=4096, intermediate=14336, n_heads=32, n_kv_heads=8, head_dim=128, vocab=128256)
PEAK, BW = 989e12, 3.35e12


def test_prefill_compute_bound_decode_bandwidth_bound():
    table = roofline_table(
        BIG,
        PEAK,
        BW,
        [
            PhasePoint("prefill", batch=1, n_tokens=2048),
            {"phase": "decode", "context_len": 2048, "batch": 1},
            {"phase": "decode", "context_len": 2048, "batch": 64},
        ],
    )
    assert list(table.phase) == ["prefill", "decode", "decode"]
    assert list(table.bound) == ["compute", "bandwidth", "bandwidth"]
    pre, dec1, dec64 = table.itertuples()
    assert dec64.ai_flop_per_byte > dec1.ai_flop_per_byte  # batching reuses weights (C2)
    # every weight once except the untied embedding table, of which only the gathered row is read; + KV read
    weights_read = weight_bytes(BIG, 2) - BIG.vocab * BIG.hidden * 2
    assert dec1.bytes == pytest.approx(weights_read + 2048 * 131072, rel=0.001)
    for row in table.itertuples():
        assert row.t_min_s == pytest.approx(max(row.flops / PEAK, row.bytes / BW))
        assert row.perf_max_flop_per_s == pytest.approx(min(PEAK, row.ai_flop_per_byte * BW))


def test_materialized_scores_add_attention_io():
    flash = prefill_bytes(BIG, 4096, 1)
    eager = prefill_bytes(BIG, 4096, 1, materialize_scores=True)
    assert eager - flash == pytest.approx(4 * 32 * 32 * 4096 * 4096 * 2)
    assert decode_bytes(BIG, 100, 4, kv_bytes_per_elem=1) < decode_bytes(BIG, 100, 4, kv_bytes_per_elem=2)


def test_roofline_primitives():
    assert ridge_point(100.0, 10.0) == 10.0
    assert perf_max_flops_per_s(5.0, 100.0, 10.0) == 50.0
    assert perf_max_flops_per_s(50.0, 100.0, 10.0) == 100.0
    assert bound(5.0, 100.0, 10.0) == "bandwidth" and bound(10.0, 100.0, 10.0) == "compute"
    assert arithmetic_intensity(1.0, 0.0) == math.inf
    got = achieved(flops=50.0, bytes_=20.0, measured_s=1.0, peak=100.0, bw=10.0)
    assert got == {
        "achieved_flop_per_s": 50.0,
        "achieved_bytes_per_s": 20.0,
        "mfu": 0.5,
        "mbu": 2.0,
        "roofline_efficiency": 2.0,
    }
