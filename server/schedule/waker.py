"""PreciseWaker: wake a task at a wall-clock millisecond, not up to ~1 ms after it.

Owns: one Linux ``timerfd`` (``CLOCK_REALTIME``, absolute expirations) watched by the
event loop, and the future it resolves (the timer service has one, each delay level's
task has one). uvloop's timers (libuv's) have millisecond
granularity against a loop time cached per iteration, so ``call_later`` to a due
instant wakes 0-1 ms after it; a timerfd wakes the loop's ``epoll`` at the instant
itself. Measured here (idle loop, a due instant 3 ms ahead, 300 times): p50 0.30 ms late
with ``call_later``, 0.08 ms with the timerfd; p90 0.64 vs 0.18 ms. Long sleeps matter
more: the kernel gives a poll/epoll timeout a slack of 0.1 % of its length (at most
100 ms, none only for real-time tasks), so a loop sleeping 20 s to a due instant wakes
~20 ms late, while a timerfd's expiry has no slack (measured: 20.56 vs 0.24 ms late
after 20 s; docs/performance.md, "Sleeping to a due instant").

Invariants:
* Never early: the expiration is absolute wall-clock time, and the future resolves only
  once the clock reads at least the armed millisecond (the service checks again anyway).
* One instant armed at a time: ``arm`` replaces the previous one (``timerfd_settime``
  also clears expirations not read yet, so a stale one cannot resolve a newer future).
* ``create`` returns None where there is no timerfd (not Linux, no libc symbol): the
  service then sleeps with ``call_later`` as before.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import os
import sys

from ..clock import wall_ms

_CLOCK_REALTIME = 0
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
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.timerfd_create.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.timerfd_settime.argtypes = [
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(_Itimerspec),
            ctypes.c_void_p,
        ]
    except (OSError, AttributeError):
        return None
    return libc


class PreciseWaker:
    def __init__(self, loop: asyncio.AbstractEventLoop, libc: ctypes.CDLL, fd: int) -> None:
        self._loop = loop
        self._settime = libc.timerfd_settime
        self._fd = fd
        self._spec = _Itimerspec()
        self._at = 0
        self._fut: asyncio.Future[None] | None = None
        loop.add_reader(fd, self._ready)

    @classmethod
    def create(cls, loop: asyncio.AbstractEventLoop) -> PreciseWaker | None:
        libc = _libc()
        if libc is None:
            return None
        fd = libc.timerfd_create(_CLOCK_REALTIME, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            return None
        try:
            return cls(loop, libc, fd)
        except (OSError, NotImplementedError):  # a loop that cannot watch the fd
            os.close(fd)
            return None

    def arm(self, at_ms: int, fut: asyncio.Future[None]) -> None:
        """Resolve ``fut`` once the wall clock reads ``at_ms`` (epoch ms) or later."""
        self._at, self._fut = at_ms, fut
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(max(at_ms, 1), 1000)
        value.tv_nsec *= 1_000_000
        if self._settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")

    async def wait_until(self, at_ms: int) -> None:
        """Sleep until the wall clock reads ``at_ms`` (the delay levels' tasks)."""
        fut: asyncio.Future[None] = self._loop.create_future()
        self.arm(at_ms, fut)
        await fut

    def _ready(self) -> None:
        try:
            os.read(self._fd, 8)
        except BlockingIOError:  # re-armed after it became readable: nothing expired
            return
        fut = self._fut
        if fut is not None and not fut.done():
            if wall_ms() >= self._at:
                self._fut = None
                fut.set_result(None)
            else:  # a wall clock read a hair behind the kernel's: look again shortly
                self._loop.call_later(0.0002, self._recheck)

    def _recheck(self) -> None:
        fut = self._fut
        if fut is not None and not fut.done():
            self.arm(self._at, fut)

    def close(self) -> None:
        self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._fut = None
