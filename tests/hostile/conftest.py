"""Fixtures of the hostile suite: real broker processes, stopped at teardown with SIGTERM
(which must exit 0 within 20 s, else the process is killed and the teardown fails)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest_asyncio

from tests.hostile.harness import HostileBroker


@pytest_asyncio.fixture
async def hostile(tmp_path: Path) -> AsyncIterator[Callable[..., Awaitable[HostileBroker]]]:
    """``await hostile(*extra_cli_args)``: a started broker process on ``tmp_path/d``."""
    made: list[HostileBroker] = []

    async def make(*extra: str) -> HostileBroker:
        hb = HostileBroker(tmp_path / "d", *extra)
        made.append(hb)
        await hb.start()
        return hb

    yield make
    for hb in made:  # after the hostile traffic, SIGTERM must still stop it cleanly
        await hb.close_peers()
        p = hb.proc.proc
        if p is not None and p.poll() is None:
            hb.graceful_stop()
