"""Workloads are seeded tables with a content hash; arrival processes have the stated rates and shapes."""

from __future__ import annotations

import numpy as np
import pytest

from inferopt.config import (
    ConstantArrivals,
    GammaArrivals,
    LengthConfig,
    PoissonArrivals,
    PrefixConfig,
    TenantConfig,
    WorkloadConfig,
)
from inferopt.workload import build_workload, prompt_token_ids, workload_hash
from inferopt.workload.arrivals import arrival_offsets_s


def _cfg(**kw) -> WorkloadConfig:
    base = dict(name="w", seed=5, num_requests=400, arrival=PoissonArrivals(rate_per_s=10.0))
    base.update(kw)
    return WorkloadConfig(**base)


def test_same_config_same_table_and_hash() -> None:
    a, b = build_workload(_cfg()), build_workload(_cfg())
    assert a.equals(b)
    assert a.attrs["content_hash"] == b.attrs["content_hash"] == workload_hash(b)


def test_different_seed_different_hash() -> None:
    assert build_workload(_cfg()).attrs["content_hash"] != build_workload(_cfg(seed=6)).attrs["content_hash"]


@pytest.mark.parametrize(
    "arrival,cv2",
    [
        (PoissonArrivals(rate_per_s=20.0), 1.0),
        (GammaArrivals(rate_per_s=20.0, burstiness=6.0), 6.0),
        (ConstantArrivals(rate_per_s=20.0), 0.0),
    ],
)
def test_arrival_rate_and_burstiness(arrival, cv2) -> None:
    offs = arrival_offsets_s(arrival, 20000, np.random.default_rng(0))
    gaps = np.diff(offs)
    assert offs[0] == 0 and np.all(gaps >= 0)
    assert gaps.mean() == pytest.approx(1 / 20.0, rel=0.05)
    assert (gaps.var() / gaps.mean() ** 2) == pytest.approx(cv2, abs=0.15 * max(cv2, 1.0))


def test_joint_lengths_are_correlated_and_bounded() -> None:
    lengths = LengthConfig(input_median=64, output_median=16, correlation=0.8, input_max=300, output_max=60)
    t = build_workload(_cfg(num_requests=3000, lengths=lengths))
    assert t["input_len"].between(lengths.input_min, 300).all()
    assert t["output_len"].between(lengths.output_min, 60).all()
    assert np.corrcoef(np.log(t["input_len"]), np.log(t["output_len"]))[0, 1] > 0.5


def test_prefix_groups_share_prompt_prefixes() -> None:
    t = build_workload(_cfg(prefix=PrefixConfig(num_groups=2, prefix_len=8, share_fraction=0.5)))
    shared = t[t["prefix_group"] >= 0]
    assert 0.4 < len(shared) / len(t) < 0.6
    rows = [r for _, r in shared.iterrows()]
    same = [r for r in rows if r["prefix_group"] == rows[0]["prefix_group"]][:2]
    p0, p1 = (prompt_token_ids(r, 288) for r in same)
    assert p0[:8] == p1[:8] and p0[8:] != p1[8:]
    assert all(len(prompt_token_ids(r, 288)) == r["input_len"] for r in rows[:20])
    assert min(min(prompt_token_ids(r, 288)) for r in rows[:20]) >= 3


def test_tenants_follow_weights() -> None:
    t = build_workload(
        _cfg(
            num_requests=4000,
            tenants=(TenantConfig(name="a", weight=3, priority=0), TenantConfig(name="b", weight=1, priority=2)),
        )
    )
    share = (t["tenant"] == "a").mean()
    assert share == pytest.approx(0.75, abs=0.03)
    assert set(t.loc[t["tenant"] == "b", "priority"]) == {2}
