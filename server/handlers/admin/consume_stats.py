"""More of RocketMQ's admin requests for ``mqadmin``: GET_BROKER_CONSUME_STATS (317,
``brokerConsumeStats``) and QUERY_CONSUME_QUEUE (321, ``queryCq``). (Subscription groups,
201 included, are groups.py's; INVOKE_BROKER_TO_RESET_OFFSET is callbacks.py's.)

Owns: ``ConsumerAdminProcessor`` (the consumer half of RocketMQ's AdminBrokerProcessor;
services: store reads, topic table, offset table, client registry, endpoints, config
values and the broker clock), with RocketMQ's bodies (``ConsumeStatsList``,
``QueryConsumeQueueResponseBody``).

Invariants:
* Read-only.
* Consume-queue units are shown as stored (physicOffset, physicSize, tagsCode); for a
  delayed message in ``SCHEDULE_TOPIC_XXXX`` the tagsCode is the due time, as in RocketMQ.
* ``consumeTps`` of each ConsumeStats is the group's GROUP_GET_NUMS rate on the topic over
  the last minute (``consume_tps``, server/observe/stats_items.py), as RocketMQ's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson
from kairosmq.protocol.bodies import encode_mq_table
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import GetConsumeStatsInBrokerHeader, QueryConsumeQueueRequestHeader

from ...remoting import ingress
from .broker import consume_stats_entries

if TYPE_CHECKING:
    from ...config import BrokerConfig
    from ...endpoints import Endpoints
    from ...remoting.transport import Connection
    from ...store.message_store import MessageStore
    from ...tables.clients import ClientRegistry
    from ...tables.offsets import ConsumerOffsetManager
    from ...tables.topics import TopicConfigManager

MAX_CQ_UNITS = 1000  # units one QUERY_CONSUME_QUEUE answers at most


class ConsumerAdminProcessor:
    """GET_BROKER_CONSUME_STATS and QUERY_CONSUME_QUEUE."""

    def __init__(self, *, reads: MessageStore, topics: TopicConfigManager,
                 offsets: ConsumerOffsetManager, clients: ClientRegistry,
                 endpoints: Endpoints, config: BrokerConfig,
                 clock_ms: Callable[[], int],
                 consume_tps: Callable[[str, str], float] | None = None) -> None:
        self.consume_tps = consume_tps  # MQADMIN: (group, topic) -> msgs/s (observe/stats_items.py)
        self.reads = reads
        self.topics = topics
        self.offsets = offsets
        self.clients = clients
        self.endpoints = endpoints
        self.config = config
        self.clock_ms = clock_ms

    def handle_broker_consume_stats(self, conn: Connection,
                                    cmd: RemotingCommand) -> RemotingCommand:
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
                entries = consume_stats_entries(self.reads, self.topics, self.offsets,
                                                self.clients, self.config.broker_name,
                                                group, topic)
                total += sum(v["brokerOffset"] - v["consumerOffset"] for _, v in entries)
                tps = self.consume_tps(group, topic) if self.consume_tps is not None else 0.0
                stats.append(encode_mq_table("offsetTable", entries, {"consumeTps": tps}))
            per_group.append(b"{" + orjson.dumps(group) + b":[" + b",".join(stats) + b"]}")
        body = (b'{"brokerAddr":' + orjson.dumps(self.endpoints.address)
                + b',"consumeStatsList":[' + b",".join(per_group) + b'],"totalDiff":'
                + str(total).encode() + b"}")
        return cmd.response(body=body)

    def handle_query_consume_queue(self, conn: Connection,
                                   cmd: RemotingCommand) -> RemotingCommand:
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
            units.append({"physicOffset": unit[0], "physicSize": unit[1],
                          "tagsCode": unit[2], "eval": False})
        if not units and not cq.min_offset <= h.index < cq.max_offset:
            return cmd.response(
                remark=f"Index {h.index} of {h.queue_id}@{h.topic} is not exist!")
        body["queueData"] = units
        return cmd.response(body=orjson.dumps(body))
