"""Shared test setup: every asyncio test runs on uvloop."""

from __future__ import annotations

from pathlib import Path

import uvloop

FIXTURES = Path(__file__).parent / "fixtures" / "real-client-frames"


def pytest_asyncio_loop_factories(config, item):  # noqa: ARG001 - pytest-asyncio hook
    return {"uvloop": uvloop.new_event_loop}
