"""The client registry and queue locks (server/tables/clients.py): membership, notifications,
expiry, subscriptions, producers and lock leases, on an injected clock."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from kairosmq.protocol.bodies import ConsumerData, SubscriptionData
from kairosmq.protocol.codes import RequestCode
from kairosmq.server.tables import clients as clients_mod
from kairosmq.server.tables.clients import ClientRegistry, LockManager


class FakeConn:
    def __init__(self, conn_id: int) -> None:
        self.conn_id = conn_id
        self.peer = f"127.0.0.1:{40000 + conn_id}"
        self.notified: list[tuple[int, dict[str, str]]] = []

    def notify(self, code: int, ext_fields: dict[str, str]) -> None:
        self.notified.append((code, ext_fields))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(clients_mod, "time", SimpleNamespace(monotonic=c.monotonic))
    return c


def _consumer(group: str = "CG", version: int = 1, expr: str = "*") -> ConsumerData:
    return ConsumerData(group, [SubscriptionData.build("T", expr, version)])


NOTIFY = (RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, {"consumerGroup": "CG"})


def test_registry_membership_changes_notify_the_group(clock: Clock) -> None:
    reg = ClientRegistry(expire_seconds=120)
    a, b = FakeConn(1), FakeConn(2)
    assert reg.register_consumer(_consumer(), "cid-a", a) is True
    assert a.notified == [NOTIFY]
    assert reg.register_consumer(_consumer(), "cid-b", b) is True
    assert a.notified == [NOTIFY, NOTIFY] and b.notified == [NOTIFY]
    assert reg.consumer_ids("CG") == ["cid-a", "cid-b"]
    # a heartbeat from a known client on the same connection changes nothing
    assert reg.register_consumer(_consumer(), "cid-a", a) is False
    assert len(a.notified) == 2
    # the same client id on a new connection (a reconnect) is a change
    a2 = FakeConn(3)
    assert reg.register_consumer(_consumer(), "cid-a", a2) is True
    assert a2.notified == [NOTIFY] and len(b.notified) == 2
    reg.unregister("cid-b", None, "CG")
    assert reg.consumer_ids("CG") == ["cid-a"]
    assert len(a2.notified) == 2 and len(b.notified) == 2  # the leaver is not told
    reg.unregister("cid-zzz", None, "CG")  # unknown: no notification
    assert len(a2.notified) == 2
    reg.connection_closed(a2)
    assert reg.consumer_ids("CG") == []
    assert reg.consumer_ids("nope") == []


def test_registry_connection_closed_notifies_remaining(clock: Clock) -> None:
    reg = ClientRegistry()
    a, b = FakeConn(1), FakeConn(2)
    reg.register_consumer(_consumer(), "cid-a", a)
    reg.register_consumer(_consumer(), "cid-b", b)
    reg.register_producer("PG", "cid-b", b)
    reg.connection_closed(b)
    assert reg.consumer_ids("CG") == ["cid-a"]
    assert a.notified[-1] == NOTIFY and len(a.notified) == 3
    assert "PG" not in reg.producers  # an empty group is removed (bounded tables)


def test_registry_expiry(clock: Clock) -> None:
    reg = ClientRegistry(expire_seconds=120)
    a, b = FakeConn(1), FakeConn(2)
    reg.register_consumer(_consumer(), "cid-a", a)  # t = 1000
    reg.register_producer("PG", "cid-p", a)
    clock.now += 100
    reg.register_consumer(_consumer(), "cid-b", b)  # t = 1100
    clock.now += 20
    reg.expire()  # t = 1120: nobody is silent for more than 120 s yet
    assert reg.consumer_ids("CG") == ["cid-a", "cid-b"]
    assert list(reg.producers["PG"]) == ["cid-p"]
    n_a, n_b = len(a.notified), len(b.notified)
    clock.now += 10
    reg.expire()  # t = 1130: a and the producer were last seen 130 s ago
    assert reg.consumer_ids("CG") == ["cid-b"]
    assert "PG" not in reg.producers
    assert len(a.notified) == n_a  # the expired client is not told
    assert b.notified[n_b:] == [NOTIFY]
    clock.now += 70
    assert reg.register_consumer(_consumer(), "cid-b", b) is False  # t = 1200: a heartbeat
    clock.now += 100
    reg.expire()  # t = 1300: b was refreshed 100 s ago
    assert reg.consumer_ids("CG") == ["cid-b"]
    clock.now += 21
    reg.expire()
    assert reg.consumer_ids("CG") == []


def test_registry_subscriptions_latest_version_wins(clock: Clock) -> None:
    reg = ClientRegistry()
    conn = FakeConn(1)
    reg.register_consumer(_consumer(version=5, expr="A"), "cid", conn)
    reg.register_consumer(_consumer(version=3, expr="B"), "cid", conn)  # older: ignored
    assert reg.subscription("CG", "T").sub_string == "A"
    reg.register_consumer(_consumer(version=9, expr="C || D"), "cid", conn)
    sub = reg.subscription("CG", "T")
    assert (sub.sub_string, sub.tags_set) == ("C || D", ["C", "D"])
    assert reg.subscription("CG", "other") is None and reg.subscription("X", "T") is None
    info = reg.group_info("CG")
    assert info is not None and info.message_model == "CLUSTERING"


def test_registry_producers(clock: Clock) -> None:
    reg = ClientRegistry()
    conn = FakeConn(1)
    reg.register_producer("PG", "cid", conn)
    reg.register_producer("PG", "cid", conn)
    assert list(reg.producers["PG"]) == ["cid"]
    reg.unregister("cid", "PG", None)
    assert "PG" not in reg.producers and reg.registrations == 0
    assert conn.notified == []  # producers are never notified


def test_lock_manager(clock: Clock) -> None:
    locks = LockManager(lock_expire=60)
    q1, q2 = ("T", 0), ("T", 1)
    assert locks.try_lock("G", "a", [q1, q2]) == [q1, q2]
    assert locks.holder("G", "T", 0) == "a"
    assert locks.try_lock("G", "b", [q1]) == []  # held by a
    assert locks.try_lock("OTHER", "b", [q1]) == [q1]  # locks are per group
    clock.now += 50
    assert locks.try_lock("G", "a", [q1]) == [q1]  # renew q1 only
    clock.now += 20  # q2 last renewed 70 s ago: lapsed; q1 20 s ago: held
    assert locks.holder("G", "T", 1) is None
    assert locks.holder("G", "T", 0) == "a"
    assert locks.try_lock("G", "b", [q1, q2]) == [q2]
    assert locks.holder("G", "T", 1) == "b"
    locks.unlock("G", "b", [q1])  # not the holder: no effect
    assert locks.holder("G", "T", 0) == "a"
    locks.unlock("G", "a", [q1, q2])  # only its own lock is released
    assert locks.holder("G", "T", 0) is None
    assert locks.holder("G", "T", 1) == "b"
    assert locks.try_lock("G", "c", [q1]) == [q1]


def test_lock_expiry_boundary(clock: Clock) -> None:
    locks = LockManager(lock_expire=60)
    locks.try_lock("G", "a", [("T", 0)])
    clock.now += 60
    assert locks.holder("G", "T", 0) == "a"
    assert locks.try_lock("G", "b", [("T", 0)]) == []
    clock.now += 0.001
    assert locks.holder("G", "T", 0) is None
    assert locks.try_lock("G", "b", [("T", 0)]) == [("T", 0)]
