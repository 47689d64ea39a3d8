"""Pieces Producer and PushConsumer share: client ids, topic checks, periodic tasks.

Owns: ``make_client_id`` (RocketMQ's ``ip@instanceName`` form), ``check_topic`` and
``check_group`` (the broker's naming rules from ``kairosmq.protocol.naming``, checked
before a request is built; a bad name raises ``InvalidName``, which is never retried)
and ``Periodic`` (a named task
that runs a coroutine every ``interval`` seconds, or sooner when ``wake()`` is called).

Invariants: a ``Periodic`` never dies from an exception in its coroutine (it logs and runs
again next round) and ``stop()`` cancels and awaits it, so nothing outlives ``shutdown()``.
Client ids are unique per client object in a process (the instance counter), because two
consumers of one group in one process must look like two members to the broker.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
from collections.abc import Awaitable, Callable

from kairosmq.protocol.naming import validate_group, validate_topic

from .errors import InvalidName

log = logging.getLogger("kairosmq.client")

CLIENT_INNER_PRODUCER = "CLIENT_INNER_PRODUCER"
_instances = itertools.count(1)
_valid_topics: set[str] = set()


def make_client_id(ip: str, instance_name: str | None = None) -> str:
    """``ip@instance`` where the default instance is ``<pid>#<n>`` (unique per object)."""
    name = instance_name or f"{os.getpid()}#{next(_instances)}"
    return f"{ip}@{name}"


__all__ = ["CLIENT_INNER_PRODUCER", "Periodic", "check_group", "check_topic", "make_client_id"]


def check_topic(topic: str) -> None:
    """Raise ``InvalidName`` unless ``topic`` is one the broker will accept."""
    if topic in _valid_topics:
        return
    bad = validate_topic(topic)
    if bad is not None:
        raise InvalidName(f"invalid topic: {bad}")
    if len(_valid_topics) < 10_000:
        _valid_topics.add(topic)


def check_group(group: str) -> None:
    """Raise ``InvalidName`` unless ``group`` is a group name the broker will accept."""
    bad = validate_group(group)
    if bad is not None:
        raise InvalidName(f"invalid group: {bad}")


class Periodic:
    """Run ``fn`` every ``interval`` seconds in a task until ``stop()``; ``wake()`` runs it now."""

    def __init__(
        self,
        name: str,
        interval: float,
        fn: Callable[[], Awaitable[None]],
        *,
        run_first: bool = False,
    ) -> None:
        self.name = name
        self.interval = interval
        self._fn = fn
        self._run_first = run_first
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name=self.name)

    def wake(self) -> None:
        self._wakeup.set()

    async def _loop(self) -> None:
        if not self._run_first:
            await self._sleep()
        while True:
            try:
                await self._fn()
            except asyncio.CancelledError:
                raise
            except Exception:  # keep the timer alive; the next round retries
                log.exception("periodic task %s failed", self.name)
            await self._sleep()

    async def _sleep(self) -> None:
        try:
            async with asyncio.timeout(self.interval):
                await self._wakeup.wait()
        except TimeoutError:
            pass
        self._wakeup.clear()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
