"""Fixtures for the security tests: a broker started with an ACL file (``acl_broker``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest_asyncio
from kairosmq.server.broker import Broker

from tests.security.acl_setup import ACL_FILE


@pytest_asyncio.fixture
async def acl_broker(broker_factory: Callable[..., Awaitable[Broker]], tmp_path: Path) -> Broker:
    """A broker with ``acl_setup.ACL_FILE`` (producer, consumer, admin accounts), polling
    the file for changes every 50 ms; the file is ``broker.acl.path``."""
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL_FILE)
    return await broker_factory(acl_file=path, acl_reload_interval=0.05)
