"""``RouteInfoManager`` on its own (no I/O; time passed in): RocketMQ 4.9's table rules."""

from __future__ import annotations

from typing import Any

from kairosmq.protocol.registration import DataVersion, TopicConfigData, TopicConfigSerializeWrapper
from kairosmq.server.namesrv.routes import RouteInfoManager

V1 = DataVersion(1, 1)


def _wrapper(*topics: str, version: DataVersion = V1) -> TopicConfigSerializeWrapper:
    return TopicConfigSerializeWrapper({t: TopicConfigData(t, 4, 4) for t in topics}, version)


def _register(
    rim: RouteInfoManager,
    name: str,
    addr: str,
    *topics: str,
    now: float = 0,
    broker_id: int = 0,
    cluster: str = "C",
    conn: Any = None,
    version: DataVersion = V1,
) -> Any:
    return rim.register_broker(
        cluster_name=cluster,
        broker_addr=addr,
        broker_name=name,
        broker_id=broker_id,
        ha_server_addr=addr + "0",
        wrapper=_wrapper(*topics, version=version),
        filter_servers=[],
        conn=conn,
        now_ms=now,
    )


def test_expiry_uses_the_last_register_time() -> None:
    rim = RouteInfoManager(broker_expiry_ms=120_000)
    _register(rim, "b1", "h:1", "A", now=0)
    _register(rim, "b2", "h:2", "A", now=0)
    _register(rim, "b2", "h:2", "A", now=100_000)  # b2 keeps registering
    assert rim.scan_not_active_broker(120_000) == []  # exactly 120 s: not yet (strict >)
    removed = rim.scan_not_active_broker(120_001)
    assert [(r.broker_addr, r.broker_name) for r in removed] == [("h:1", "b1")]
    route = rim.pickup_topic_route("A")
    assert route is not None and [q.broker_name for q in route[0]] == ["b2"]
    assert rim.cluster_addr_table == {"C": {"b2"}}
    assert [r.broker_name for r in rim.scan_not_active_broker(220_001)] == ["b2"]
    assert rim.pickup_topic_route("A") is None and rim.topic_queue_table == {}
    assert rim.cluster_addr_table == {} and rim.broker_addr_table == {}


def test_master_slave_and_id_switch() -> None:
    rim = RouteInfoManager()
    first = _register(rim, "b1", "h:1", "A")
    assert first.first and first.topics_changed
    slave = _register(rim, "b1", "h:2", "A", broker_id=1)
    assert slave.result.master_addr == "h:1" and slave.result.ha_server_addr == "h:10"
    assert not slave.topics_changed  # only a master writes queue data
    # the slave becomes master 0 on the same address: its id-1 record goes
    _register(rim, "b1", "h:2", "A", broker_id=0, version=DataVersion(2, 2))
    assert rim.broker_addr_table["b1"].broker_addrs == {0: "h:2"}
    again = _register(rim, "b1", "h:2", "A", broker_id=0, version=DataVersion(2, 2))
    assert not again.first and not again.topics_changed


def test_connection_loss_finds_the_broker_by_its_connection() -> None:
    rim = RouteInfoManager()
    c1, c2 = object(), object()
    _register(rim, "b1", "h:1", "A", conn=c1)
    _register(rim, "b2", "h:2", "A", "B", conn=c2)
    assert rim.on_connection_lost(object()) is None
    gone = rim.on_connection_lost(c2)
    assert gone is not None and (gone.broker_addr, gone.broker_name) == ("h:2", "b2")
    assert "B" not in rim.topic_queue_table and set(rim.topic_queue_table["A"]) == {"b1"}


def test_delete_topic_and_topics_by_cluster() -> None:
    rim = RouteInfoManager()
    _register(rim, "b1", "h:1", "A", "B", cluster="C1")
    _register(rim, "b2", "h:2", "A", cluster="C2")
    assert rim.topics_by_cluster("C1") == ["A", "B"] and rim.topics_by_cluster("C2") == ["A"]
    assert rim.delete_topic("A", "C2") == 1
    assert set(rim.topic_queue_table["A"]) == {"b1"}
    assert rim.delete_topic("A") == 1 and rim.delete_topic("A") == 0
    assert rim.all_topics() == ["B"]
    assert rim.change_write_perm("b1", wipe=True) == 1
    assert rim.topic_queue_table["B"]["b1"].perm == 4
    assert rim.change_write_perm("nobody", wipe=True) == 0


def test_register_without_body_keeps_topics() -> None:
    rim = RouteInfoManager()
    _register(rim, "b1", "h:1", "A")
    done = rim.register_broker(
        cluster_name="C",
        broker_addr="h:1",
        broker_name="b1",
        broker_id=0,
        ha_server_addr="",
        wrapper=None,
        filter_servers=None,
        conn=None,
        now_ms=5,
    )
    assert not done.topics_changed and rim.all_topics() == ["A"]
    assert rim.query_broker_topic_config("h:1") == DataVersion(0, 0)
