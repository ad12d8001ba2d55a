"""Per-trial resources (issue 4 item 3): the pure window reduction, and the sampler on a real child process
(RSS and CPU time of a process that appears during the trial are counted; one that existed before is not)."""

import subprocess
import sys
import time

import pytest

from inferopt.measure.resources import ResourceSampler, load_window, window_usage

ALLOC = 64 * 1024 * 1024


def _samples():
    # t, rss, cumulative cpu; own ru_maxrss flat (it set no new high)
    return [
        {"t_s": float(t), "rss_bytes": r, "cpu_s": c, "own_maxrss_bytes": 100.0}
        for t, r, c in [(0, 10, 0.0), (1, 30, 0.5), (2, 50, 1.5), (3, 20, 2.0), (4, 20, 2.0)]
    ]


def test_window_usage_peak_and_interpolated_cpu():
    whole = window_usage(_samples())
    assert whole["peak_rss_bytes"] == 50 and whole["cpu_time_s"] == 2.0 and whole["wall_s"] == 4.0
    part = window_usage(_samples(), 0.5, 2.5)
    assert part["peak_rss_bytes"] == 50  # the samples inside [0.5, 2.5]: t=1, 2
    assert part["cpu_time_s"] == pytest.approx(1.75 - 0.25)  # cpu(2.5) = 1.75, cpu(0.5) = 0.25
    assert part["cpu_util"] == pytest.approx(1.5 / 2.0)
    late = window_usage(_samples(), 2.9, 3.1)  # holds sample t=3 only: 20, not the earlier 50
    assert late["peak_rss_bytes"] == 20
    tiny = window_usage(_samples(), 1.2, 1.4)  # no sample inside: the two around it
    assert tiny["peak_rss_bytes"] == 50 and tiny["samples"] == 2
    assert window_usage([]) == {}
    with pytest.raises(ValueError):
        window_usage(_samples(), 3, 1)


def test_window_usage_takes_a_new_lifetime_high_of_the_process_itself():
    rows = _samples()
    for r in rows:  # ru_maxrss grew from 40 to 80 between t=1 and t=2
        r["own_maxrss_bytes"] = 80.0 if r["t_s"] >= 2 else 40.0
    assert window_usage(rows, 0.5, 2.5)["peak_rss_bytes"] == 80.0
    assert window_usage(rows, 2.5, 4.0)["peak_rss_bytes"] == 20.0  # it did not grow in this window


def test_load_window_from_records():
    class R:
        def __init__(self, a, b):
            self.intended_s, self.client_done_s = a, b

    assert load_window([R(5.0, 7.0), R(4.0, 9.0), R(6.0, None)]) == (4.0, 9.0)
    assert load_window([]) is None


CHILD = f"""
import time
buf = bytearray({ALLOC})
for i in range(0, len(buf), 4096):
    buf[i] = 1
t = time.process_time()
while time.process_time() - t < 0.4:
    pass
time.sleep(0.6)
"""


def test_sampler_counts_a_child_born_during_the_trial_not_one_from_before():
    old = subprocess.Popen([sys.executable, "-c", "import time; b = bytearray(96 * 1024 * 1024); time.sleep(30)"])
    try:
        time.sleep(0.3)
        with ResourceSampler(interval_s=0.05, gpu=False) as sampler:
            base = sampler.samples[0]["rss_bytes"]
            subprocess.run([sys.executable, "-c", CHILD], check=True)
        s = sampler.summary()
    finally:
        old.kill()
        old.wait()
    # the new child's 64 MiB and >= 0.4 s busy CPU are in; the old child's 96 MiB is not
    assert s["peak_rss_bytes"] - base >= 0.8 * ALLOC, s
    assert s["peak_rss_bytes"] - base < 96 * 1024 * 1024 + 0.5 * ALLOC, s
    assert s["cpu_time_s"] >= 0.3, s
    assert s["processes"] >= 2 and s["gpu"].startswith("not available")
    assert "sampler_error" not in s


def test_an_in_process_sampler_never_scans_for_children(monkeypatch):
    import psutil

    scans = []
    real = psutil.Process.children
    monkeypatch.setattr(psutil.Process, "children", lambda self, *a, **k: scans.append(1) or real(self, *a, **k))
    with ResourceSampler(interval_s=0.02, gpu=False, children=False) as sampler:
        subprocess.run([sys.executable, "-c", CHILD], check=True)
    s = sampler.summary()
    assert not scans and s["processes"] == 1 and len(sampler.samples) >= 5
    assert s["cpu_time_s"] >= 0 and s["peak_rss_bytes"] > 0
