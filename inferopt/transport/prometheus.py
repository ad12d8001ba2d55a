"""Prometheus text exposition -> a flat `{series: value}` dict, helpers over it, and an async scrape.

A series key is the metric name followed by its label set exactly as the server wrote it, e.g.
`vllm:num_preemptions_total` or `vllm:request_queue_time_seconds_sum{model_name="x"}`. `# HELP`/`# TYPE`
lines, blank lines and timestamps are dropped; `+Inf`, `-Inf` and `NaN` parse as floats. `metric_sum`
adds one metric over all its label sets (optionally only those matching some labels); `histogram` does the
same for a histogram's `_sum`, `_count` and `_bucket` series (buckets keyed by their `le` bound).

Deliberately not here: deltas between two scrapes (the caller subtracts) and any interpretation of what
a metric means for a phase.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

_FLOATS = {"+Inf": math.inf, "Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}


def _label_end(line: str, start: int) -> int:
    """Index of the `}` closing the label set opened at `start`, skipping quoted values (with escapes)."""
    i, quoted, n = start + 1, False, len(line)
    while i < n:
        c = line[i]
        if quoted:
            if c == "\\":
                i += 1
            elif c == '"':
                quoted = False
        elif c == '"':
            quoted = True
        elif c == "}":
            return i
        i += 1
    raise ValueError(f"unterminated label set in {line!r}")


def _float(text: str) -> float:
    return _FLOATS[text] if text in _FLOATS else float(text)


def parse_prometheus(text: str) -> dict[str, float]:
    """Every sample line of a Prometheus text exposition as `{name{labels}: value}` (see module doc).
    A malformed sample line raises ValueError naming it."""
    out: dict[str, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] == "#":
            continue
        brace = line.find("{")
        space = line.find(" ")
        if brace != -1 and (space == -1 or brace < space):
            end = _label_end(line, brace)
            key, rest = line[: end + 1], line[end + 1 :]
        else:
            if space == -1:
                raise ValueError(f"no value in metrics line {line!r}")
            key, rest = line[:space], line[space:]
        parts = rest.split()
        if not parts:
            raise ValueError(f"no value in metrics line {line!r}")
        try:
            out[key] = _float(parts[0])
        except ValueError:
            raise ValueError(f"bad value {parts[0]!r} in metrics line {line!r}") from None
    return out


def split_key(key: str) -> tuple[str, dict[str, str]]:
    """`name{a="1",b="x"}` -> (`name`, {"a": "1", "b": "x"})."""
    brace = key.find("{")
    if brace == -1:
        return key, {}
    name, body = key[:brace], key[brace + 1 : key.rfind("}")]
    labels: dict[str, str] = {}
    i, n = 0, len(body)
    while i < n:
        eq = body.find("=", i)
        if eq == -1:
            break
        label = body[i:eq].strip().lstrip(",").strip()
        j = body.find('"', eq) + 1
        value: list[str] = []
        while j < n and body[j] != '"':
            if body[j] == "\\" and j + 1 < n:
                j += 1
                value.append({"n": "\n"}.get(body[j], body[j]))
            else:
                value.append(body[j])
            j += 1
        labels[label] = "".join(value)
        i = j + 1
    return name, labels


def _matches(labels: dict[str, str], want: dict[str, str] | None) -> bool:
    return not want or all(labels.get(k) == v for k, v in want.items())


def metric_sum(metrics: dict[str, float], name: str, labels: dict[str, str] | None = None) -> float:
    """Sum of `name` over every label set (only those containing `labels`, if given); 0.0 if absent."""
    total = 0.0
    for key, value in metrics.items():
        if (key == name or key.startswith(name + "{")) and (labels is None or _matches(split_key(key)[1], labels)):
            total += value
    return total


@dataclass
class Histogram:
    sum: float = 0.0
    count: float = 0.0
    buckets: dict[float, float] = field(default_factory=dict)  # upper bound `le` -> cumulative count

    @property
    def mean(self) -> float:
        return self.sum / self.count if self.count else math.nan


def histogram(metrics: dict[str, float], name: str, labels: dict[str, str] | None = None) -> Histogram:
    """A histogram's `_sum`, `_count` and cumulative `_bucket`s, summed over label sets (see metric_sum)."""
    h = Histogram(sum=metric_sum(metrics, name + "_sum", labels), count=metric_sum(metrics, name + "_count", labels))
    prefix = name + "_bucket"
    for key, value in metrics.items():
        if key.startswith(prefix + "{"):
            _, lab = split_key(key)
            if "le" in lab and _matches(lab, labels):
                le = _float(lab["le"])
                h.buckets[le] = h.buckets.get(le, 0.0) + value
    h.buckets = dict(sorted(h.buckets.items()))
    return h


async def scrape(session: Any, url: str, timeout_s: float = 5.0) -> dict[str, float]:
    """GET `url` with an `aiohttp.ClientSession` and parse it. Raises on HTTP errors and bad text."""
    import aiohttp  # local: parsing needs no HTTP stack

    async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
        resp.raise_for_status()
        return parse_prometheus(await resp.text())
