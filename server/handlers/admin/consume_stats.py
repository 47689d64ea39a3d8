"""More of RocketMQ's admin requests for ``mqadmin``: GET_CONSUME_STATS (208,
``consumerProgress``), GET_BROKER_CONSUME_STATS (317, ``brokerConsumeStats``) and
QUERY_CONSUME_QUEUE (321, ``queryCq``). (Subscription groups, 201 included, are
groups.py's; INVOKE_BROKER_TO_RESET_OFFSET is callbacks.py's.)

Owns: ``ConsumerAdminProcessor`` (the consumer half of RocketMQ's AdminBrokerProcessor;
services: store reads, topic table, offset table, client registry, endpoints, the broker
name and the consume TPS), with RocketMQ's bodies (``ConsumeStats``, built once for both
stats requests by ``consume_stats``; ``ConsumeStatsList``; ``QueryConsumeQueueResponseBody``).

Invariants:
* Read-only.
* Offsets follow RocketMQ's AdminBrokerProcessor: a missing consumer offset reads 0; a topic a
  group has subscriptions but no subscription for is left out of its consume stats.
* Consume-queue units are shown as stored (physicOffset, physicSize, tagsCode); for a
  delayed message in ``SCHEDULE_TOPIC_XXXX`` the tagsCode is the due time, as in RocketMQ.
* ``consumeTps`` of each ConsumeStats is the group's GROUP_GET_NUMS rate on the topic over
  the last minute (``consume_tps``, server/observe/stats_items.py), as RocketMQ's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any  # Any: JSON values of ConsumeStats bodies

import orjson
from kairosmq.protocol.bodies import MessageQueueData, encode_mq_table
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import (
    GetConsumeStatsInBrokerHeader,
    GetConsumeStatsRequestHeader,
    QueryConsumeQueueRequestHeader,
)

from ...remoting import ingress

if TYPE_CHECKING:
    from ...endpoints import Endpoints
    from ...remoting.transport import Connection
    from ...store.message_store import MessageStore
    from ...tables.clients import ClientRegistry
    from ...tables.offsets import ConsumerOffsetManager
    from ...tables.topics import TopicConfigManager

MAX_CQ_UNITS = 1000  # units one QUERY_CONSUME_QUEUE answers at most


def consume_stats_entries(
    reads: MessageStore,
    topics: TopicConfigManager,
    offsets: ConsumerOffsetManager,
    clients: ClientRegistry,
    broker_name: str,
    group: str,
    topic: str | None,
) -> list[tuple[MessageQueueData, dict[str, Any]]]:
    """Per queue of each topic the group has offsets on (or ``topic``): the queue's max
    offset, the group's committed offset (0 when none) and the store time of the last
    consumed message (0 when none)."""
    info = clients.consumers.get(group)
    if topic:
        wanted = {topic}
    else:
        wanted = set(offsets.table.get(group, {}))
        if info is not None:
            wanted.update(info.subscriptions)
    entries = []
    for t in sorted(wanted):
        cfg = topics.get(t)
        if cfg is None:
            continue
        if info is not None and info.subscriptions and t not in info.subscriptions:
            continue
        for qid in range(cfg.read_queue_nums):
            hi = max(0, reads.max_offset(t, qid))
            committed = offsets.query(group, t, qid)
            off = committed if committed is not None and committed > 0 else 0
            ts = (reads.store_time_at(t, qid, off - 1) or 0) if off > 0 else 0
            entries.append(
                (
                    MessageQueueData(t, broker_name, qid),
                    {"brokerOffset": hi, "consumerOffset": off, "lastTimestamp": ts},
                )
            )
    return entries


class ConsumerAdminProcessor:
    """GET_CONSUME_STATS, GET_BROKER_CONSUME_STATS and QUERY_CONSUME_QUEUE."""

    def __init__(
        self,
        *,
        reads: MessageStore,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        clients: ClientRegistry,
        endpoints: Endpoints,
        broker_name: str,
        consume_tps: Callable[[str, str], float] | None = None,
    ) -> None:
        self.consume_tps = consume_tps  # MQADMIN: (group, topic) -> msgs/s (observe/stats_items.py)
        self.reads = reads
        self.topics = topics
        self.offsets = offsets
        self.clients = clients
        self.endpoints = endpoints
        self.broker_name = broker_name

    def consume_stats(
        self, group: str, topic: str | None, tps_topics: Iterable[str] | None = None
    ) -> tuple[bytes, int]:
        """RocketMQ's ``ConsumeStats`` of ``group`` on ``topic`` (None: every topic it has
        offsets on or subscribes to) and its diff (max offsets minus consumer offsets).
        ``consumeTps`` sums the group's rate on ``tps_topics`` (default: the topics of the
        queues shown)."""
        entries = consume_stats_entries(
            self.reads, self.topics, self.offsets, self.clients, self.broker_name, group, topic
        )
        if tps_topics is None:
            tps_topics = {mq.topic for mq, _ in entries}
        tps = (
            0.0 if self.consume_tps is None else sum(self.consume_tps(group, t) for t in tps_topics)
        )
        diff = sum(v["brokerOffset"] - v["consumerOffset"] for _, v in entries)
        return encode_mq_table("offsetTable", entries, {"consumeTps": tps}), diff

    def handle_consume_stats(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetConsumeStatsRequestHeader.from_ext_fields(cmd.ext_fields)
        ingress.check_group(h.consumer_group, "consumerGroup")
        if h.topic:
            ingress.check_known_topic(self.topics, h.topic)
        return cmd.response(body=self.consume_stats(h.consumer_group, h.topic)[0])

    def handle_broker_consume_stats(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        """Every group with offsets or online clients: one ConsumeStats per topic it has
        offsets on (``isOrder=true``: order topics only), and the broker's total diff."""
        only_order = GetConsumeStatsInBrokerHeader.from_ext_fields(cmd.ext_fields).is_order
        groups = sorted(set(self.offsets.table) | set(self.clients.consumers))
        total = 0
        per_group: list[bytes] = []
        for group in groups:
            stats: list[bytes] = []
            for topic in sorted(self.offsets.table.get(group, {})):
                cfg = self.topics.get(topic)
                if cfg is None or (only_order and not cfg.order):
                    continue
                body, diff = self.consume_stats(group, topic, tps_topics=(topic,))
                total += diff
                stats.append(body)
            per_group.append(b"{" + orjson.dumps(group) + b":[" + b",".join(stats) + b"]}")
        body = (
            b'{"brokerAddr":'
            + orjson.dumps(self.endpoints.address)
            + b',"consumeStatsList":['
            + b",".join(per_group)
            + b'],"totalDiff":'
            + str(total).encode()
            + b"}"
        )
        return cmd.response(body=body)

    def handle_query_consume_queue(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryConsumeQueueRequestHeader.from_ext_fields(cmd.ext_fields)
        ingress.check_queue(self.topics, h.topic, h.queue_id)
        ingress.check_offset(h.index, "index")
        cq = self.reads.find_queue(h.topic, h.queue_id)
        if cq is None:
            return cmd.error(ResponseCode.SYSTEM_ERROR, f"{h.queue_id}@{h.topic} is not exist!")
        body: dict[str, Any] = {"maxQueueIndex": cq.max_offset, "minQueueIndex": cq.min_offset}
        if h.consumer_group:
            ingress.check_group(h.consumer_group, "consumerGroup")
            sub = self.clients.subscription(h.consumer_group, h.topic)
            if sub is None:
                body["filterData"] = f"{h.consumer_group}@{h.topic} is not online!"
            else:
                body["subscriptionData"] = sub.to_dict()
        units = []
        for index in range(h.index, h.index + max(0, min(h.count, MAX_CQ_UNITS))):
            unit = cq.get(index)
            if unit is None:
                break
            units.append(
                {"physicOffset": unit[0], "physicSize": unit[1], "tagsCode": unit[2], "eval": False}
            )
        if not units and not cq.min_offset <= h.index < cq.max_offset:
            return cmd.response(remark=f"Index {h.index} of {h.queue_id}@{h.topic} is not exist!")
        body["queueData"] = units
        return cmd.response(body=orjson.dumps(body))
