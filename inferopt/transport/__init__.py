"""The HTTP client side: an incremental SSE parser (`sse.py`) and a Prometheus text parser and scraper
(`prometheus.py`), shared by the `openai` and `vllm` engines.

Deliberately not here: the engines themselves (`inferopt.engines.openai`) and load generation
(`inferopt.measure.runner`).
"""

from inferopt.transport.prometheus import Histogram, histogram, metric_sum, parse_prometheus, scrape, split_key
from inferopt.transport.sse import DONE, SSEEvent, SSEParser

__all__ = [
    "DONE",
    "Histogram",
    "SSEEvent",
    "SSEParser",
    "histogram",
    "metric_sum",
    "parse_prometheus",
    "scrape",
    "split_key",
]
