"""The overload scenario on our hf engine (builtin tiny Llama, CPU): its `max_queue` admission control sheds
load and keeps TTFT p99 well below the same load on an unbounded queue (slow: ~40 s here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferopt.config import (
    LengthConfig,
    PoissonArrivals,
    ScenarioConfig,
    SLOConfig,
    WorkloadConfig,
)
from inferopt.config.loader import load_config
from inferopt.validate.scenarios import validate

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_hf_overload_admission_control_against_unbounded_queue(tmp_path: Path) -> None:
    system = load_config(ROOT / "configs/systems/hf-tiny.yaml", kind="system")
    wl = WorkloadConfig(
        name="hfov",
        seed=2,
        num_requests=40,
        arrival=PoissonArrivals(rate_per_s=60.0),
        timeout_s=60,
        lengths=LengthConfig(input_median=32, output_median=12, output_sigma=0.3, output_min=4, output_max=24),
    )
    sc = ScenarioConfig(name="overload", kind="overload", admission_limit=4)
    (res,) = validate(system, wl, (sc,), SLOConfig(ttft_p99_ms=1000, tpot_p95_ms=200), tmp_path)
    m = res.metrics
    assert not res.run.failed and len(res.run.records) == 40
    assert m["rejected_rate"] > 0.3 and m["error_rate"] == 0 and m["timeout_rate"] == 0
    assert m["unbounded.rejected_rate"] == 0 and m["unbounded.ttft_ms_p99"] > 2 * m["ttft_ms_p99"], res.reasons
    growth = res.tables["unbounded_queue_growth"]
    assert growth["ttft_ms_p99"].iloc[-1] > growth["ttft_ms_p99"].iloc[0]
