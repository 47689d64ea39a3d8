"""Subscription groups: the per-consumer-group settings RocketMQ keeps in its broker
(``SubscriptionGroupManager``, ``subscriptionGroup.json``).

Owns: ``SubscriptionGroupConfig`` (consumeEnable, consumeFromMinEnable,
consumeBroadcastEnable, retryQueueNums, retryMaxTimes, brokerId,
whichBrokerWhenConsumeSlowly, notifyConsumerIdsChangedEnable; RocketMQ's JSON names) and
``SubscriptionGroupManager``: the table, its data version, auto-creation, and its
persistence to ``config/subscriptionGroup.json`` as ``{"subscriptionGroupTable": {...},
"dataVersion": {...}}`` (RocketMQ's file layout).

Invariants:
* ``find`` is RocketMQ's ``findSubscriptionGroupConfig``: a group missing from the table is
  created with the broker's defaults (``retryMaxTimes`` = ``max_reconsume_times``,
  ``retryQueueNums`` = ``retry_queue_nums``) when ``auto_create`` is on (a heartbeat or a
  pull of a new group), else ``None`` (the caller answers SUBSCRIPTION_GROUP_NOT_EXIST).
* Every change bumps the data version and marks the table; one background writer
  (``server/tables/table_file.py``) encodes it in parts between other requests and writes it
  in a thread, coalescing the changes made meanwhile (no file I/O and no whole-table
  encoding on the event loop). Admin changes are answered after ``flushed()``; an
  auto-creation is written in the background.
* Bounded: at most ``max_groups`` entries (BrokerConfig ``max_subscription_groups``);
  creating one more raises ``ValueError`` naming the option (the request gets
  SYSTEM_ERROR with it), ``find`` answers None (a pull: SUBSCRIPTION_GROUP_NOT_EXIST
  naming the option) and nothing changes. ``load`` skips entries whose name or fields are
  not valid and keeps the rest (all of them, even past the limit); with no file yet it
  seeds the groups that have consumer offsets (an upgraded data directory).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any  # Any: JSON values; structlog's logger; the live BrokerConfig (duck-typed)

import orjson
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.naming import validate_group
from kairosmq.protocol.properties import parse_java_int

from ..store.files import read_json
from .table_file import TableFile, join_parts

# BrokerConfig.max_subscription_groups' default: RocketMQ 4.9.8's heartbeat creates
# %RETRY%<group> for every consumer group, so a broker registering with a name server holds
# no more groups than topics (max_topics' default, server/tables/topics.py)
MAX_GROUPS = 150_000
FILE_NAME = "subscriptionGroup.json"

# field -> RocketMQ JSON name (SubscriptionGroupConfig)
_JSON: dict[str, str] = {
    "group_name": "groupName",
    "consume_enable": "consumeEnable",
    "consume_from_min_enable": "consumeFromMinEnable",
    "consume_broadcast_enable": "consumeBroadcastEnable",
    "retry_queue_nums": "retryQueueNums",
    "retry_max_times": "retryMaxTimes",
    "broker_id": "brokerId",
    "which_broker_when_consume_slowly": "whichBrokerWhenConsumeSlowly",
    "notify_consumer_ids_changed_enable": "notifyConsumerIdsChangedEnable",
}
_INT_RANGES: dict[str, tuple[int, int]] = {
    "retry_queue_nums": (1, 1024),  # RocketMQ's 0 silently drops send-backs: refused here
    "retry_max_times": (0, (1 << 31) - 1),
    "broker_id": (0, (1 << 31) - 1),
    "which_broker_when_consume_slowly": (0, (1 << 31) - 1),
}


@dataclass(slots=True)
class SubscriptionGroupConfig:
    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True

    def to_json(self) -> dict[str, Any]:
        return {_JSON[f.name]: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(
        cls, data: Any, base: SubscriptionGroupConfig | None = None
    ) -> SubscriptionGroupConfig:
        """Decode RocketMQ's JSON (missing fields: ``base``'s, else the defaults); raises
        ``ValueError`` naming the bad field."""
        if not isinstance(data, dict):
            raise ValueError("subscription group config must be a JSON object")
        name = data.get("groupName")
        if not isinstance(name, str):
            raise ValueError("groupName is missing or not a string")
        bad = validate_group(name)
        if bad is not None:
            raise ValueError(bad)
        out = replace(base, group_name=name) if base is not None else cls(name)
        for f in fields(cls):
            if f.name == "group_name" or _JSON[f.name] not in data:
                continue
            value = data[_JSON[f.name]]
            if f.name in _INT_RANGES:
                if isinstance(value, str) and (parsed := parse_java_int(value)) is not None:
                    value = parsed
                lo, hi = _INT_RANGES[f.name]
                if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
                    raise ValueError(
                        f"{_JSON[f.name]} must be an integer in [{lo}, {hi}], got {value!r}"
                    )
            else:
                if isinstance(value, str) and value.lower() in ("true", "false"):
                    value = value.lower() == "true"
                if not isinstance(value, bool):
                    raise ValueError(f"{_JSON[f.name]} must be true or false, got {value!r}")
            setattr(out, f.name, value)
        return out


class SubscriptionGroupManager:
    def __init__(
        self, config_dir: Path, config: Any = None, *, max_groups: int = MAX_GROUPS, log: Any = None
    ) -> None:
        """``config``: the live ``BrokerConfig`` (read at each creation, so
        UPDATE_BROKER_CONFIG's changes apply): ``max_reconsume_times``, ``retry_queue_nums``,
        ``auto_create_subscription_group``; ``None``: RocketMQ's defaults, auto-create on."""
        self.path = config_dir / FILE_NAME
        self.config = config
        self.max_groups = max_groups
        self.log = log
        self.table: dict[str, SubscriptionGroupConfig] = {}
        self.counter = 0
        self.timestamp = int(time.time() * 1000)
        self.skipped_on_load: list[str] = []
        # each group's '"name":{...}' JSON row, kept with the table (a write joins them)
        self._rows: dict[str, bytes] = {}
        self.file = TableFile(self.path, self.json_parts, on_failed=self._persist_failed)

    # ------------------------------------------------------------ table

    @property
    def data_version(self) -> dict[str, int]:
        return {"counter": self.counter, "timestamp": self.timestamp}

    def _set(self, cfg: SubscriptionGroupConfig) -> SubscriptionGroupConfig:
        """Put ``cfg`` in the table with its JSON row (the only way entries change)."""
        self.table[cfg.group_name] = cfg
        self._rows[cfg.group_name] = (
            orjson.dumps(cfg.group_name) + b":" + orjson.dumps(cfg.to_json())
        )
        return cfg

    def _changed(self) -> None:
        self.counter += 1
        self.timestamp = int(time.time() * 1000)
        self.file.changed()

    @property
    def dirty(self) -> bool:
        return self.file.dirty

    def _persist_failed(self, err: OSError) -> None:
        if self.log is not None:
            self.log.error(
                "subgroup.persist_failed", path=str(self.path), error=f"{type(err).__name__}: {err}"
            )

    def full_remark(self, group: str) -> str:
        return (
            f"subscription group {group} not created: the broker holds "
            f"{len(self.table)} groups, the limit is {self.max_groups} "
            f"(max_subscription_groups)"
        )

    def check_room(self, groups: list[str]) -> None:
        """``ValueError`` naming the option unless the groups of ``groups`` that are not
        in the table yet fit under ``max_groups``."""
        new = [g for g in dict.fromkeys(groups) if g not in self.table]
        if new and len(self.table) + len(new) > self.max_groups:
            raise ValueError(self.full_remark(new[0]))

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        return self.table.get(group)

    @property
    def auto_create(self) -> bool:
        return True if self.config is None else bool(self.config.auto_create_subscription_group)

    @property
    def defaults(self) -> SubscriptionGroupConfig:
        cfg = self.config
        if cfg is None:
            return SubscriptionGroupConfig("")
        return SubscriptionGroupConfig(
            "", retry_queue_nums=cfg.retry_queue_nums, retry_max_times=cfg.max_reconsume_times
        )

    def new_config(self, group: str) -> SubscriptionGroupConfig:
        """A group with the broker's defaults (what auto-creation stores)."""
        return replace(self.defaults, group_name=group)

    def find(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's config, auto-created (and written in the background) when missing
        and ``auto_create`` is on; ``None`` otherwise or when the table is full."""
        cfg = self.table.get(group)
        if cfg is not None or not self.auto_create:
            return cfg
        if len(self.table) >= self.max_groups:
            return None
        cfg = self._set(self.new_config(group))
        self._changed()
        if self.log is not None:
            self.log.info("subgroup.created", group=group, auto=True)
        return cfg

    def update(self, cfg: SubscriptionGroupConfig) -> bool:
        """Create or replace ``cfg``; True if it is new. ``ValueError`` when full."""
        new = cfg.group_name not in self.table
        if new and len(self.table) >= self.max_groups:
            raise ValueError(self.full_remark(cfg.group_name))
        self._set(cfg)
        self._changed()
        if self.log is not None:
            event = "subgroup.created" if new else "subgroup.updated"
            self.log.info(event, group=cfg.group_name, auto=False)
        return new

    def delete(self, group: str) -> bool:
        if self.table.pop(group, None) is None:
            return False
        del self._rows[group]
        self._changed()
        if self.log is not None:
            self.log.info("subgroup.deleted", group=group)
        return True

    def replace_all(self, configs: list[SubscriptionGroupConfig]) -> int:
        """A slave's copy of its master's table (RocketMQ SlaveSynchronize: clear,
        putAll); the groups changed."""
        wanted = {c.group_name: c for c in configs[: self.max_groups]}
        changed = [g for g in self.table if g not in wanted]
        for group in changed:
            del self.table[group]
            del self._rows[group]
        for name, cfg in wanted.items():
            if self.table.get(name) != cfg:
                self._set(cfg)
                changed.append(name)
        if changed:
            self._changed()
        return len(changed)

    def missing(self, group: str) -> str | None:
        """None if ``group`` exists (auto-created first, as ``find``), else the remark of
        RocketMQ's SUBSCRIPTION_GROUP_NOT_EXIST saying why it was not created."""
        if self.find(group) is not None:
            return None
        why = (
            self.full_remark(group)
            if self.auto_create
            else "autoCreateSubscriptionGroup is off: create it with updateSubGroup"
        )
        return f"subscription group [{group}] does not exist: {why}"

    def pull_refusal(self, group: str, message_model: str | None) -> tuple[int, str] | None:
        """RocketMQ PullMessageProcessor's group checks: ``(code, remark)`` to refuse a pull
        of ``group`` (auto-creating it first), or None."""
        missing = self.missing(group)
        if missing is not None:
            return ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST, missing
        cfg = self.table[group]
        if not cfg.consume_enable:
            return ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}"
        if message_model == "BROADCASTING" and not cfg.consume_broadcast_enable:
            return (
                ResponseCode.NO_PERMISSION,
                f"the consumer group[{group}] can not consume by broadcast way",
            )
        return None

    def max_reconsume_times(self, group: str, default: int) -> int:
        """The group's retryMaxTimes (RocketMQ send-back's limit), else ``default``."""
        cfg = self.table.get(group)
        return default if cfg is None else cfg.retry_max_times

    # ------------------------------------------------------------ persistence

    def encode(self) -> dict[str, Any]:
        """The whole table as RocketMQ's SubscriptionGroupWrapper (small tables, tests)."""
        return {
            "subscriptionGroupTable": {g: c.to_json() for g, c in self.table.items()},
            "dataVersion": self.data_version,
        }

    def json_parts(self) -> Iterator[bytes]:
        """``encode()``'s JSON in parts (``table_file.join_parts``); the rows are copied
        now, on the loop (configs are replaced through ``_set``, never changed in
        place)."""
        tail = b'},"dataVersion":' + orjson.dumps(self.data_version) + b"}"
        return join_parts(b'{"subscriptionGroupTable":{', list(self._rows.values()), tail)

    def load(self, seed: Callable[[], list[str]] | None = None) -> None:
        """Read the table. With no file yet (a data directory from before subscription
        groups), the groups ``seed`` names (those with consumer offsets) are created with
        the defaults, so the dashboard keeps listing them."""
        data = read_json(self.path, None)
        if data is None and seed is not None:
            for group in seed():
                if validate_group(group) is None and len(self.table) < self.max_groups:
                    self._set(self.new_config(group))
            if self.table:
                self._changed()
                self.persist()
            return
        if not isinstance(data, dict):
            return
        table = data.get("subscriptionGroupTable")
        for name, raw in table.items() if isinstance(table, dict) else ():
            try:
                cfg = SubscriptionGroupConfig.from_json(raw, self.defaults)
            except ValueError:
                self.skipped_on_load.append(str(name))
                continue
            if cfg.group_name == name and len(self.table) < self.max_groups:
                self._set(cfg)
            else:
                self.skipped_on_load.append(str(name))
        version = data.get("dataVersion")
        if isinstance(version, dict) and isinstance(version.get("counter"), int):
            self.counter = version["counter"]
            ts = version.get("timestamp")
            self.timestamp = ts if isinstance(ts, int) else self.timestamp

    async def flushed(self) -> None:
        """Return once the file holds every change made before the call."""
        await self.file.flushed()

    def persist(self) -> None:
        """Synchronous write (start-up, stop, tests)."""
        self.file.write_now()
