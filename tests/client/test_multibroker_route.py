"""Routes of several brokers (client/route.py): the queues of every broker, by permission
and master, in the order every member of a group sees; allocation over them."""

from __future__ import annotations

from kairosmq.client.consumer.rebalance import allocate_averagely
from kairosmq.client.message import MessageQueue
from kairosmq.client.route import TopicRouteInfo
from kairosmq.protocol.bodies import BrokerData, QueueData, TopicRouteData
from kairosmq.protocol.codes import PERM_READ, PERM_WRITE

RW = PERM_READ | PERM_WRITE


def route(*queues: QueueData, masters: dict[str, str]) -> TopicRouteData:
    return TopicRouteData(
        queue_datas=list(queues),
        broker_datas=[
            BrokerData(name, {0: addr} if addr else {1: "10.0.0.9:10911"}, "C")
            for name, addr in masters.items()
        ],
    )


def test_queues_of_every_broker_sorted_with_permissions_and_masters() -> None:
    r = route(
        QueueData("broker-b", 4, 4, RW, 0),
        QueueData("broker-a", 2, 3, RW, 0),
        QueueData("broker-r", 2, 2, PERM_READ, 0),
        QueueData("broker-s", 2, 2, RW, 0),
        masters={
            "broker-a": "10.0.0.1:10911",
            "broker-b": "10.0.0.2:10911",
            "broker-r": "10.0.0.3:10911",
            "broker-s": "",
        },
    )
    info = TopicRouteInfo.build("T", r)
    # write queues of writable brokers with a master; broker-s has only a slave
    assert info.publish_queues == [MessageQueue("T", "broker-a", i) for i in range(3)] + [
        MessageQueue("T", "broker-b", i) for i in range(4)
    ]
    # read queues of readable brokers (a slave can serve reads)
    assert [(q.broker_name, q.queue_id) for q in info.subscribe_queues] == [
        ("broker-a", 0),
        ("broker-a", 1),
        *[("broker-b", i) for i in range(4)],
        ("broker-r", 0),
        ("broker-r", 1),
        ("broker-s", 0),
        ("broker-s", 1),
    ]
    assert info.broker_addrs == {
        "broker-a": "10.0.0.1:10911",
        "broker-b": "10.0.0.2:10911",
        "broker-r": "10.0.0.3:10911",
    }


def test_two_members_split_two_brokers_queues_the_same_way() -> None:
    r = route(
        QueueData("broker-a", 4, 4, RW, 0),
        QueueData("broker-b", 4, 4, RW, 0),
        masters={"broker-a": "10.0.0.1:10911", "broker-b": "10.0.0.2:10911"},
    )
    mqs = TopicRouteInfo.build("T", r).subscribe_queues
    cids = ["10.0.0.5@2", "10.0.0.5@1"]
    one = allocate_averagely("10.0.0.5@1", list(reversed(mqs)), cids)
    two = allocate_averagely("10.0.0.5@2", mqs, cids)
    # AllocateMessageQueueAveragely over (topic, broker, queue) order: one broker each
    assert {q.broker_name for q in one} == {"broker-a"} and len(one) == 4
    assert {q.broker_name for q in two} == {"broker-b"} and len(two) == 4


def test_the_default_route_caps_queues_per_broker() -> None:
    r = route(
        QueueData("broker-a", 8, 8, RW, 0),
        QueueData("broker-b", 8, 8, RW, 0),
        masters={"broker-a": "10.0.0.1:10911", "broker-b": "10.0.0.2:10911"},
    )
    info = TopicRouteInfo.build("New", r, from_default=True)
    assert len(info.publish_queues) == 8  # min(4, 8) on each of the two brokers
    assert {q.broker_name for q in info.publish_queues} == {"broker-a", "broker-b"}
