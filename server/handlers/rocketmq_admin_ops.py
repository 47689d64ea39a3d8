"""More of RocketMQ's admin requests for ``mqadmin``: GET_BROKER_CONSUME_STATS (317,
``brokerConsumeStats``), QUERY_CONSUME_QUEUE (321, ``queryCq``) and the name server's
DELETE_TOPIC_IN_NAMESRV (216, second half of ``deleteTopic``) and
INVOKE_BROKER_TO_RESET_OFFSET (222, ``resetOffsetByTime``) and
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201, rocketmq-dashboard's consumer list).

Owns: those handlers, with RocketMQ's bodies (``ConsumeStatsList``,
``QueryConsumeQueueResponseBody``).

Invariants:
* Read-only. The embedded name server's routes are the broker's own topic table, so a
  topic deleted in the broker (DELETE_TOPIC_IN_BROKER, 215) has no route any more;
  DELETE_TOPIC_IN_NAMESRV therefore answers SUCCESS when the broker no longer has the
  topic and SYSTEM_ERROR, naming the broker request to send, while it still has it (the
  name server cannot drop a route the broker keeps).
* Consume-queue units are shown as stored (physicOffset, physicSize, tagsCode); for a
  delayed message in ``SCHEDULE_TOPIC_XXXX`` the tagsCode is the due time, as in RocketMQ.
* GET_ALL_SUBSCRIPTIONGROUP_CONFIG lists every group the broker knows (offsets, online
  clients, retry/DLQ topics) with the config RocketMQ auto-creates for such a group
  (``autoCreateSubscriptionGroup``), its retry settings being the broker's
  (``retryMaxTimes`` = max reconsume times): kairosmq has no subscription-group table yet,
  so nothing here is stored or settable.
* INVOKE_BROKER_TO_RESET_OFFSET answers like RocketMQ's ``Broker2Client.resetOffset`` for a group
  without online clients: SYSTEM_ERROR when the group has no offset on a queue of the
  topic, else CONSUMER_NOT_ONLINE, on which mqadmin resets through UPDATE_CONSUMER_OFFSET
  itself. Online clients would keep overwriting a reset made at the broker with their
  in-memory offsets, and the bundled client does not implement the
  RESET_CONSUMER_CLIENT_OFFSET callback yet: an online group is refused (SYSTEM_ERROR,
  saying to stop its consumers first) and nothing changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from kairosmq.protocol.bodies import encode_mq_table
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import (
    QueryConsumeQueueRequestHeader,
    ResetOffsetRequestHeader,
    TopicRequestHeader,
)
from kairosmq.protocol.naming import group_of_dlq_topic, group_of_retry_topic

from .. import ingress
from .rocketmq_admin import consume_stats_entries

if TYPE_CHECKING:
    from ..broker import Broker
    from ..transport import Connection

MAX_CQ_UNITS = 1000  # units one QUERY_CONSUME_QUEUE answers at most


def handle_broker_consume_stats(broker: Broker, conn: Connection,
                                cmd: RemotingCommand) -> RemotingCommand:
    """Every group with offsets or online clients: one ConsumeStats per topic it has
    offsets on (``isOrder=true``: order topics only), and the broker's total diff."""
    only_order = (cmd.ext_fields.get("isOrder") or "").lower() == "true"
    groups = sorted(set(broker.offsets.table) | set(broker.clients.consumers))
    total = 0
    per_group: list[bytes] = []
    for group in groups:
        stats: list[bytes] = []
        for topic in sorted(broker.offsets.table.get(group, {})):
            cfg = broker.topics.get(topic)
            if cfg is None or (only_order and not cfg.order):
                continue
            entries = consume_stats_entries(broker, group, topic)
            total += sum(v["brokerOffset"] - v["consumerOffset"] for _, v in entries)
            stats.append(encode_mq_table("offsetTable", entries, {"consumeTps": 0.0}))
        per_group.append(b"{" + orjson.dumps(group) + b":[" + b",".join(stats) + b"]}")
    body = (b'{"brokerAddr":' + orjson.dumps(broker.address) + b',"consumeStatsList":['
            + b",".join(per_group) + b'],"totalDiff":' + str(total).encode() + b"}")
    return cmd.response(body=body)


def handle_query_consume_queue(broker: Broker, conn: Connection,
                               cmd: RemotingCommand) -> RemotingCommand:
    h = QueryConsumeQueueRequestHeader.from_ext_fields(cmd.ext_fields)
    ingress.check_queue(broker, h.topic, h.queue_id)
    ingress.check_offset(h.index, "index")
    cq = broker.store.find_queue(h.topic, h.queue_id)
    if cq is None:
        return cmd.error(ResponseCode.SYSTEM_ERROR, f"{h.queue_id}@{h.topic} is not exist!")
    body: dict[str, Any] = {"maxQueueIndex": cq.max_offset, "minQueueIndex": cq.min_offset}
    if h.consumer_group:
        ingress.check_group(h.consumer_group, "consumerGroup")
        sub = broker.clients.subscription(h.consumer_group, h.topic)
        if sub is None:
            body["filterData"] = f"{h.consumer_group}@{h.topic} is not online!"
        else:
            body["subscriptionData"] = sub.to_dict()
    units = []
    for index in range(h.index, h.index + max(0, min(h.count, MAX_CQ_UNITS))):
        unit = cq.get(index)
        if unit is None:
            break
        units.append({"physicOffset": unit[0], "physicSize": unit[1], "tagsCode": unit[2],
                      "eval": False})
    if not units and not cq.min_offset <= h.index < cq.max_offset:
        return cmd.response(remark=f"Index {h.index} of {h.queue_id}@{h.topic} is not exist!")
    body["queueData"] = units
    return cmd.response(body=orjson.dumps(body))


def handle_delete_topic_in_namesrv(broker: Broker, conn: Connection,
                                   cmd: RemotingCommand) -> RemotingCommand:
    h = TopicRequestHeader.from_ext_fields(cmd.ext_fields)
    ingress.check_topic(h.topic)
    if broker.topics.get(h.topic) is not None:
        return cmd.error(ResponseCode.SYSTEM_ERROR,
                         f"topic {h.topic} still exists in broker {broker.config.broker_name}:"
                         " delete it there first (DELETE_TOPIC_IN_BROKER); the embedded name"
                         " server routes the broker's topics")
    return cmd.response()


def handle_reset_offset(broker: Broker, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    h = ResetOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
    ingress.check_group(h.group, "group")
    cfg = ingress.check_known_topic(broker, h.topic)
    if cfg is None:
        return cmd.error(ResponseCode.SYSTEM_ERROR, "[reset-offset] reset offset failed, no "
                         f"topic in this broker. topic={h.topic}")
    for qid in range(cfg.write_queue_nums):
        if broker.offsets.query(h.group, h.topic, qid) is None:
            return cmd.error(ResponseCode.SYSTEM_ERROR,
                             f"THe consumer group <{h.group}> not exist")
    info = broker.clients.consumers.get(h.group)
    if info is None or not info.clients:
        return cmd.error(ResponseCode.CONSUMER_NOT_ONLINE,
                         f"Consumer not online, so can not reset offset, Group: {h.group} "
                         f"Topic: {h.topic} Timestamp: {h.timestamp}")
    return cmd.error(ResponseCode.SYSTEM_ERROR,
                     f"consumer group {h.group} has {len(info.clients)} online client(s): "
                     "kairosmq cannot reset the offsets of an online group yet (clients do not "
                     "answer RESET_CONSUMER_CLIENT_OFFSET); stop its consumers and retry")


def known_groups(broker: Broker) -> list[str]:
    groups = set(broker.offsets.table) | set(broker.clients.consumers)
    for topic in broker.topics.topics:
        group = group_of_retry_topic(topic) or group_of_dlq_topic(topic)
        if group:
            groups.add(group)
    return sorted(groups)


def handle_all_subscription_groups(broker: Broker, conn: Connection,
                                   cmd: RemotingCommand) -> RemotingCommand:
    cfg = broker.config
    table = {g: {
        "groupName": g, "consumeEnable": True, "consumeFromMinEnable": True,
        "consumeBroadcastEnable": True, "retryQueueNums": cfg.retry_queue_nums,
        "retryMaxTimes": cfg.max_reconsume_times, "brokerId": 0,
        "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": True,
    } for g in known_groups(broker)}
    version = {"counter": len(table), "timestamp": broker.store.clock_ms()}
    return cmd.response(body=orjson.dumps({"subscriptionGroupTable": table,
                                           "dataVersion": version}))
