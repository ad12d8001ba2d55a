"""The analytic FLOP model against FlopCounterMode on the builtin tiny Llama with CPU sdpa (issue 4: within
2 %), at one small size; `benchmarks/flops_check.py` runs the full grid."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from inferopt.config import ModelSpec  # noqa: E402
from inferopt.locate.flops import count_flops, flops_check, register_cpu_sdpa_flops  # noqa: E402
from inferopt.model.loading import load_model  # noqa: E402


@pytest.fixture(scope="module")
def sdpa_model():
    torch.set_num_threads(1)
    return load_model(ModelSpec(path="builtin:tiny-llama"), attn_implementation="sdpa").model


def test_registration_is_idempotent() -> None:
    from torch.utils import flop_counter

    register_cpu_sdpa_flops()
    formula = flop_counter.flop_registry[torch.ops.aten._scaled_dot_product_flash_attention_for_cpu]
    assert register_cpu_sdpa_flops() == []  # second call: nothing new, no "duplicate registration" error
    assert flop_counter.flop_registry[torch.ops.aten._scaled_dot_product_flash_attention_for_cpu] is formula


def test_cpu_sdpa_counts_4bhsqskd() -> None:
    b, h_q, h_kv, s_q, s_k, d = 2, 4, 2, 5, 7, 8
    q, k, v = torch.randn(b, h_q, s_q, d), torch.randn(b, h_kv, s_k, d), torch.randn(b, h_kv, s_k, d)
    _, total, per_op = count_flops(torch.nn.functional.scaled_dot_product_attention, q, k, v, enable_gqa=True)
    assert total == 4 * b * h_q * s_q * s_k * d
    assert any("_for_cpu" in name for name in per_op)


def test_analytic_flops_match_flop_counter_within_2pct(sdpa_model) -> None:
    table = flops_check(sdpa_model, [48], [2])
    assert list(table["phase"]) == ["prefill", "decode"]
    assert (table["counted_sdpa_flops"] > 0).all()  # the CPU sdpa formula is in effect
    assert table["rel_err"].max() <= 0.02, table.to_string()
    # attention is a visible part of the total: without the formula the check would be off by this much
    prefill = table.iloc[0]
    assert prefill["counted_sdpa_flops"] == 4 * 6 * 2 * 12 * 48 * 48 * 32  # layers x b x h x s x s x d
