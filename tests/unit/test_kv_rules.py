"""The KV-capacity rule (inferopt.locate.kv_rules) on vLLM-shaped phase tables: no batch_size_at_admit (the
server does not report it per request), `concurrency` counted at each arrival, and the server's numbers as
knobs. The numbers mirror the planted kv-bound run (configs/planted/kv-bound.yaml): the tiny Llama at
6,144 B/token, a 768-token (4,718,592 B) KV budget, 16 requests of ~250 tokens in flight, 8 preemptions."""

import numpy as np
import pandas as pd

from inferopt.locate.bottleneck import locate
from inferopt.locate.kv import kv_table
from inferopt.locate.kv_rules import kv_check

DIMS = {"n_layers": 6, "n_kv_heads": 4, "head_dim": 32}  # 6 x 4 x 32 x 4 B x 2 = 6,144 B/token (fp32)
BUDGET = 4_718_592


def vllm_phases(n=16, queue_ms=5000.0, in_flight=None):
    rng = np.random.default_rng(0)
    inp = rng.integers(96, 160, n)
    out = rng.integers(112, 144, n)
    q = np.full(n, queue_ms)
    prefill, decode = np.full(n, 80.0), out * 15.0
    return pd.DataFrame(
        {
            "outcome": "ok",
            "input_len": inp,
            "output_len": out,
            "cached_tokens": 0,
            "queue_ms": q,
            "context_ms": 0.0,
            "prefill_ms": prefill,
            "first_ms": 1.0,
            "ttft_ms": q + prefill + 1.0,
            "tpot_ms": 15.0,
            "e2e_ms": q + prefill + 1.0 + decode,
            "decode_ms": decode,
            "batch_size_at_admit": None,
            "concurrency": np.arange(1, n + 1) if in_flight is None else in_flight,
        }
    )


def kv(ph, budget=BUDGET):
    ctx = (ph["input_len"] + ph["output_len"]).to_numpy(float)
    return kv_table(
        DIMS, [int(np.quantile(ctx, 0.95))], 16, 4.0, memory_bytes=16e9, weight_bytes=1e6, budget_bytes=budget
    )


def _ev(evidence, check):
    return next(e for e in evidence if e["check"] == check)


def test_planted_shape_fires_on_every_signal():
    ph = vllm_phases()
    knobs = {"max_batch_size": 16, "observed_concurrency": 6, "kv_cache_usage_frac_max": 1.0, "num_preemptions": 8}
    ev: list = []
    fired, conf, rule = kv_check(ph, ph, kv(ph), knobs, ev)
    assert fired and rule.endswith("-> kv_capacity")
    ceiling = _ev(ev, "kv.concurrency_ceiling")
    assert ceiling["value"] == 2 and ceiling["threshold"] == 16 and ceiling["fired"]  # 4.7 MB / (~290 tok x 6 KiB)
    assert _ev(ev, "kv.needed_bytes")["fired"]  # 6 running x ~290 tok x 6 KiB > 4.7 MB
    assert _ev(ev, "kv.server_usage_frac_max")["fired"] and _ev(ev, "kv.preemptions")["value"] == 8
    assert conf == 1.0  # all four signals agree
    v = locate(ph, pd.DataFrame(), kv(ph), knobs)
    assert v.cause == "kv_capacity"  # tried before the queue, which dominates E2E here


def test_demand_over_the_ceiling_alone_is_evidence_not_a_verdict():
    # the load asks for 16 sequences, 2 fit, but the engine never preempted and its cache never filled:
    # the queue in front of it is the cause (e.g. max_num_seqs-bound), not KV
    ph = vllm_phases()
    knobs = {"max_batch_size": 16, "kv_cache_usage_frac_max": 0.4, "num_preemptions": 0}
    ev: list = []
    fired, _, _ = kv_check(ph, ph, kv(ph), knobs, ev)
    assert not fired and _ev(ev, "kv.concurrency_ceiling")["fired"] and not _ev(ev, "kv.preemptions")["fired"]
    assert locate(ph, pd.DataFrame(), kv(ph), knobs).cause == "queueing"


def test_ceiling_and_preemptions_without_a_usage_reading():
    ph = vllm_phases()
    ev: list = []
    fired, conf, rule = kv_check(ph, ph, kv(ph), {"max_batch_size": 16, "num_preemptions": 3}, ev)
    assert fired and "preempted 3" in rule and 0.7 <= conf < 1.0
    assert not any(e["check"] == "kv.server_usage_frac_max" for e in ev)  # absent, not a made-up zero


def test_a_big_budget_does_not_fire_even_with_a_stray_preemption():
    ph = vllm_phases()
    knobs = {"max_batch_size": 16, "observed_concurrency": 16, "kv_cache_usage_frac_max": 0.3, "num_preemptions": 1}
    ev: list = []
    fired, _, _ = kv_check(ph, ph, kv(ph, budget=256 * 2**20), knobs, ev)  # vllm-tiny's 256 MiB: 43k tokens
    assert not fired
    assert not _ev(ev, "kv.concurrency_ceiling")["fired"] and not _ev(ev, "kv.needed_bytes")["fired"]


def test_demand_is_capped_at_the_engine_batch_limit():
    ph = vllm_phases(in_flight=np.full(16, 40))
    ev: list = []
    kv_check(ph, ph, kv(ph), {"max_batch_size": 4}, ev)
    assert _ev(ev, "kv.concurrency_ceiling")["threshold"] == 4
