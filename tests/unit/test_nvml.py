"""GPU paths that skip cleanly (issue 4 item 4): NVML sampling's pure aggregation on synthetic samples, the
reader over a stand-in pynvml module, the "not available: <why>" path on a machine without a driver, and
CUDA-event phase timing's skip and reduction."""

import types

import pytest

from inferopt.engines.hf.cuda_events import PhaseEventTimer, event_stats
from inferopt.measure.nvml import (
    NvmlReader,
    aggregate_gpu_samples,
    open_nvml,
    visible_indices,
)


def test_aggregate_power_energy_memory_clock():
    # 100 W for 1 s, then a ramp to 300 W over 2 s: energy 100 + 400 = 500 J over 3 s
    samples = [
        {"t_s": 10.0, "power_w": 100.0, "mem_used_bytes": 1e9, "sm_clock_mhz": 1980.0, "energy_counter_mj": 0.0},
        {"t_s": 11.0, "power_w": 100.0, "mem_used_bytes": 3e9, "sm_clock_mhz": 1980.0, "energy_counter_mj": 1e5},
        {"t_s": 13.0, "power_w": 300.0, "mem_used_bytes": 2e9, "sm_clock_mhz": 1500.0, "energy_counter_mj": 5.1e5},
    ]
    out = aggregate_gpu_samples(list(reversed(samples)))  # order does not matter: sorted by time
    assert out["gpu_energy_j"] == pytest.approx(500.0)
    assert out["gpu_power_w_mean"] == pytest.approx(500.0 / 3.0)  # time-weighted (see the next test)
    assert out["gpu_power_w_peak"] == 300.0
    assert out["gpu_mem_used_bytes_peak"] == 3e9
    assert out["gpu_sm_clock_mhz_min"] == 1500.0 and out["gpu_sm_clock_mhz_mean"] == pytest.approx(1820.0)
    assert out["gpu_energy_j_counter"] == pytest.approx(510.0)  # the driver's counter, to check the integral
    assert out["gpu_span_s"] == 3.0 and out["gpu_samples"] == 3


def test_aggregate_time_weighting_differs_from_the_sample_mean():
    # dense samples at low power, one long gap at high power: the sample mean undercounts the energy
    s = [
        {"t_s": t, "power_w": p, "mem_used_bytes": 0.0, "sm_clock_mhz": 1.0}
        for t, p in [(0.0, 100.0), (0.1, 100.0), (0.2, 100.0), (10.2, 100.0 + 0.0)]
    ]
    s[-1]["power_w"] = 300.0
    out = aggregate_gpu_samples(s)
    assert out["gpu_energy_j"] == pytest.approx(100 * 0.2 + (100 + 300) / 2 * 10.0)
    assert out["gpu_power_w_mean"] == pytest.approx(out["gpu_energy_j"] / 10.2)
    assert out["gpu_power_w_mean"] > (100 * 3 + 300) / 4 + 40
    assert aggregate_gpu_samples([]) == {}
    one = aggregate_gpu_samples(s[:1])
    assert one["gpu_energy_j"] == 0.0 and one["gpu_power_w_mean"] == 100.0


def test_visible_indices():
    assert visible_indices(4, {}) == [0, 1, 2, 3]
    assert visible_indices(4, {"CUDA_VISIBLE_DEVICES": "2,0"}) == [2, 0]
    assert visible_indices(4, {"CUDA_VISIBLE_DEVICES": "1,-1,3"}) == [1]  # CUDA stops at the first invalid
    assert visible_indices(2, {"CUDA_VISIBLE_DEVICES": ""}) == []
    assert visible_indices(2, {"CUDA_VISIBLE_DEVICES": "GPU-abc"}) == [0, 1]


def _fake_pynvml(energy=True):
    class NVMLError(Exception):
        pass

    def energy_fn(h):
        if not energy:
            raise NVMLError("not supported")
        return 1000.0 * (h + 1)

    return types.SimpleNamespace(
        NVMLError=NVMLError,
        NVML_CLOCK_SM=1,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: b"Fake H200",
        nvmlDeviceGetPowerUsage=lambda h: 150_000 + 1000 * h,  # mW
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=(h + 1) * 2**30),
        nvmlDeviceGetClockInfo=lambda h, kind: 1800 + 100 * h,
        nvmlDeviceGetTotalEnergyConsumption=energy_fn,
        nvmlShutdown=lambda: None,
    )


def test_reader_sums_power_and_memory_over_visible_devices():
    reader = NvmlReader(_fake_pynvml(), [0, 1])
    s = reader.read(5.0)
    assert s == {
        "t_s": 5.0,
        "power_w": 301.0,
        "mem_used_bytes": 3 * 2**30,
        "sm_clock_mhz": 1850.0,
        "energy_counter_mj": 3000.0,
    }
    assert reader.info() == {"devices": ["Fake H200", "Fake H200"], "indices": [0, 1]}
    assert "energy_counter_mj" not in NvmlReader(_fake_pynvml(energy=False), [0]).read(0.0)


def test_open_nvml_says_why_not_where_there_is_no_driver():
    reader, reason = open_nvml()
    if reader is not None:
        reader.close()
        pytest.skip("NVML works on this machine (an NVIDIA driver is present): the skip path is not exercised")
    assert reason.startswith("not available: ") and len(reason) > len("not available: ") + 5


def test_cuda_events_skip_on_cpu_and_reduce():
    timer = PhaseEventTimer.for_device("cpu")
    with timer.phase("prefill"):
        pass
    timer.flush()
    out = timer.summary()
    assert out["available"] is False and out["reason"].startswith("not available: ") and "cpu" in out["reason"]
    stats = event_stats({"prefill": [2.0, 4.0], "decode": []})
    assert stats["prefill_n"] == 2 and stats["prefill_ms_total"] == 6.0 and stats["prefill_ms_mean"] == 3.0
    assert stats["prefill_ms_max"] == 4.0 and stats["decode_n"] == 0


@pytest.mark.gpu
def test_cuda_events_time_a_matmul_on_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: CUDA-event timing is GPU-only")
    timer = PhaseEventTimer.for_device("cuda:0")
    x = torch.randn(2048, 2048, device="cuda")
    for _ in range(3):
        with timer.phase("decode"):
            x = (x @ x).tanh()
    out = timer.summary()
    assert out["available"] and out["decode_n"] == 3 and out["decode_ms_total"] > 0
