"""Subscription groups, broker settings and stats items as services and processors, built
with the real services (no broker): server/tables/subscriptions.py, server/tables/settings.py,
server/observe/stats_items.py, server/handlers/admin/groups.py, broker_config.py, stats.py.
"""

from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import Any

import orjson
import pytest
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand, request
from kairosmq.server.config import BrokerConfig
from kairosmq.server.handlers.admin.broker_config import BrokerConfigProcessor
from kairosmq.server.handlers.admin.groups import SubscriptionGroupProcessor
from kairosmq.server.handlers.admin.stats import BrokerStatsProcessor
from kairosmq.server.observe.stats import BrokerStats
from kairosmq.server.observe.stats_items import BrokerStatsManager, counter_sources
from kairosmq.server.remoting.ingress import guarded
from kairosmq.server.remoting.transport import Connection, RemotingServer
from kairosmq.server.tables.offsets import ConsumerOffsetManager
from kairosmq.server.tables.settings import SETTABLE, BrokerSettings, disk_used_percent
from kairosmq.server.tables.subscriptions import SubscriptionGroupConfig, SubscriptionGroupManager


class _Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def info(self, event: str, **kw: Any) -> None:
        self.events.append((event, kw))

    warning = error = info


def _conn() -> Connection:
    """A real, unconnected Connection (compiled handlers check the type of what they get)."""
    server = RemotingServer(
        log=_Log(), before_write=lambda: None, on_connection_lost=lambda _c: None, max_frame=1 << 20
    )
    conn = Connection(server, {}, "broker")
    conn.peer = "127.0.0.1:1"
    return conn


async def _answer(handler: Any, cmd: RemotingCommand, log: Any = None) -> RemotingCommand:
    """Call a processor's handler as the tables do (``ingress.guarded``)."""
    result = guarded(handler, BrokerStats(), log or _Log())(_conn(), cmd)
    return await result if inspect.isawaitable(result) else result


def _manager(tmp_path: Path, **cfg: Any) -> SubscriptionGroupManager:
    return SubscriptionGroupManager(tmp_path, BrokerConfig(data_dir=tmp_path, **cfg), log=_Log())


def test_find_auto_creates_with_the_broker_defaults_and_persists(tmp_path: Path) -> None:
    mgr = _manager(tmp_path, max_reconsume_times=5, retry_queue_nums=2)
    assert mgr.get("CG1") is None
    cfg = mgr.find("CG1")
    assert cfg is not None and (cfg.retry_max_times, cfg.retry_queue_nums) == (5, 2)
    assert cfg.consume_enable and mgr.counter == 1
    mgr.persist()
    again = SubscriptionGroupManager(tmp_path, BrokerConfig(data_dir=tmp_path))
    again.load()
    assert again.get("CG1") == cfg and again.counter == 1
    raw = orjson.loads((tmp_path / "subscriptionGroup.json").read_bytes())
    assert raw["subscriptionGroupTable"]["CG1"]["retryMaxTimes"] == 5  # RocketMQ's names


def test_auto_create_off_finds_nothing(tmp_path: Path) -> None:
    mgr = _manager(tmp_path, auto_create_subscription_group=False)
    assert mgr.find("CG1") is None and mgr.table == {}


def test_config_json_is_checked_field_by_field() -> None:
    ok = SubscriptionGroupConfig.from_json(
        {"groupName": "G", "consumeEnable": "false", "retryMaxTimes": "3"}
    )
    assert not ok.consume_enable and ok.retry_max_times == 3 and ok.consume_broadcast_enable
    for bad, name in (
        ({"groupName": "G", "retryMaxTimes": "x"}, "retryMaxTimes"),
        ({"groupName": "G", "consumeEnable": 2}, "consumeEnable"),
        ({"groupName": "G", "retryQueueNums": -1}, "retryQueueNums"),
        ({"groupName": "bad group!"}, "group"),
        ({"consumeEnable": True}, "groupName"),
    ):
        with pytest.raises(ValueError, match=name):
            SubscriptionGroupConfig.from_json(bad)


def test_load_skips_bad_entries_and_keeps_the_rest(tmp_path: Path) -> None:
    (tmp_path / "subscriptionGroup.json").write_bytes(
        orjson.dumps(
            {
                "subscriptionGroupTable": {
                    "Good": {"groupName": "Good", "retryMaxTimes": 2},
                    "Bad": {"groupName": "Bad", "retryMaxTimes": "many"},
                    "Other": {"groupName": "NotOther"},
                },
                "dataVersion": {"counter": 7, "timestamp": 1},
            }
        )
    )
    mgr = _manager(tmp_path)
    mgr.load()
    assert list(mgr.table) == ["Good"] and mgr.table["Good"].retry_max_times == 2
    assert sorted(mgr.skipped_on_load) == ["Bad", "Other"] and mgr.counter == 7


def test_table_is_bounded(tmp_path: Path) -> None:
    mgr = SubscriptionGroupManager(tmp_path, None, max_groups=2)
    assert mgr.find("A") and mgr.find("B")
    assert mgr.find("C") is None
    with pytest.raises(ValueError, match=r"limit is 2 \(max_subscription_groups\)"):
        mgr.update(SubscriptionGroupConfig("C"))
    assert sorted(mgr.table) == ["A", "B"]


async def test_processor_update_delete_and_list(tmp_path: Path) -> None:
    mgr = _manager(tmp_path)
    offsets = ConsumerOffsetManager(tmp_path)
    offsets.commit("CG1", "T", 0, 5)
    proc = SubscriptionGroupProcessor(subscriptions=mgr, offsets=offsets, log=_Log())
    body = orjson.dumps(
        {
            "groupName": "CG1",
            "consumeEnable": False,
            "retryMaxTimes": 3,
            "brokerId": 0,
            "whichBrokerWhenConsumeSlowly": 1,
        }
    )
    r = await _answer(
        proc.handle_update_subscription_group,
        request(R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body),
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    on_disk = orjson.loads((tmp_path / "subscriptionGroup.json").read_bytes())
    assert on_disk["subscriptionGroupTable"]["CG1"]["consumeEnable"] is False
    r = await _answer(
        proc.handle_all_subscription_groups, request(R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    )
    listed = orjson.loads(r.body)
    assert listed["subscriptionGroupTable"]["CG1"]["retryMaxTimes"] == 3
    assert listed["dataVersion"]["counter"] == 1
    # a bad body changes nothing
    r = await _answer(
        proc.handle_update_subscription_group,
        request(
            R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=b'{"groupName":"CG1","retryMaxTimes":"x"}'
        ),
    )
    assert r.code == ResponseCode.SYSTEM_ERROR and "retryMaxTimes" in (r.remark or "")
    assert mgr.get("CG1").retry_max_times == 3
    r = await _answer(
        proc.handle_update_subscription_group,
        request(R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=b"not json"),
    )
    assert r.code == ResponseCode.SYSTEM_ERROR
    # delete with removeOffset drops the group's offsets too
    r = await _answer(
        proc.handle_delete_subscription_group,
        request(R.DELETE_SUBSCRIPTIONGROUP, {"groupName": "CG1", "removeOffset": "true"}),
    )
    assert r.code == ResponseCode.SUCCESS and mgr.get("CG1") is None
    assert offsets.query("CG1", "T", 0) is None
    on_disk = orjson.loads((tmp_path / "subscriptionGroup.json").read_bytes())
    assert on_disk["subscriptionGroupTable"] == {}
    r = await _answer(
        proc.handle_delete_subscription_group,
        request(R.DELETE_SUBSCRIPTIONGROUP, {"groupName": "Unknown"}),
    )
    assert r.code == ResponseCode.SUCCESS  # as RocketMQ


async def test_broker_settings_apply_all_or_nothing_and_persist(tmp_path: Path) -> None:
    cfg = BrokerConfig(data_dir=tmp_path)
    settings = BrokerSettings(cfg, tmp_path)
    seen: list[tuple[str, Any]] = []
    settings.on_change.append(lambda f, v: seen.append((f, v)))
    proc = BrokerConfigProcessor(
        settings=settings, log=_Log(), known=lambda: {"brokerName", "listenPort"}
    )

    log = _Log()

    async def update(text: str) -> RemotingCommand:
        return await _answer(
            proc.handle_update_broker_config,
            request(R.UPDATE_BROKER_CONFIG, body=text.encode()),
            log,
        )

    # a watermark above the disk's use now (at or below it is refused: every send would be)
    pct = max(80, math.floor(disk_used_percent(tmp_path)) + 2)
    if pct > 95:
        pytest.skip(f"the data disk is {pct - 2}% used: no settable watermark lies above it")
    r = await update(f"autoCreateTopicEnable=false\ndiskMaxUsedSpaceRatio={pct}\n")
    assert r.code == ResponseCode.SUCCESS, r.remark
    assert cfg.auto_create_topic is False and cfg.disk_max_used_ratio == pct / 100
    assert ("disk_max_used_ratio", pct / 100) in seen
    r = await update("listenPort=1\nlongPollingEnable=false")  # fixed at start
    assert r.code == ResponseCode.NO_PERMISSION and "listenPort" in (r.remark or "")
    r = await update("longPollingEnable=false\nfileReservedTime=abc")
    assert r.code == ResponseCode.SYSTEM_ERROR and "fileReservedTime" in (r.remark or "")
    r = await update("noSuchSetting=1")
    assert r.code == ResponseCode.SYSTEM_ERROR and "noSuchSetting" in (r.remark or "")
    assert cfg.long_polling is True  # nothing of a refused request applied
    assert [e for e, _ in log.events].count("request.rejected") == 3  # counted and logged
    text = (tmp_path / "broker.properties").read_text()
    assert text == f"autoCreateTopicEnable=false\ndiskMaxUsedSpaceRatio={pct}\n"
    fresh = BrokerConfig(data_dir=tmp_path)
    assert BrokerSettings(fresh, tmp_path).load() == []
    assert fresh.auto_create_topic is False and fresh.disk_max_used_ratio == pct / 100
    assert all(hasattr(fresh, s.field) for s in SETTABLE.values())


def test_stats_items_windows() -> None:
    stats = BrokerStats()
    now = [1000.0]
    mgr = BrokerStatsManager(
        counter_sources(stats, "DefaultCluster"), boot=1000.0, clock=lambda: now[0]
    )
    assert mgr.snapshot("TOPIC_PUT_NUMS", "T") is None  # never put to: not exist
    stats.stored["T"] += 30
    now[0] += 30  # 30 s after boot: every window counts from boot
    snap = mgr.snapshot("TOPIC_PUT_NUMS", "T")
    assert snap == {
        w: {"avgpt": 0.0, "sum": 30, "tps": 1.0} for w in ("statsMinute", "statsHour", "statsDay")
    }
    for _ in range(12):  # two more minutes at 2 msg/s, sampled every 10 s
        now[0] += 10
        stats.stored["T"] += 20
        mgr.sample()
    snap = mgr.snapshot("TOPIC_PUT_NUMS", "T")
    assert snap["statsMinute"] == {"avgpt": 0.0, "sum": 120, "tps": 2.0}
    assert snap["statsHour"]["sum"] == 270 and snap["statsDay"]["sum"] == 270
    stats.group_pulled[("T", "CG")] += 6
    assert mgr.snapshot("GROUP_GET_NUMS", "T@CG")["statsMinute"]["sum"] == 6


async def test_view_broker_stats_processor() -> None:
    stats = BrokerStats()
    stats.stored["T"] += 4
    proc = BrokerStatsProcessor(
        stats_manager=BrokerStatsManager(counter_sources(stats, "DefaultCluster"))
    )
    r = proc.handle_view_broker_stats(
        _conn(), request(R.VIEW_BROKER_STATS_DATA, {"statsName": "TOPIC_PUT_NUMS", "statsKey": "T"})
    )
    assert r.code == ResponseCode.SUCCESS
    assert orjson.loads(r.body)["statsDay"]["sum"] == 4
    r = proc.handle_view_broker_stats(
        _conn(),
        request(R.VIEW_BROKER_STATS_DATA, {"statsName": "TOPIC_PUT_NUMS", "statsKey": "Nope"}),
    )
    assert r.code == ResponseCode.SYSTEM_ERROR
    assert r.remark == "The stats <TOPIC_PUT_NUMS> <Nope> not exist"


async def test_auto_creations_of_one_turn_are_written_once(tmp_path: Path) -> None:
    mgr = _manager(tmp_path)
    for i in range(50):  # one heartbeat naming 50 new groups
        mgr.find(f"G{i}")
    await mgr.flushed()
    assert mgr.file.writes == 1
    again = _manager(tmp_path)
    again.load()
    assert len(again.table) == 50


def test_a_data_directory_without_the_file_is_seeded_from_offsets(tmp_path: Path) -> None:
    mgr = _manager(tmp_path, max_reconsume_times=7)
    mgr.load(seed=lambda: ["OldCG", "bad group!"])
    assert list(mgr.table) == ["OldCG"] and mgr.table["OldCG"].retry_max_times == 7
    assert (tmp_path / "subscriptionGroup.json").exists()
    again = _manager(tmp_path)
    again.load(seed=lambda: ["Other"])  # the file exists now: no seeding
    assert list(again.table) == ["OldCG"]


def test_stats_items_hour_and_day_windows_stay_bounded() -> None:
    stats = BrokerStats()
    now = [0.0]
    mgr = BrokerStatsManager(counter_sources(stats, "C"), boot=0.0, clock=lambda: now[0])
    for _ in range(2 * 8640):  # two days, 1 msg/s, sampled every 10 s
        now[0] += 10
        stats.stored["T"] += 10
        mgr.sample()
    snap = mgr.snapshot("TOPIC_PUT_NUMS", "T")
    assert snap["statsMinute"] == {"avgpt": 0.0, "sum": 60, "tps": 1.0}
    # like RocketMQ's lists, a window reaches back to its first sample at least that old:
    # the sum covers the window plus up to one spacing (10 min, 1 h); the rate is exact
    assert 3600 <= snap["statsHour"]["sum"] < 3600 + 600 and snap["statsHour"]["tps"] == 1.0
    assert 86400 <= snap["statsDay"]["sum"] < 86400 + 3600 and snap["statsDay"]["tps"] == 1.0
    assert sum(len(q) for q in mgr._samples[("TOPIC_PUT_NUMS", "T")].values()) <= 39
    assert mgr.snapshot("BROKER_PUT_NUMS", "C")["statsDay"]["tps"] == 1.0
