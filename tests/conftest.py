"""Shared test setup: every asyncio test runs on uvloop; brokers start in-process on
port 0 with tiny delay levels so suites stay fast; ``spark`` and ``node`` tests are also
``slow`` (CONTRIBUTING.md: the fast subset)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import uvloop
from kairosmq.server.broker import Broker

from tests.helpers import FIXTURES, fast_config


def pytest_asyncio_loop_factories(config, item):  # noqa: ARG001 - pytest-asyncio hook
    return {"uvloop": uvloop.new_event_loop}


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by mark
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A ``spark`` test starts Spark's JVM and a ``node`` test runs the stock ali-ons client
    in node: both are ``slow`` too, so ``-m "not slow"`` leaves them out."""
    for item in items:
        if item.get_closest_marker("spark") or item.get_closest_marker("node"):
            item.add_marker(pytest.mark.slow)


@pytest_asyncio.fixture
async def broker_factory(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[Broker]]]:
    """Start brokers (stopped at teardown); ``await broker_factory(**config_overrides)``."""
    started: list[Broker] = []

    async def make(**overrides: Any) -> Broker:
        overrides.setdefault("data_dir", tmp_path / "broker")
        b = Broker(fast_config(**overrides))
        await b.start()
        started.append(b)
        return b

    yield make
    for b in started:
        await b.stop("test teardown")


@pytest_asyncio.fixture
async def broker(broker_factory: Callable[..., Awaitable[Broker]]) -> Broker:
    return await broker_factory()


@pytest.fixture
def fixture_frame() -> Callable[[str], bytes]:
    def load(rel: str) -> bytes:
        return bytes.fromhex((FIXTURES / rel).read_text().strip())

    return load
