"""Helpers for the operations tests: run ``kairosmq admin`` against an in-process broker."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable

import pytest
from kairosmq.client import admin as admin_cli
from kairosmq.server.broker import Broker

AdminRunner = Callable[..., Awaitable[tuple[int, str, str]]]


@pytest.fixture
def admin() -> Callable[[Broker], AdminRunner]:
    """``run = admin(broker); code, out, err = await run("topic", "list", json_out=True)``.

    Calls ``admin_cli.main(argv)`` in a thread (it runs its own event loop) so the
    broker's loop keeps serving; ``--namesrv`` points at the broker's name server.
    """

    def bind(broker: Broker) -> AdminRunner:
        async def run(
            *argv: str, json_out: bool = False, direct: bool = False
        ) -> tuple[int, str, str]:
            args = ["--namesrv", broker.namesrv_address, "--timeout", "3"]
            if direct:
                args += ["--broker", broker.address]
            if json_out:
                args.append("--json")
            out, err = io.StringIO(), io.StringIO()
            code = await asyncio.to_thread(admin_cli.main, [*args, *argv], out=out, err=err)
            return code, out.getvalue(), err.getvalue()

        return run

    return bind
