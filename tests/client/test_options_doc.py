"""docs/client.md documents the option dataclasses of client/options.py field by field: each
class's table lists exactly the fields that class declares, each with its real default."""

from __future__ import annotations

import dataclasses
import re
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from kairosmq.client.options import ClientConfig, ProducerOptions, PushConsumerOptions

DOC = Path(__file__).resolve().parents[2] / "docs" / "client.md"
CLASSES = (ClientConfig, ProducerOptions, PushConsumerOptions)


def _tables() -> dict[str, dict[str, str]]:
    """``{class name: {field: default cell}}`` from the tables that follow a paragraph
    starting with the class name in backquotes."""
    tables: dict[str, dict[str, str]] = {}
    current: str | None = None
    for line in DOC.read_text().splitlines():
        head = re.match(r"`(\w+)`", line)
        if head and head.group(1) in {c.__name__ for c in CLASSES}:
            current = head.group(1)
            tables[current] = {}
            continue
        row = re.match(r"\|\s*`(\w+)`\s*\|\s*`([^`]*)`\s*\|", line)
        if row and current is not None:
            assert row.group(1) not in tables[current], f"{row.group(1)} listed twice"
            tables[current][row.group(1)] = row.group(2)
        elif current is not None and tables[current] and not line.startswith("|"):
            current = None  # the table ended
    return tables


def _own_fields(cls: type) -> list[dataclasses.Field[Any]]:
    inherited = {
        f.name
        for base in cls.__mro__[1:]
        if dataclasses.is_dataclass(base)
        for f in dataclasses.fields(base)
    }
    return [f for f in dataclasses.fields(cls) if f.name not in inherited]


def _shown(value: Any) -> str:
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, str):
        return f'"{value}"'
    return repr(value)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_option_field_is_documented_with_its_default(cls: type) -> None:
    table = _tables().get(cls.__name__)
    assert table, f"docs/client.md has no table for {cls.__name__}"
    fields = _own_fields(cls)
    assert fields, cls
    missing = [f.name for f in fields if f.name not in table]
    assert not missing, f"{cls.__name__} fields missing from docs/client.md: {missing}"
    wrong = {
        f.name: (table[f.name], _shown(f.default))
        for f in fields
        if table[f.name] != _shown(f.default)
    }
    assert not wrong, f"{cls.__name__} defaults in docs/client.md (doc, code): {wrong}"


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_docs_list_no_option_that_is_not_a_field(cls: type) -> None:
    own = {f.name for f in _own_fields(cls)}
    extra = sorted(set(_tables().get(cls.__name__, {})) - own)
    assert not extra, f"docs/client.md lists {extra} under {cls.__name__}, not fields of it"


def test_the_parser_sees_a_changed_default() -> None:
    """The check can fail: a default that differs from the doc is reported."""
    table = _tables()["ProducerOptions"]
    assert table["send_msg_timeout"] == _shown(ProducerOptions().send_msg_timeout)
    assert table["send_msg_timeout"] != _shown(
        ProducerOptions(send_msg_timeout=1.5).send_msg_timeout
    )
