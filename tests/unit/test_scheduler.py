"""Static batching and admission control are pure functions of (waiting, clock): test them exactly."""

from __future__ import annotations

import pytest

from inferopt.config import BatchingKnobs
from inferopt.engines.scheduler import Waiting, admit_on_arrival, static_batch


def _w(rid: str, arrival_s: float, priority: int = 0) -> Waiting:
    return Waiting(request_id=rid, arrival_s=arrival_s, priority=priority)


def test_empty_queue_waits_for_an_arrival() -> None:
    d = static_batch(BatchingKnobs(), [], now_s=100.0)
    assert d.batch == () and d.wait_s is None


def test_full_batch_starts_at_once_fifo_and_capped() -> None:
    knobs = BatchingKnobs(max_batch_size=3, batch_wait_ms=1000)
    waiting = [_w("c", 3.0), _w("a", 1.0), _w("d", 4.0), _w("b", 2.0)]
    d = static_batch(knobs, waiting, now_s=4.0)
    assert d.batch == ("a", "b", "c")
    assert d.wait_s is None


def test_partial_batch_waits_until_the_oldest_deadline() -> None:
    knobs = BatchingKnobs(max_batch_size=4, batch_wait_ms=50)
    waiting = [_w("a", 10.0), _w("b", 10.02)]
    d = static_batch(knobs, waiting, now_s=10.03)
    assert d.batch == ()
    assert d.wait_s == pytest.approx(0.02)
    d = static_batch(knobs, waiting, now_s=10.05)
    assert d.batch == ("a", "b")


def test_zero_wait_window_starts_immediately() -> None:
    d = static_batch(BatchingKnobs(max_batch_size=8, batch_wait_ms=0), [_w("a", 5.0)], now_s=5.0)
    assert d.batch == ("a",)


def test_priority_breaks_ties_only() -> None:
    knobs = BatchingKnobs(max_batch_size=1, batch_wait_ms=0)
    assert static_batch(knobs, [_w("low", 1.0, priority=5), _w("high", 1.0, priority=0)], now_s=2.0).batch == ("high",)
    # an earlier arrival beats a better priority
    assert static_batch(knobs, [_w("late", 1.5, priority=0), _w("early", 1.0, priority=9)], now_s=2.0).batch == (
        "early",
    )


def test_admission_bound() -> None:
    assert admit_on_arrival(BatchingKnobs(max_queue=None), 10_000)
    knobs = BatchingKnobs(max_queue=2)
    assert admit_on_arrival(knobs, 0)
    assert admit_on_arrival(knobs, 1)
    assert not admit_on_arrival(knobs, 2)
    assert not admit_on_arrival(knobs, 3)
