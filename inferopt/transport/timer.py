"""Sub-millisecond wake-ups on an asyncio loop without spinning: a Linux `timerfd` watched by the loop.

The loop's own timers (`asyncio.sleep`, `call_at`) are only as fine as its poll timeout: epoll takes
milliseconds, so a sleep ends up to ~1 ms late (uvloop's timers are whole milliseconds too). An open-loop client
at hundreds of requests per second needs better for its send times, and busy-waiting the last millisecond is no
answer on a small box: the spinning process takes the CPU from the server under test. A timerfd armed at an
absolute CLOCK_MONOTONIC time (the clock `time.perf_counter`, and so `records.now_s`, reads on Linux) makes the
poll return when it fires, to within the kernel's timer slack (~50 µs), costing nothing while waiting.

A timer holds one pending callback: `arm(target_s, callback)` runs `callback()` on the loop once `now_s() >=
target_s` (re-arming replaces it), straight from the loop's I/O phase. `make_timer()` gives a `PreciseTimer`
where timerfd exists (Linux) and a `LoopTimer` (the loop's own `call_at`, ~1 ms) elsewhere.

Deliberately not here: scheduling policy (the runner decides when to send).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
import sys
import time
from collections.abc import Callable

from inferopt.records import now_s

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = 0o4000
_TFD_CLOEXEC = 0o2000000
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.timerfd_settime.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Itimerspec), ctypes.c_void_p]
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _libc()
# perf_counter must be CLOCK_MONOTONIC for absolute timerfd deadlines to mean the same instant
_MONO_OK = _LIBC is not None and time.get_clock_info("perf_counter").implementation == "clock_gettime(CLOCK_MONOTONIC)"


class LoopTimer:
    """The fallback: the loop's `call_at` (millisecond precision)."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop or asyncio.get_running_loop()
        self._handle: asyncio.TimerHandle | None = None

    def arm(self, target_s: float, callback: Callable[[], None]) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle = self._loop.call_at(self._loop.time() + (target_s - now_s()), callback)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None


class PreciseTimer:
    """A timerfd watched by the loop: `callback` runs within ~0.1 ms of `target_s`."""

    def __init__(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        if not self.available():
            raise OSError("timerfd is not available here; fix: use make_timer(), which falls back to LoopTimer")
        self._loop = loop or asyncio.get_running_loop()
        fd = _LIBC.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create failed")
        self._fd = fd
        self._callback: Callable[[], None] | None = None
        self._spec = _Itimerspec()
        self._loop.add_reader(fd, self._fired)
        # now_s() = anchor + perf_counter(): the monotonic deadline is target - anchor
        self._anchor_s = now_s() - time.perf_counter()

    @staticmethod
    def available() -> bool:
        return _MONO_OK

    def _fired(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:
            return
        callback, self._callback = self._callback, None
        if callback is not None:
            callback()

    def arm(self, target_s: float, callback: Callable[[], None]) -> None:
        mono = target_s - self._anchor_s
        if mono <= time.perf_counter():
            mono = time.perf_counter()  # due already: fire on the next poll
        sec = int(mono)
        self._spec.it_value.tv_sec = sec
        self._spec.it_value.tv_nsec = max(1, int((mono - sec) * 1e9))
        self._callback = callback
        if _LIBC.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) != 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")

    def close(self) -> None:
        if self._fd >= 0:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
            self._fd = -1
            self._callback = None


def make_timer(loop: asyncio.AbstractEventLoop | None = None) -> PreciseTimer | LoopTimer:
    return PreciseTimer(loop) if PreciseTimer.available() else LoopTimer(loop)
