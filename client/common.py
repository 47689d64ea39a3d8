"""Pieces Producer and PushConsumer share: client ids, topic checks, periodic tasks.

Owns: ``make_client_id`` (RocketMQ's ``ip@instanceName`` form), ``check_topic`` (the
broker's topic rules, checked before a request is built) and ``Periodic`` (a named task
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
import re
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from .errors import MessageError

log = logging.getLogger("kairosmq.client")

CLIENT_INNER_PRODUCER = "CLIENT_INNER_PRODUCER"
MAX_TOPIC_LENGTH = 127
_TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")
_instances = itertools.count(1)
_valid_topics: set[str] = set()


def make_client_id(ip: str, instance_name: str | None = None) -> str:
    """``ip@instance`` where the default instance is ``<pid>#<n>`` (unique per object)."""
    name = instance_name or f"{os.getpid()}#{next(_instances)}"
    return f"{ip}@{name}"


def check_topic(topic: str) -> None:
    """Raise ``MessageError`` unless ``topic`` is one the broker will accept."""
    if topic in _valid_topics:
        return
    if not topic or len(topic.encode()) > MAX_TOPIC_LENGTH or not _TOPIC_RE.match(topic):
        raise MessageError(
            f"topic {topic!r} is invalid: 1..{MAX_TOPIC_LENGTH} characters of [%|a-zA-Z0-9_-]"
        )
    if len(_valid_topics) < 10_000:
        _valid_topics.add(topic)


def retry_topic(group: str) -> str:
    return f"%RETRY%{group}"


class Periodic:
    """Run ``fn`` every ``interval`` seconds in a task until ``stop()``; ``wake()`` runs it now."""

    def __init__(
        self, name: str, interval: float, fn: Callable[[], Awaitable[None]], *,
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


async def unregister_client(pool: Any, addrs: Iterable[str], ext: dict[str, str]) -> None:
    """UNREGISTER_CLIENT to every broker (best effort, 1 s each): the shutdown step that
    producers and consumers share."""
    from kairosmq.protocol.codes import RequestCode

    from .errors import ClientError

    for addr in addrs:
        try:
            await pool.invoke(addr, RequestCode.UNREGISTER_CLIENT, ext, timeout=1.0)
        except ClientError as err:
            log.info("unregister from %s failed: %s", addr, err)

