"""Fixtures of the name-server tests: in-process ``NameServer`` on port 0 with short
housekeeping intervals, and raw peers playing brokers."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest_asyncio
from kairosmq.server.namesrv import NameServer


@pytest_asyncio.fixture
async def namesrv_factory(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[NameServer]]]:
    started: list[NameServer] = []

    async def make(**kw: Any) -> NameServer:
        kw.setdefault("data_dir", tmp_path / f"namesrv-{len(started)}")
        kw.setdefault("port", 0)
        ns = NameServer(**kw)
        await ns.start()
        started.append(ns)
        return ns

    yield make
    for ns in started:
        await ns.stop()


@pytest_asyncio.fixture
async def namesrv(namesrv_factory: Callable[..., Awaitable[NameServer]]) -> NameServer:
    return await namesrv_factory()
