"""Shared test helpers: event waits with deadlines and a virtual-time event loop.

Owns: ``wait_until`` (poll a predicate with a generous deadline instead of a fixed sleep),
``wait_for_event`` and ``VirtualLoop`` (an asyncio loop whose clock only moves when every
task is idle: it jumps straight to the next timer, so a test can assert *when* code wakes
and for how long it asked to sleep, without real waiting).

Invariants: ``VirtualLoop`` never sleeps in real time; a state where every task waits and
no timer is set raises ``VirtualDeadlock`` instead of hanging, and a callback storm that
never lets the clock move raises ``VirtualLivelock`` after ``max_iterations`` loop turns,
so a broken implementation fails the test quickly.
"""

from __future__ import annotations

import asyncio
import os
import selectors
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

# Apache RocketMQ 4.9.8 (jars, mqadmin.sh) for interop tests: $KAIROS_ROCKETMQ_HOME, else
# ``shared/apache-rocketmq`` beside the repository; tests that need it skip when absent.
ROCKETMQ_HOME = Path(os.environ.get("KAIROS_ROCKETMQ_HOME")
                     or Path(__file__).resolve().parents[2] / "shared" / "apache-rocketmq")


async def wait_until(pred: Callable[[], Any], timeout: float = 5.0, *,
                     interval: float = 0.005, what: str = "condition") -> None:
    """Return as soon as ``pred()`` is true; fail after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        if loop.time() > end:
            raise AssertionError(f"{what} not met within {timeout}s")
        await asyncio.sleep(interval)


async def stays_false(pred: Callable[[], Any], duration: float, *,
                      interval: float = 0.01) -> bool:
    """True if ``pred()`` stays false for ``duration`` seconds ("nothing extra arrives")."""
    loop = asyncio.get_running_loop()
    end = loop.time() + duration
    while loop.time() < end:
        if pred():
            return False
        await asyncio.sleep(interval)
    return not pred()


class VirtualDeadlock(RuntimeError):
    """Every task waits, no timer is armed and no I/O is registered: nothing can happen."""


class VirtualLivelock(RuntimeError):
    """The loop turned ``max_iterations`` times without the test finishing."""


@dataclass(frozen=True, slots=True)
class TimerRequest:
    """A timer armed on a ``VirtualLoop``: by which task, at what time, for when."""

    task: str | None
    at: float
    when: float

    @property
    def delay(self) -> float:
        return self.when - self.at


class _VirtualSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualLoop | None = None

    def select(self, timeout: float | None = None) -> list[Any]:
        events = super().select(0)  # real I/O (the loop's self-pipe) never waits
        if events:
            return events
        assert self.loop is not None
        if timeout is None:
            raise VirtualDeadlock("every task waits and no timer is armed")
        if timeout > 0:
            self.loop.advance(timeout)
        return []


class VirtualLoop(asyncio.SelectorEventLoop):
    """A selector loop on a virtual clock (starts at 0.0 s, moves only to the next timer).

    ``timers`` records every ``call_at``/``call_later`` (so every ``asyncio.sleep``) with
    the name of the task that armed it; ``wakes`` records every instant the clock jumped to.
    """

    def __init__(self, max_iterations: int = 1_000_000) -> None:
        self._vnow = 0.0
        self.timers: list[TimerRequest] = []
        self.wakes: list[float] = []
        self.max_iterations = max_iterations
        self._turns = 0
        selector = _VirtualSelector()
        super().__init__(selector=selector)
        selector.loop = self

    def time(self) -> float:
        return self._vnow

    def advance(self, seconds: float) -> None:
        self._vnow += seconds
        self.wakes.append(self._vnow)

    def call_at(self, when: float, callback: Callable[..., Any], *args: Any,
                context: Any = None) -> asyncio.TimerHandle:
        task = asyncio.current_task(self) if self.is_running() else None
        self.timers.append(TimerRequest(task.get_name() if task else None, self._vnow, when))
        return super().call_at(when, callback, *args, context=context)

    def _run_once(self) -> None:
        self._turns += 1
        if self._turns > self.max_iterations:
            raise VirtualLivelock(f"{self.max_iterations} loop turns at t={self._vnow:.3f}s")
        super()._run_once()  # type: ignore[misc]

    def timers_of(self, task_name: str) -> list[TimerRequest]:
        return [t for t in self.timers if t.task == task_name]


def run_virtual(main: Callable[[VirtualLoop], Coroutine[Any, Any, T]],
                max_iterations: int = 1_000_000) -> T:
    """Run ``main(loop)`` to completion on a fresh ``VirtualLoop`` and close it."""
    loop = VirtualLoop(max_iterations)
    try:
        return loop.run_until_complete(main(loop))
    finally:
        loop.close()
