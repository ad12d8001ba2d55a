import math

import pytest

from inferopt.analysis.kv import kv_budget_bytes, kv_bytes, kv_bytes_per_token, kv_table, max_concurrency
from inferopt.analysis.roofline import ModelDims

# SPEC L3 worked example: 32 layers, 8 KV heads, d 128, FP16, 8,000 tokens.
L, H, D, FP16 = 32, 8, 128, 2


def test_worked_example_per_request_and_sixteen_concurrent():
    per_request = kv_bytes(L, H, D, n_tokens=8000, batch=1, bytes_per_elem=FP16)
    assert per_request == 1_048_576_000  # 1.048576e9 B, "about 1.05 GB"
    assert round(per_request / 1e9, 2) == 1.05
    sixteen = kv_bytes(L, H, D, n_tokens=8000, batch=16, bytes_per_elem=FP16)
    assert sixteen == 16 * per_request
    assert round(sixteen / 1e9, 1) == 16.8


def test_per_token_counts_k_and_v():
    assert kv_bytes_per_token(L, H, D, FP16) == 2 * L * H * D * FP16 == 131_072
    assert kv_bytes_per_token(L, H, D, 0.5) == 32_768  # a 4-bit cache


def test_budget_and_concurrency_ceiling():
    budget = kv_budget_bytes(memory_bytes=80e9, weight_bytes=16e9, workspace_fraction=0.1)
    assert budget == 56_000_000_000
    assert max_concurrency(budget, 1_048_576_000) == 53
    assert kv_budget_bytes(10e9, 20e9) == 0  # weights alone do not fit: no KV room, never negative
    with pytest.raises(ValueError):
        max_concurrency(budget, 0)


def test_table_marks_what_does_not_fit():
    dims = ModelDims(n_layers=L, hidden=4096, intermediate=14336, n_heads=32, n_kv_heads=H, head_dim=D, vocab=128256)
    table = kv_table(dims, [1000, 8000, 32000], batch=16, bytes_per_elem=FP16, memory_bytes=24e9, weight_bytes=16e9)
    assert list(table.columns[:8]) == ["context_len_tok", "batch", "kv_bytes_per_token", "kv_bytes_per_request",
                                       "kv_bytes_batch", "budget_bytes", "max_concurrency", "fits"]
    row = table.set_index("context_len_tok").loc[8000]
    assert row.kv_bytes_per_request == 1_048_576_000
    assert row.budget_bytes == math.floor(24e9 * 0.9 - 16e9)
    assert row.max_concurrency == 5 and not row.fits  # 16 x 1.05 GB in a 5.6 GB budget: the OOM cause
    assert table.set_index("context_len_tok").loc[1000].fits
    # a mapping works as dims too
    same = kv_table({"n_layers": L, "n_kv_heads": H, "head_dim": D}, [8000], 16, FP16, 24e9, 16e9)
    assert same.kv_bytes_batch.iloc[0] == row.kv_bytes_batch
