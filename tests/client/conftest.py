"""Client integration helpers: a quiet broker and a collecting listener."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest_asyncio
from kairosmq.client import ConsumeContext, ConsumeStatus, MessageExt
from kairosmq.server.broker import Broker


@pytest_asyncio.fixture
async def kbroker(broker_factory: Callable[..., Awaitable[Broker]]) -> Broker:
    return await broker_factory(log_messages=False)


class Collector:
    """An async listener that records messages; ``status`` decides the answer."""

    def __init__(self, status: Callable[[MessageExt], ConsumeStatus] | None = None) -> None:
        self.msgs: list[MessageExt] = []
        self.contexts: list[ConsumeContext] = []
        self._status = status
        self._changed = asyncio.Event()

    async def __call__(self, msgs: list[MessageExt], ctx: ConsumeContext) -> ConsumeStatus:
        self.msgs.extend(msgs)
        self.contexts.append(ctx)
        self._changed.set()
        if self._status is not None:
            return self._status(msgs[0])
        return ConsumeStatus.CONSUME_SUCCESS

    @property
    def bodies(self) -> list[bytes]:
        return [m.body for m in self.msgs]

    async def wait_for(self, n: int, timeout: float = 5.0) -> None:
        await wait_until(lambda: len(self.msgs) >= n, timeout)


async def wait_until(pred: Callable[[], Any], timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        if loop.time() > end:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(0.01)
