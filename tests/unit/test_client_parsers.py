"""The incremental SSE parser (lines and UTF-8 split across chunks, multi-line data, comments, [DONE],
error events) and the Prometheus text parser and its helpers."""

from __future__ import annotations

import json
import math

import pytest

from inferopt.transport import SSEParser, histogram, metric_sum, parse_prometheus, split_key

STREAM = (
    b": keep-alive\n\n"
    b'data: {"choices":[{"text":"h\xc3\xa9","index":0}],"usage":{"completion_tokens":3}}\n\n'
    b"event: note\ndata: line one\ndata: line two\n\n"
    b'data: {"error": {"message": "queue full", "code": 503}}\r\n\r\n'
    b"data: [DONE]\n\n"
)


def _events(chunks: list[bytes]):
    p = SSEParser()
    out = [ev for c in chunks for ev in p.feed(c)]
    return out, p


def _expected():
    out, p = _events([STREAM])
    assert not p.pending
    return out


def test_whole_stream() -> None:
    evs = _expected()
    assert [e.event for e in evs] == ["message", "note", "message", "message"]
    assert json.loads(evs[0].data)["choices"][0]["text"] == "hé"
    assert evs[1].data == "line one\nline two"
    assert json.loads(evs[2].data)["error"]["code"] == 503
    assert evs[3].is_done and not evs[0].is_done


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 13, 64])
def test_any_split_gives_the_same_events(size: int) -> None:
    chunks = [STREAM[i : i + size] for i in range(0, len(STREAM), size)]
    assert _events(chunks)[0] == _expected()


def test_cr_line_endings_split_between_cr_and_lf() -> None:
    out, _ = _events([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"])
    assert [e.data for e in out] == ["a\nb"]
    out, _ = _events([b"data: x\r\r"])
    assert [e.data for e in out] == ["x"]


def test_unterminated_event_is_pending_not_dispatched() -> None:
    out, p = _events([b'data: {"choices": []}\n'])
    assert out == [] and p.pending
    out, p = _events([b'data: {"cho'])
    assert out == [] and p.pending


def test_no_space_after_colon_and_empty_data_and_id() -> None:
    out, _ = _events([b"id: 7\ndata:x\n\ndata\n\nevent: e\n\ndata:\ndata:\n\n"])
    assert [(e.data, e.id) for e in out] == [("x", "7"), ("\n", "7")]


METRICS = """# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="tiny"} 2.0
vllm:num_preemptions_total{engine="1",model_name="tiny"} 3.0
vllm:request_queue_time_seconds_sum{model_name="tiny"} 1.25
vllm:request_queue_time_seconds_count{model_name="tiny"} 5.0
vllm:request_queue_time_seconds_bucket{le="0.1",model_name="tiny"} 3.0
vllm:request_queue_time_seconds_bucket{le="+Inf",model_name="tiny"} 5.0
vllm:admission_rejections_total{reason="queue full, max=4",model_name="tiny"} 7 1712345678000
process_open_fds 12
weird{a="x}y",b="q\\"z"} NaN
"""


def test_prometheus_keys_are_name_and_verbatim_labels() -> None:
    m = parse_prometheus(METRICS)
    assert m['vllm:request_queue_time_seconds_sum{model_name="tiny"}'] == 1.25
    assert m["process_open_fds"] == 12.0
    assert (
        m['vllm:admission_rejections_total{reason="queue full, max=4",model_name="tiny"}'] == 7.0
    )  # timestamp dropped
    assert math.isnan(m['weird{a="x}y",b="q\\"z"}'])
    assert split_key('weird{a="x}y",b="q\\"z"}') == ("weird", {"a": "x}y", "b": 'q"z'})


def test_prometheus_helpers() -> None:
    m = parse_prometheus(METRICS)
    assert metric_sum(m, "vllm:num_preemptions_total") == 5.0
    assert metric_sum(m, "vllm:num_preemptions_total", {"engine": "1"}) == 3.0
    assert metric_sum(m, "absent") == 0.0
    h = histogram(m, "vllm:request_queue_time_seconds")
    assert (h.sum, h.count, h.mean) == (1.25, 5.0, 0.25)
    assert h.buckets == {0.1: 3.0, math.inf: 5.0}


def test_prometheus_bad_line_is_named() -> None:
    with pytest.raises(ValueError, match="bad value"):
        parse_prometheus('metric_x{a="1"} twelve\n')
