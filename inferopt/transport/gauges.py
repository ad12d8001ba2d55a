"""Peaks of a server's Prometheus gauges during a run: a poller that scrapes /metrics every `interval_s` on
the running event loop and keeps the maximum of the gauges the KV rule reads (vLLM: kv_cache_usage_perc,
num_requests_running, num_requests_waiting).

Why: the before/after scrape of /metrics gives counter deltas (preemptions) but a gauge read at the end of a
run says nothing about its peak — an idle server reports an empty KV cache. `take()` closes the current
window and starts the next, so an engine can call it at its before and after scrapes and report the peaks
of the measured window only (warm-ups fall in the first window).

Cost: one HTTP GET per interval (~30 KB of text on vLLM); only the wanted gauge lines are parsed.

What this module deliberately does not do: counters or histograms (before/after deltas do that), judge
anything, or run outside an asyncio loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from inferopt.transport.prometheus import metric_sum, parse_prometheus

DEFAULT_GAUGES: Mapping[str, str] = {
    "kv_cache_usage_perc": "vllm:kv_cache_usage_perc",
    "num_requests_running": "vllm:num_requests_running",
    "num_requests_waiting": "vllm:num_requests_waiting",
}
DEFAULT_INTERVAL_S = 0.25


def gauge_values(text: str, gauges: Mapping[str, str] = DEFAULT_GAUGES) -> dict[str, float]:
    """Our key -> the gauge's value summed over its label sets, from Prometheus text (only the wanted
    metric lines are parsed). Missing gauges are left out."""
    names = tuple(gauges.values())
    lines = [ln for ln in text.splitlines() if ln.startswith(names)]
    raw = parse_prometheus("\n".join(lines))
    out: dict[str, float] = {}
    for key, metric in gauges.items():
        if any(k == metric or k.startswith(metric + "{") for k in raw):
            out[key] = metric_sum(raw, metric)
    return out


def fold_peaks(peaks: dict[str, float], sample: Mapping[str, float]) -> dict[str, float]:
    """`peaks` updated with one sample: `<key>_max` per gauge (pure; returns a new dict)."""
    out = dict(peaks)
    for k, v in sample.items():
        out[f"{k}_max"] = max(out.get(f"{k}_max", v), v)
    return out


class GaugePoller:
    """Scrapes `url` every `interval_s` while started; `take()` -> the window's peaks (module doc)."""

    def __init__(
        self, url: str, interval_s: float = DEFAULT_INTERVAL_S, gauges: Mapping[str, str] = DEFAULT_GAUGES
    ) -> None:
        self.url = url
        self.interval_s = interval_s
        self.gauges = gauges
        self._peaks: dict[str, float] = {}
        self._samples = 0
        self._errors = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> GaugePoller:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    async def _run(self) -> None:
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=max(2.0, 4 * self.interval_s))
        async with aiohttp.ClientSession(timeout=timeout) as sess:
            while True:
                try:
                    async with sess.get(self.url) as resp:
                        text = await resp.text()
                    self._peaks = fold_peaks(self._peaks, gauge_values(text, self.gauges))
                    self._samples += 1
                except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
                    self._errors += 1
                await asyncio.sleep(self.interval_s)

    def take(self) -> dict[str, Any]:
        """The peaks since the last `take()` (or start), with the number of scrapes and failed scrapes;
        starts a new window."""
        out: dict[str, Any] = {
            **self._peaks,
            "samples": self._samples,
            "failed_scrapes": self._errors,
            "interval_s": self.interval_s,
        }
        self._peaks, self._samples, self._errors = {}, 0, 0
        return out

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
