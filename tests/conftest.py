"""Shared test setup: every asyncio test runs on uvloop; brokers start in-process on
port 0 with tiny delay levels so suites stay fast."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import uvloop
from kairosmq.server.broker import Broker
from kairosmq.server.config import BrokerConfig

FIXTURES = Path(__file__).parent / "fixtures" / "real-client-frames"
FAST_LEVELS = "50ms 100ms 150ms 200ms 250ms 300ms 350ms 400ms 450ms 500ms 550ms 600ms " \
              "650ms 700ms 750ms 800ms 850ms 900ms"


def pytest_asyncio_loop_factories(config, item):  # noqa: ARG001 - pytest-asyncio hook
    return {"uvloop": uvloop.new_event_loop}


def fast_config(data_dir: Path, **overrides: Any) -> BrokerConfig:
    opts: dict[str, Any] = {
        "data_dir": data_dir, "port": 0, "namesrv_port": 0, "vip_channel": False,
        "delay_levels": FAST_LEVELS, "commitlog_segment_size": 4 * 1024 * 1024 + 65536,
        "max_message_size": 4 * 1024 * 1024, "consumequeue_units_per_file": 1000,
        "checkpoint_interval": 0.5, "flush_interval": 0.05,
    }
    opts.update(overrides)
    return BrokerConfig(**opts)


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
