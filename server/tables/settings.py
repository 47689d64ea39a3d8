"""UPDATE_BROKER_CONFIG's settable subset: which broker settings an operator may change on a
running broker (RocketMQ ``Configuration.update`` + its persisted ``broker.conf``).

Owns: ``SETTABLE`` (RocketMQ name -> ``BrokerConfig`` field, parser, range), ``BrokerSettings``
(validate and apply a change, the overrides file ``config/broker.properties``: ``key=value``
lines in RocketMQ names, loaded at start over the command-line values).

Invariants:
* All or nothing: every key of a request is checked (known, settable, value in range)
  before any is applied; a refusal names the key and changes nothing.
* A change applies to the live ``BrokerConfig`` object every processor holds (as RocketMQ
  sets the fields of its live ``BrokerConfig``), so it is effective at the next request
  that reads the setting; ``on_change`` hooks carry it to services that copied a value at
  start (the disk watermark). Only settings read at request time are settable:
  sizes of files, listeners, the delay-level table and the flush mode are fixed at start.
* The overrides file is written atomically in a thread; the change is answered only once
  the file holds it, and a restart applies the same values (``broker.config_loaded``).
* No settable value can brick the broker: every value is range-checked (RocketMQ's range
  where it has one), and ``diskMaxUsedSpaceRatio`` (the write watermark here) must be
  above the data disk's current use, else every send would be refused at once. The same
  checks run when the file is loaded at start, so a bricking entry in a file written by
  an older version is skipped (named in ``broker.config_loaded``) and the broker serves.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any  # Any: BrokerConfig and its field values of several types

from kairosmq.protocol.bodies import properties_to_string, string_to_properties

FILE_NAME = "broker.properties"


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low not in ("true", "false"):
        raise ValueError("must be true or false")
    return low == "true"


def _int(lo: int, hi: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise ValueError("must be an integer") from None
        if not lo <= value <= hi:
            raise ValueError(f"must be within [{lo}, {hi}]")
        return value

    return parse


def disk_used_percent(path: Path) -> float:
    """How full the data disk is, in percent, counted as ``store/guard.py`` counts it (the
    root reserve as used)."""
    st = os.statvfs(path)
    return 100.0 * (st.f_blocks - st.f_bavail) / st.f_blocks if st.f_blocks > 0 else 0.0


@dataclass(frozen=True, slots=True)
class Setting:
    field: str  # BrokerConfig field
    parse: Callable[[str], Any]  # RocketMQ text -> field value (ValueError with the reason)
    show: Callable[[Any], str]  # field value -> RocketMQ text


def _ms_to_s(parse: Callable[[str], int]) -> Callable[[str], float]:
    return lambda text: parse(text) / 1000


def _lower(value: Any) -> str:
    return str(value).lower()


SETTABLE: dict[str, Setting] = {
    "autoCreateTopicEnable": Setting("auto_create_topic", _bool, _lower),
    "autoCreateSubscriptionGroup": Setting("auto_create_subscription_group", _bool, _lower),
    "defaultTopicQueueNums": Setting("default_queue_nums", _int(1, 1024), str),
    "longPollingEnable": Setting("long_polling", _bool, _lower),
    "enablePropertyFilter": Setting("enable_property_filter", _bool, _lower),
    "fileReservedTime": Setting("file_reserved_hours", _int(1, 24 * 365 * 10), lambda h: f"{h:g}"),
    "flushIntervalCommitLog": Setting(
        "flush_interval", _ms_to_s(_int(1, 60_000)), lambda s: str(round(s * 1000))
    ),
    "diskMaxUsedSpaceRatio": Setting(
        "disk_max_used_ratio", lambda t: _int(10, 95)(t) / 100, lambda r: str(round(r * 100))
    ),
    # kairosmq's own (camelCase of the field): retry defaults of auto-created groups, pulls
    "maxReconsumeTimes": Setting("max_reconsume_times", _int(0, 10_000), str),
    "retryQueueNums": Setting("retry_queue_nums", _int(1, 64), str),
    "maxPullHoldMs": Setting("max_pull_hold_ms", _int(0, 60_000), str),
    "pullMaxBytes": Setting("pull_max_bytes", _int(1024, 64 << 20), str),
}


class BrokerSettings:
    def __init__(self, config: Any, config_dir: Path) -> None:
        self.config = config
        self.path = config_dir / FILE_NAME
        self.overrides: dict[str, str] = {}
        self.on_change: list[Callable[[str, Any], None]] = []
        self._lock = threading.Lock()
        self._generation = 0
        self._written = 0

    def check(self, props: dict[str, str], known: set[str] | None = None) -> dict[str, Any]:
        """Validate a change; return field -> value. ``PermissionError`` for a setting that
        exists (one of ``known``: what GET_BROKER_CONFIG shows) but is fixed at start,
        ``ValueError`` for an unknown key or a bad value."""
        if not props:
            raise ValueError("no setting given (body: key=value lines)")
        out: dict[str, Any] = {}
        for key, text in props.items():
            setting = SETTABLE.get(key)
            if setting is None:
                if known is not None and key in known:
                    raise PermissionError(
                        f"{key} is fixed at start; settable: {', '.join(sorted(SETTABLE))}"
                    )
                raise ValueError(
                    f"unknown broker setting {key!r}; settable: {', '.join(sorted(SETTABLE))}"
                )
            try:
                out[setting.field] = setting.parse(text)
                self._check_live(setting.field, out[setting.field])
            except ValueError as err:
                raise ValueError(f"{key}={text!r}: {err}") from None
        return out

    def _check_live(self, field: str, value: Any) -> None:
        """Refuse a value that would refuse every send given the broker's state now."""
        if field == "disk_max_used_ratio":
            path = Path(self.config.data_dir)
            try:
                used = disk_used_percent(path if path.exists() else path.parent)
            except OSError:
                return
            if value * 100 <= used:
                raise ValueError(
                    f"the data disk is {used:.0f}% used: a watermark at or "
                    f"below it would refuse every send (SERVICE_NOT_AVAILABLE)"
                )

    def apply(self, props: dict[str, str], known: set[str] | None = None) -> None:
        """Check, then set every field on the live config (all or nothing)."""
        values = self.check(props, known)
        for key in props:
            field = SETTABLE[key].field
            object.__setattr__(self.config, field, values[field])
            self.overrides[key] = SETTABLE[key].show(values[field])
            for hook in self.on_change:
                hook(field, values[field])

    # ------------------------------------------------------------ persistence

    def load(self) -> list[str]:
        """Apply the overrides file (a restart keeps what UPDATE_BROKER_CONFIG set); a bad
        entry is skipped and named in the returned list."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        skipped = []
        for key, value in string_to_properties(text).items():
            try:
                self.apply({key: value})
            except (ValueError, PermissionError):
                skipped.append(key)
        return skipped

    def _write(self, generation: int, text: str) -> None:
        with self._lock:
            if generation <= self._written:
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(f".{self.path.name}.tmp")
            with open(tmp, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            self._written = generation

    async def persist_async(self) -> None:
        self._generation += 1
        text = properties_to_string(self.overrides)
        await asyncio.to_thread(self._write, self._generation, text)
