"""The per-phase op profile: classification rules, the (phase, category) sums, a short real pass on the tiny
model, resource sampling, the figure, the locate run's artifacts, and how the verdict uses the profile."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pytest

from inferopt.locate.profile import (
    PhaseProfile,
    breakdown,
    category_share,
    classify,
    host_share,
    representative_shape,
    roof_work_share,
)
from inferopt.measure.resources import process_usage, usage_delta


@pytest.mark.parametrize(
    "name, shapes, under_linear, expected",
    [
        ("aten::_scaled_dot_product_flash_attention_for_cpu", None, False, "attention"),
        ("aten::scaled_dot_product_attention", None, False, "attention"),
        ("aten::_softmax", None, False, "attention"),
        ("aten::mm", [[4, 384], [384, 384]], True, "matmul"),
        ("aten::linear", None, False, "matmul"),
        ("aten::matmul", [[1, 12, 64, 32], [1, 12, 32, 64]], False, "attention"),  # eager Q K^T
        ("aten::bmm", [[1, 16, 1], [1, 1, 64]], False, "matmul"),  # rotary's position x frequency
        ("aten::matmul", [[1, 1, 12, 32], [32, 384]], True, "matmul"),  # 4-D input, but inside a linear
        ("aten::mul", None, False, None),
        ("aten::cat", None, False, None),
    ],
)
def test_classify(name: str, shapes: Any, under_linear: bool, expected: str | None) -> None:
    assert classify(name, shapes, under_linear) == expected


@dataclass
class Ev:
    """A stand-in for torch.autograd.profiler_util.FunctionEvent (times in microseconds)."""

    name: str
    self_cpu_time_total: float
    cpu_time_total: float = 0.0
    cpu_parent: "Ev | None" = None
    input_shapes: Any = None
    self_device_time_total: float = 0.0
    device_type: str = "DeviceType.CPU"
    children: list = field(default_factory=list)


def _tree() -> list[Ev]:
    prefill = Ev("prefill", 100.0, cpu_time_total=1000.0)
    linear = Ev("aten::linear", 10.0, cpu_parent=prefill)
    t = Ev("aten::t", 5.0, cpu_parent=linear)  # inherits matmul from linear
    mm = Ev("aten::mm", 485.0, cpu_parent=linear)
    sdpa = Ev("aten::_scaled_dot_product_flash_attention_for_cpu", 190.0, cpu_parent=prefill)
    empty = Ev("aten::empty", 10.0, cpu_parent=sdpa)  # inherits attention
    mul = Ev("aten::mul", 200.0, cpu_parent=prefill)
    decode = Ev("decode", 60.0, cpu_time_total=100.0)
    dmm = Ev("aten::mm", 30.0, cpu_parent=decode)
    dadd = Ev("aten::add", 10.0, cpu_parent=decode)
    outside = Ev("aten::zeros", 999.0)  # not under a phase: ignored
    return [prefill, linear, t, mm, sdpa, empty, mul, decode, dmm, dadd, outside]


def test_breakdown_sums_self_time_per_phase_and_category() -> None:
    ops, top = breakdown(_tree(), {"prefill": 1, "decode": 2})
    got = ops.set_index(["phase", "category"])
    assert got.loc[("prefill", "matmul"), "self_cpu_ms"] == pytest.approx(0.5)
    assert got.loc[("prefill", "attention"), "self_cpu_ms"] == pytest.approx(0.2)
    assert got.loc[("prefill", "other"), "self_cpu_ms"] == pytest.approx(0.2)
    assert got.loc[("prefill", "host"), "share"] == pytest.approx(0.1)
    assert got.loc[("decode", "host"), "share"] == pytest.approx(0.6)
    assert got.loc[("decode", "matmul"), "self_cpu_ms_per_forward"] == pytest.approx(0.015)
    assert ops.groupby("phase")["share"].sum().tolist() == pytest.approx([1.0, 1.0])
    assert ops["self_device_ms"].isna().all()
    assert roof_work_share(ops, "prefill") == pytest.approx(0.7)
    assert host_share(ops, "decode") == pytest.approx(0.6)
    assert category_share(ops, "prefill", "attention") == pytest.approx(0.2)
    assert top.iloc[0]["op"] == "aten::mm" and "aten::zeros" not in set(top["op"])


def test_host_share_on_cuda_is_device_idle_share() -> None:
    ops = pd.DataFrame(
        {
            "phase": "decode",
            "category": ["attention", "matmul", "other", "host"],
            "n_forwards": 1,
            "self_cpu_ms": [1.0, 1.0, 1.0, 1.0],
            "self_cpu_ms_per_forward": 1.0,
            "share": 0.25,
            "self_device_ms": [0.1, 0.2, 0.1, 0.0],
            "device_share": [0.1, 0.2, 0.1, 0.0],
        }
    )
    assert host_share(ops, "decode") == pytest.approx(0.6)
    assert roof_work_share(ops, "decode") == pytest.approx(0.3)
    assert math.isnan(host_share(ops, "prefill")) and math.isnan(host_share(None, "decode"))


def test_representative_shape() -> None:
    ph = pd.DataFrame(
        {
            "outcome": ["ok", "ok", "ok", "timeout"],
            "input_len": [100, 200, 300, 5000],
            "cached_tokens": [0, 0, 100, 0],
            "output_len": [5, 40, 60, 1],
            "batch_size_at_admit": [1, 2, 2, np.nan],
        }
    )
    assert representative_shape(ph) == {"prompt_len": 200, "batch": 2, "decode_steps": 8}
    assert representative_shape(ph, max_positions=100)["prompt_len"] == 91


def test_resources_around_work() -> None:
    before = process_usage()
    blob = bytearray(32 * 2**20)
    sum(range(200_000))
    d = usage_delta(before, process_usage())
    assert d["wall_s"] > 0 and d["cpu_s"] >= 0 and d["rss_bytes_after"] > 0
    assert d["rss_peak_bytes"] >= d["rss_bytes_after"] - 2**20
    del blob


@pytest.fixture(scope="module")
def tiny_profile() -> PhaseProfile:
    pytest.importorskip("torch")
    from inferopt.config import HFSystem, ModelSpec
    from inferopt.locate.profile import profile_phases

    system = HFSystem(model=ModelSpec(path="builtin:tiny-llama"), attn_implementation="sdpa", torch_threads=1)
    return profile_phases(system, prompt_len=32, batch=2, decode_steps=3, repeats=1)


def test_profile_pass_on_tiny_model(tiny_profile: PhaseProfile) -> None:
    ops = tiny_profile.ops
    assert set(ops["phase"]) == {"prefill", "decode"}
    assert ops.groupby("phase")["share"].sum().round(6).eq(1.0).all()
    assert (ops.set_index(["phase", "category"])["self_cpu_ms"] > 0).loc[["prefill"]].all()
    assert ops.loc[ops["phase"] == "decode", "n_forwards"].iloc[0] == 3
    assert roof_work_share(ops, "prefill") > 0.3  # the matmuls are a visible part even on the tiny model
    assert "aten::mm" in set(tiny_profile.top_ops["op"])
    r = tiny_profile.resources
    assert r["rss_bytes_after"] > 0 and r["cpu_s"] > 0 and r["profiled_wall_s"] > 0
    assert tiny_profile.settings["prompt_len"] == 32 and tiny_profile.settings["attn_implementation"] == "sdpa"
    d = tiny_profile.to_dict()
    assert set(d["host_share"]) == {"prefill", "decode"}


def test_op_breakdown_figure(tiny_profile: PhaseProfile) -> None:
    from inferopt.report.profile_plots import op_breakdown

    fig = op_breakdown(tiny_profile.ops, "tiny")
    assert len(fig.axes[0].patches) == 8  # 2 phases x 4 categories


def test_locate_task_logs_profile_artifacts(tiny_profile: PhaseProfile, tmp_path) -> None:
    from tasks.log_steps import log_profile

    class StubTracker:
        def __init__(self) -> None:
            self.files: list[str] = []
            self.metric_values: dict[str, float] = {}

        def table(self, df, filename, name=None):
            self.files.append(filename)

        def json(self, data, filename, name=None):
            self.files.append(filename)

        def figure(self, fig, filename, name=None):
            self.files.append(filename)

        def metrics(self, values, name=None, step=0):
            self.metric_values.update(values)

        def tags(self, values, name=None):
            self.files.append("tags")

    class Result:
        profile = tiny_profile
        profile_error = None

    tracker = StubTracker()
    log_profile(tracker, Result(), "2-locate")
    assert {"op_breakdown.parquet", "top_ops.parquet", "profile.json", "op_breakdown.png"} <= set(tracker.files)
    assert 0 <= tracker.metric_values["profile.decode.host_share"] <= 1


# ----------------------------------------------------------------------------- the verdict uses it


def _decode_table(n: int = 50) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    t = 12.0 * rng.uniform(0.9, 1.1, n)
    out = np.full(n, 200)
    decode = (out - 1) * t
    ttft = 1.0 + 0.2 + 20.0 + 0.1
    return pd.DataFrame(
        {
            "outcome": "ok",
            "input_len": 128,
            "output_len": out,
            "cached_tokens": 0,
            "queue_ms": 1.0,
            "context_ms": 0.2,
            "prefill_ms": 20.0,
            "first_ms": 0.1,
            "ttft_ms": ttft,
            "tpot_ms": t,
            "e2e_ms": ttft + decode,
            "decode_ms": decode,
            "batch_size_at_admit": 1,
            "input_bucket": "short",
            "output_bucket": "long",
            "concurrency_bucket": "b1",
            "cache_hit": "miss",
        }
    )


def _ops(host: float, attention: float = 0.05) -> pd.DataFrame:
    rest = 1.0 - host - attention
    shares = {"attention": attention, "matmul": rest * 0.8, "other": rest * 0.2, "host": host}
    return pd.DataFrame(
        [
            {
                "phase": "decode",
                "category": c,
                "n_forwards": 10,
                "self_cpu_ms": s * 100,
                "self_cpu_ms_per_forward": s * 10,
                "share": s,
                "self_device_ms": np.nan,
                "device_share": np.nan,
            }
            for c, s in shares.items()
        ]
    )


@pytest.mark.parametrize("host, cause", [(0.3, "bandwidth"), (0.7, "host_overhead")])
def test_profile_host_share_decides_between_roof_and_host(host: float, cause: str) -> None:
    from inferopt.locate.bottleneck import HOST_SHARE_DOMINANT, locate, roofline_points
    from inferopt.locate.kv import kv_table
    from inferopt.locate.roofline import ModelDims, roofline_table, weight_bytes

    big = ModelDims(n_layers=32, hidden=4096, intermediate=14336, n_heads=32, n_kv_heads=8, head_dim=128, vocab=128256)
    ph = _decode_table()
    roof = roofline_table(big, 989e12, 3.35e12, roofline_points(ph))
    kv = kv_table(big, [1024], 1, 2, 80e9, weight_bytes(big, 2))
    without = locate(ph, roof, kv, {})
    assert without.cause == "bandwidth"  # the roofline alone
    v = locate(ph, roof, kv, {}, op_breakdown=_ops(host))
    assert v.cause == cause, v.rule
    row = next(e for e in v.evidence if e["check"] == "profile.decode.host_share")
    assert row["value"] == pytest.approx(host) and row["threshold"] == HOST_SHARE_DOMINANT
    assert row["fired"] == (host >= HOST_SHARE_DOMINANT)
    assert any(e["check"] == "profile.decode.attention_share" for e in v.evidence)
    assert "op profile of decode" in v.rule
    assert v.confidence <= without.confidence
