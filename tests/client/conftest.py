"""Client test fixtures: a quiet broker (message logging off)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest_asyncio
from kairosmq.server.broker import Broker


@pytest_asyncio.fixture
async def kbroker(broker_factory: Callable[..., Awaitable[Broker]]) -> Broker:
    return await broker_factory(log_messages=False)
