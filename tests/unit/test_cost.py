import pytest

from inferopt.gate.cost import cost_per_successful_task, energy_estimate_j


def test_cost_per_success_folds_device_and_energy():
    out = cost_per_successful_task(
        device_seconds=3600, price_per_hour_usd=3.0, energy_j=3.6e6 * 0.7, usd_per_kwh=0.2, n_successful=100
    )
    assert out["device_cost_usd"] == pytest.approx(3.0)
    assert out["energy_cost_usd"] == pytest.approx(0.14)
    assert out["total_cost_usd"] == pytest.approx(3.14)
    assert out["cost_per_success_usd"] == pytest.approx(0.0314)
    assert out["energy_included"]


def test_failures_raise_cost_per_success_and_zero_successes_is_safe():
    ok = cost_per_successful_task(100, 1.0, None, 0.2, 10)["cost_per_success_usd"]
    worse = cost_per_successful_task(100, 1.0, None, 0.2, 5)["cost_per_success_usd"]
    assert worse == pytest.approx(2 * ok)
    none = cost_per_successful_task(100, 1.0, None, 0.2, 0)
    assert none["cost_per_success_usd"] is None and none["total_cost_usd"] > 0 and not none["energy_included"]
    with pytest.raises(ValueError):
        cost_per_successful_task(-1, 1.0, None, 0.2, 1)


def test_energy_estimate():
    assert energy_estimate_j(10.0, 700.0, 0.5) == pytest.approx(3500.0)
    assert energy_estimate_j(10.0, 700.0, 0.0, idle_fraction=0.2) == pytest.approx(1400.0)
    with pytest.raises(ValueError):
        energy_estimate_j(1.0, 700.0, 1.5)


def test_cost_uses_measured_energy_when_every_trial_has_it_and_prices_kv_memory_as_replicas() -> None:
    import pandas as pd

    from inferopt.config import SLOConfig
    from inferopt.gate.judge import cost_table, replicas_for_kv
    from inferopt.locate.hardware import HardwareProfile

    def phases(n: int) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "outcome": ["ok"] * n,
                "ttft_ms": [50.0] * n,
                "tpot_ms": [5.0] * n,
                "e2e_ms": [100.0] * n,
                "input_len": [900] * n,
                "output_len": [100] * n,
                "concurrency": [8] * n,
            }
        )

    def trials(resources: list[dict]) -> pd.DataFrame:
        return pd.DataFrame(
            [
                {"arm": "a", "repeat": i, "failed": False, "duration_s": 10.0, "phases": phases(20), "resources": r}
                for i, r in enumerate(resources)
            ]
        )

    hw = HardwareProfile(
        name="g",
        kind="gpu",
        dtype="bfloat16",
        measured=False,
        peak_flops_per_s=1e15,
        mem_bandwidth_bytes_per_s=1e12,
        memory_bytes=10e9,
        tdp_w=700.0,
        price_per_hour_usd=3.6,
        source="test",
    )
    slo = SLOConfig(ttft_p99_ms=500, tpot_p95_ms=50)
    measured = cost_table(trials([{"gpu_energy_j": 100.0}, {"gpu_energy_j": 150.0}]), slo, hw, {"a": 1})
    assert measured.loc[0, "energy_j"] == 250.0 and measured.loc[0, "energy_basis"].startswith("measured: NVML")
    partial = cost_table(trials([{"gpu_energy_j": 100.0}, {}]), slo, hw, {"a": 1})  # one trial unmeasured
    assert partial.loc[0, "energy_basis"].startswith("estimated from TDP")
    # 8 in flight x 1000 tokens x 1 MB/token = 8 GB of KV + 4 GB of weights: two 10 GB devices
    big = trials([{"kv_bytes_per_token": 1e6, "weight_bytes": 4e9}] * 2)
    n, why = replicas_for_kv(big, pd.concat(list(big["phases"])), hw.memory_bytes)
    assert n == 2 and "12 GB" in why
    assert cost_table(big, slo, hw, {"a": 1}).loc[0, "replicas"] == 2
    assert replicas_for_kv(trials([{}]), phases(3), hw.memory_bytes)[0] == 1
