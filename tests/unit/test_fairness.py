"""Starvation is relative disadvantage (SPEC V5): a group starves when it is served or waits significantly worse
than the others — not when everybody waited too long (that is overload, reported as such). Planted on the fake
engine with a strict-priority scheduler that leaves the low-priority tenant waiting under load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from inferopt.config import (
    FakeSystem,
    LengthConfig,
    PoissonArrivals,
    ScenarioConfig,
    SLOConfig,
    TenantConfig,
    WorkloadConfig,
)
from inferopt.config.systems import BatchingKnobs
from inferopt.validate.fairness import fairness_report
from inferopt.validate.scenarios import validate


def _served(tenant: str, prio: int, waits_ms: np.ndarray) -> list[dict]:
    return [
        {"tenant": tenant, "priority": prio, "outcome": "ok", "queue_ms": w, "ttft_ms": w + 5.0, "output_len": 8}
        for w in waits_ms
    ]


def test_a_group_waiting_far_longer_than_the_others_starves() -> None:
    rng = np.random.default_rng(0)
    rows = _served("a", 0, rng.uniform(10, 30, 40)) + _served("b", 1, rng.uniform(200, 400, 15))
    rep = fairness_report(pd.DataFrame(rows), duration_s=2.0, max_wait_ms=10_000.0)
    t = rep.table.set_index(["group_by", "group"])
    assert bool(t.loc[("tenant", "b"), "starved"]) and not bool(t.loc[("tenant", "a"), "starved"])
    assert "median wait" in t.loc[("tenant", "b"), "why"] and t.loc[("tenant", "b"), "wait_ratio"] > 4
    assert rep.jain_tenant > 0.99  # everyone was served in proportion: the share rule alone would miss it
    assert rep.overloaded is None


def test_everybody_waiting_too_long_is_overload_not_starvation() -> None:
    rng = np.random.default_rng(1)
    rows = _served("a", 0, rng.uniform(3000, 6000, 40)) + _served("b", 1, rng.uniform(3000, 6000, 15))
    rep = fairness_report(pd.DataFrame(rows), duration_s=2.0, max_wait_ms=500.0)
    assert rep.starved == []
    assert rep.overloaded is not None and "every group's longest wait exceeds 500 ms" in rep.overloaded
    assert "STARVED" not in rep.summary() and "overloaded" in rep.summary()


WORKLOAD = WorkloadConfig(
    name="prio",
    seed=3,
    num_requests=120,
    arrival=PoissonArrivals(rate_per_s=36.0),
    lengths=LengthConfig(input_median=16, output_median=8, output_sigma=0, output_min=8, output_max=8),
    tenants=(TenantConfig(name="a", weight=1), TenantConfig(name="b", weight=1, priority=1)),
    timeout_s=30,
)
SLO = SLOConfig(ttft_p99_ms=150, tpot_p95_ms=20)


def _burst(order: str, tmp_path: Path):
    """~24 req/s of capacity (batches of 2, 8 steps of 10 ms): tenant a alone (18 req/s) fits, a + b (36) do not."""
    system = FakeSystem(
        decode_step_ms=10.0, batching=BatchingKnobs(max_batch_size=2, batch_wait_ms=0, priority_order=order)
    )
    (res,) = validate(system, WORKLOAD, (ScenarioConfig(name="burst", kind="burst"),), SLO, tmp_path / order)
    return res


@pytest.mark.slow  # ~10-20 s of real load: off the fast suite, still in CI
def test_a_strict_priority_scheduler_starves_the_low_priority_tenant(tmp_path: Path) -> None:
    strict = _burst("strict", tmp_path)
    assert any(s.startswith("tenant=b") for s in strict.fairness.starved), strict.fairness.table
    assert not strict.passed and any("STARVED tenant=b" in r for r in strict.reasons)
    fifo = _burst("arrival", tmp_path)  # the same overload served first come, first served
    assert fifo.fairness.starved == [], fifo.fairness.table
    assert fifo.fairness.overloaded is not None
