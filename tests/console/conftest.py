"""The console under test: a real broker (in-process, port 0) and the console's API and
pages served in-process on port 0, with a users file of a viewer (vera / view-pw), an
operator (otto / op-pw) and an admin (ada / admin-pw)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kairosmq.client.remoting import RemotingPool
from kairosmq.console.api import Brokers, ConsoleApi
from kairosmq.console.auth import Users
from kairosmq.console.http import HttpServer

from tests.console.harness import Log, users_file


@pytest.fixture
async def console(broker_factory, tmp_path: Path):
    broker = await broker_factory(delay_levels="1s 30s")
    pool = RemotingPool()
    log = Log()
    api = ConsoleApi(
        Users.load(users_file(tmp_path)),
        Brokers(pool, namesrv=None, broker=broker.address),
        log=log,
    )
    server = HttpServer(api.handle, "127.0.0.1", 0, log=log)
    await server.start()
    yield broker, server.port, log
    await server.stop()
    pool.close()
