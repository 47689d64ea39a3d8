"""Helpers over the real-client captures in tests/fixtures/real-client-frames.

Expectations come from each folder's index.json (written by the capture tool), never
from the codec under test.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from tests.conftest import FIXTURES

REQUEST_CLIENTS = ("ali-ons-3.12.0", "cpp-client-1.x", "cpp-client-2.1.0")
MOCK_REPLIES = "mock-replies-accepted"


@cache
def index(folder: str) -> tuple[dict[str, Any], ...]:
    return tuple(json.loads((FIXTURES / folder / "index.json").read_text()))


def frame_bytes(folder: str, file: str) -> bytes:
    return bytes.fromhex((FIXTURES / folder / file).read_text().strip())


def request_entries() -> list[tuple[str, dict[str, Any]]]:
    return [(c, e) for c in REQUEST_CLIENTS for e in index(c)]


def entries_with_code(code: int) -> list[tuple[str, dict[str, Any]]]:
    return [(c, e) for c, e in request_entries() if e["code"] == code]


def entry(folder: str, file: str) -> dict[str, Any]:
    return next(e for e in index(folder) if e["file"] == file)


def java_to_string(value: Any) -> str:
    """What Java's toString gives for a JSON scalar (as RocketMQ's decoder stores it)."""
    if value is True:
        return "true"
    if value is False:
        return "false"
    return value if isinstance(value, str) else repr(value)


def expected_ext(header: dict[str, Any]) -> dict[str, str]:
    return {k: java_to_string(v) for k, v in (header.get("extFields") or {}).items()
            if v is not None}
