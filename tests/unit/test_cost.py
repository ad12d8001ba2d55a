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
