"""The /metrics gauge poller (inferopt.transport.gauges): peaks of KV usage and running sequences during a
run, per scrape window — against a local aiohttp server whose gauges change while it is polled."""

import asyncio

from inferopt.transport.gauges import GaugePoller, fold_peaks, gauge_values

TEXT = """# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{engine="0",model_name="m"}} {usage}
vllm:num_requests_running{{engine="0",model_name="m"}} {running}
vllm:num_requests_running_other{{engine="0"}} 99
vllm:num_preemptions_total{{engine="0",model_name="m"}} 3.0
"""


def test_gauge_values_and_fold():
    vals = gauge_values(TEXT.format(usage=0.5, running=3))
    assert vals == {"kv_cache_usage_perc": 0.5, "num_requests_running": 3.0}  # no waiting gauge: left out
    peaks = fold_peaks({}, vals)
    peaks = fold_peaks(peaks, {"kv_cache_usage_perc": 0.25, "num_requests_running": 7.0})
    assert peaks == {"kv_cache_usage_perc_max": 0.5, "num_requests_running_max": 7.0}


def test_poller_keeps_each_windows_peak():
    from aiohttp import web

    state = {"usage": 0.1, "running": 1}

    async def metrics(_request):
        return web.Response(text=TEXT.format(**state))

    async def main():
        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        poller = GaugePoller(f"http://127.0.0.1:{port}/metrics", interval_s=0.02).start()
        try:
            await asyncio.sleep(0.15)
            first = poller.take()  # the warm-up window
            state.update(usage=0.98, running=6)  # the load: full cache, 6 running
            await asyncio.sleep(0.15)
            state.update(usage=0.0, running=0)  # idle again before the after-scrape
            await asyncio.sleep(0.15)
            second = poller.take()
        finally:
            await poller.stop()
            await runner.cleanup()
        return first, second

    first, second = asyncio.run(main())
    assert first["kv_cache_usage_perc_max"] == 0.1 and first["samples"] >= 2
    assert second["kv_cache_usage_perc_max"] == 0.98 and second["num_requests_running_max"] == 6
    assert second["failed_scrapes"] == 0
