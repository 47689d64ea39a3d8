"""Broker configuration (server/config.py): delay-level parsing, defaults, derivations and
validation."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from kairosmq.server.config import DEFAULT_DELAY_LEVELS, BrokerConfig, FlushMode
from kairosmq.server.schedule.delay.levels import parse_delay_levels

S, M, H = 1000, 60_000, 3_600_000


def test_default_delay_levels() -> None:
    assert DEFAULT_DELAY_LEVELS == "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
    assert parse_delay_levels(DEFAULT_DELAY_LEVELS) == (
        1 * S,
        5 * S,
        10 * S,
        30 * S,
        1 * M,
        2 * M,
        3 * M,
        4 * M,
        5 * M,
        6 * M,
        7 * M,
        8 * M,
        9 * M,
        10 * M,
        20 * M,
        30 * M,
        1 * H,
        2 * H,
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("250ms 2s 3m 1h 1d", (250, 2000, 180_000, 3_600_000, 86_400_000)),
        ("1.5s 0.5m 0.25h", (1500, 30_000, 900_000)),
        ("  50ms\t100ms\n150ms ", (50, 100, 150)),
        ("1S 2M", (1000, 120_000)),
        ("7", None),
    ],
)
def test_parse_delay_levels_units(text: str, expected: tuple[int, ...] | None) -> None:
    if expected is None:
        with pytest.raises(ValueError, match="'7'"):
            parse_delay_levels(text)
    else:
        assert parse_delay_levels(text) == expected


@pytest.mark.parametrize(
    ("text", "token", "position"),
    [
        ("1s 5x 10s", "5x", 2),
        ("1s -2s", "-2s", 2),
        ("s", "s", 1),
        ("1s 2 m", "2", 2),
        ("1.s", "1.s", 1),
    ],
)
def test_parse_delay_levels_bad_token_is_named(text: str, token: str, position: int) -> None:
    with pytest.raises(ValueError) as info:
        parse_delay_levels(text)
    assert repr(token) in str(info.value)
    assert f"token {position}" in str(info.value)


@pytest.mark.parametrize("text", ["0s", "0ms", "0.0001s"])
def test_parse_delay_levels_rejects_zero(text: str) -> None:
    with pytest.raises(ValueError, match="positive"):
        parse_delay_levels(text)


@pytest.mark.parametrize("text", ["", "   ", "\n"])
def test_parse_delay_levels_empty(text: str) -> None:
    with pytest.raises(ValueError, match="empty"):
        parse_delay_levels(text)


def test_broker_config_defaults_and_derivations(tmp_path: Path) -> None:
    cfg = BrokerConfig()
    assert cfg.delay_levels_ms[0] == 1000 and cfg.max_delay_level == 18
    assert (cfg.port, cfg.namesrv_port, cfg.max_reconsume_times) == (10911, 9876, 16)
    custom = BrokerConfig(data_dir=str(tmp_path), delay_levels="10ms 20ms", flush_mode="SYNC_FLUSH")
    assert custom.data_dir == tmp_path and isinstance(custom.data_dir, Path)
    assert custom.delay_levels_ms == (10, 20) and custom.max_delay_level == 2
    assert custom.flush_mode is FlushMode.SYNC_FLUSH
    with pytest.raises(dataclasses.FrozenInstanceError):
        custom.port = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"delay_levels": "1s bogus"}, "bogus"),
        ({"delay_levels": ""}, "empty"),
        ({"commitlog_segment_size": 4095, "max_message_size": 0}, "at least 4096"),
        ({"commitlog_segment_size": 1 << 20, "max_message_size": (1 << 20) - 4095}, "fit"),
        ({"flush_mode": "SOMETIMES"}, "SOMETIMES"),
    ],
)
def test_broker_config_validation(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        BrokerConfig(**kw)


def test_broker_config_message_size_boundary() -> None:
    BrokerConfig(commitlog_segment_size=1 << 20, max_message_size=(1 << 20) - 4096)
