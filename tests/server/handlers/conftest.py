"""Fixtures of the handler unit tests (helpers in rig.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.handlers.rig import Services


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    s = Services(tmp_path)
    yield s
    s.close()
