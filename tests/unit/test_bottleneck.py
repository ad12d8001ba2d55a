import numpy as np
import pandas as pd
import pytest

from inferopt.locate.bottleneck import (
    HOST_OVERHEAD_EFFICIENCY,
    QUEUE_SHARE_DOMINANT,
    locate,
    roofline_points,
)
from inferopt.locate.kv import kv_table
from inferopt.locate.roofline import ModelDims, roofline_table, weight_bytes

# an 8B-class model on an H100-class roof, and the project's tiny model on the same roof
BIG = ModelDims(n_layers=32, hidden=4096, intermediate=14336, n_heads=32, n_kv_heads=8, head_dim=128, vocab=128256)
TINY = ModelDims(n_layers=6, hidden=384, intermediate=1024, n_heads=12, n_kv_heads=4, head_dim=32, vocab=288)
PEAK, BW = 989e12, 3.35e12


def phases(
    n=100,
    *,
    input_len=128,
    output_len=16,
    queue_ms=1.0,
    context_ms=0.2,
    prefill_ms=20.0,
    tpot_ms=12.0,
    batch=4,
    outcome="ok",
    seed=0,
    **extra,
):
    """A synthetic per-request phase table shaped like measure.phases.phase_table + slices, adding up (M3)."""
    rng = np.random.default_rng(seed)
    jitter = lambda x: x * rng.uniform(0.9, 1.1, n)  # noqa: E731
    q, c, p, t = jitter(queue_ms), jitter(context_ms), jitter(prefill_ms), jitter(tpot_ms)
    out = np.full(n, output_len)
    first, decode = jitter(0.1), (out - 1) * t  # first_ms: the first token's sampling/emission
    ttft = q + c + p + first
    df = pd.DataFrame(
        {
            "outcome": outcome,
            "input_len": input_len,
            "output_len": out,
            "cached_tokens": 0,
            "queue_ms": q,
            "context_ms": c,
            "prefill_ms": p,
            "first_ms": first,
            "ttft_ms": ttft,
            "tpot_ms": t,
            "e2e_ms": ttft + decode,
            "decode_ms": decode,
            "batch_size_at_admit": batch,
            "input_bucket": np.where(np.asarray(input_len) >= 1024, "long", "short"),
            "output_bucket": np.where(out >= 128, "long", "short"),
            "concurrency_bucket": f"b{batch}",
            "cache_hit": "miss",
        }
    )
    for k, v in extra.items():
        df[k] = v
    return df


def tables(ph, dims=BIG, memory_bytes=80e9):
    roof = roofline_table(dims, PEAK, BW, roofline_points(ph))
    kv = kv_table(
        dims,
        [1024, 8192],
        batch=int(ph["batch_size_at_admit"].max()),
        bytes_per_elem=2,
        memory_bytes=memory_bytes,
        weight_bytes=weight_bytes(dims, 2),
    )
    return roof, kv


def test_prefill_dominated_compute_bound_is_compute():
    ph = phases(input_len=2048, output_len=4, prefill_ms=200.0, tpot_ms=12.0, batch=1)
    v = locate(ph, *tables(ph), knobs={})
    assert v.cause == "compute", v.rule
    assert 0.5 <= v.confidence <= 1.0 and "prefill" in v.rule
    assert any(e["check"] == "roofline.prefill.efficiency" and not e["fired"] for e in v.evidence)


def test_decode_dominated_bandwidth_bound_is_bandwidth():
    ph = phases(input_len=128, output_len=256, prefill_ms=20.0, tpot_ms=12.0, batch=1)
    v = locate(ph, *tables(ph), knobs={})
    assert v.cause == "bandwidth", v.rule
    assert "decode" in v.rule and v.confidence > 0.5


def test_tiny_model_far_below_the_roof_is_host_overhead():
    ph = phases(input_len=64, output_len=64, prefill_ms=8.0, tpot_ms=5.0, batch=1)
    v = locate(ph, *tables(ph, dims=TINY), knobs={})
    assert v.cause == "host_overhead", v.rule
    eff = next(e for e in v.evidence if e["check"] == "roofline.decode.efficiency")
    assert eff["fired"] and eff["value"] < HOST_OVERHEAD_EFFICIENCY
    assert "t_min" in eff["detail"] and v.confidence > 0.9


def test_rejections_are_queueing():
    ph = pd.concat([phases(90), phases(10, outcome="rejected")], ignore_index=True)
    v = locate(ph, *tables(ph), knobs={})
    assert v.cause == "queueing" and "rejected" in v.rule


def test_queue_dominating_the_ttft_tail_is_queueing():
    ph = phases(queue_ms=900.0, prefill_ms=20.0, tpot_ms=12.0)
    v = locate(ph, *tables(ph), knobs={})
    assert v.cause == "queueing", v.rule
    share = next(e for e in v.evidence if e["check"] == "queue.share_of_tail_ttft")
    assert share["value"] > QUEUE_SHARE_DOMINANT and share["fired"]


def test_kv_needed_beyond_budget_is_kv_capacity_even_with_a_queue():
    ph = phases(input_len=8000, output_len=200, batch=16, queue_ms=900.0, prefill_ms=800.0, tpot_ms=30.0)
    roof, kv = tables(ph, memory_bytes=24e9)  # 24 GB device: 16 GB weights leave ~5.6 GB for KV
    v = locate(ph, roof, kv, knobs={})
    assert v.cause == "kv_capacity", v.rule
    need = next(e for e in v.evidence if e["check"] == "kv.needed_bytes")
    assert need["value"] > need["threshold"] and need["fired"]
    # the same load on an 80 GB device: KV fits, the queue is the verdict
    assert locate(ph, *tables(ph, memory_bytes=80e9), knobs={}).cause == "queueing"


def test_server_reported_full_kv_with_preemptions_is_kv_capacity():
    ph = phases()
    v = locate(ph, *tables(ph), knobs={"kv_cache_usage_frac_max": 0.99, "num_preemptions": 12})
    assert v.cause == "kv_capacity" and "preempted" in v.rule


def test_nothing_to_locate_is_none():
    ph = phases(10, outcome="error")
    assert locate(ph, *tables(phases()), knobs={}).cause == "none"
    assert locate(ph.iloc[:0], pd.DataFrame(), pd.DataFrame(), knobs={}).cause == "none"


def test_per_slice_follows_m4():
    long_in = phases(50, input_len=4096, output_len=8, prefill_ms=400.0, tpot_ms=12.0, batch=1, seed=1)
    long_out = phases(50, input_len=128, output_len=512, prefill_ms=20.0, tpot_ms=12.0, batch=1, seed=2)
    ph = pd.concat([long_in, long_out], ignore_index=True)
    v = locate(ph, *tables(ph), knobs={})
    s = v.per_slice.set_index(["slice_dim", "slice_value"])
    assert s.loc[("input_bucket", "long"), "dominant_phase"] == "prefill"
    assert s.loc[("input_bucket", "long"), "look_at"] == "prefill"
    assert s.loc[("output_bucket", "long"), "dominant_phase"] == "decode"
    assert s.loc[("output_bucket", "long"), "cause"] == "bandwidth"
    assert set(v.per_slice.columns) >= {"slice_dim", "slice_value", "dominant_phase", "cause"}
    assert v.to_dict()["per_slice"]


@pytest.mark.parametrize("knob_key", ["max_batch_size", "batching.max_batch_size"])
def test_knobs_accept_flat_and_dotted_keys(knob_key):
    ph = phases()
    assert locate(ph, *tables(ph), knobs={knob_key: 8}).cause in {"bandwidth", "compute"}
