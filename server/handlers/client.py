"""Client management requests: HEART_BEAT (34), UNREGISTER_CLIENT (35),
GET_CONSUMER_LIST_BY_GROUP (38), LOCK_BATCH_MQ (41), UNLOCK_BATCH_MQ (42),
CHECK_CLIENT_CONFIG (46).

Owns: turning those bodies into ``ClientRegistry``/``LockManager`` calls, and creating
``%RETRY%<group>`` for clustering consumer groups (as RocketMQ ClientManageProcessor does), so
the retry topic is routable before the first send-back.

Invariants: a malformed JSON body answers SYSTEM_ERROR with the parse error as remark;
every name and count is checked by ``ingress`` before anything is registered or created;
the retry topics one heartbeat creates (at most ``max_groups_per_heartbeat``) are
persisted with one ``topics.json`` write before the heartbeat is answered; lock
requests lock only queues that exist.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kairosmq.protocol.bodies import (
    HeartbeatData,
    LockBatchRequest,
    encode_consumer_list,
    encode_lock_response,
)
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import ConsumerGroupRequestHeader, UnregisterClientRequestHeader
from kairosmq.protocol.naming import retry_topic

from .. import ingress, property_filter

if TYPE_CHECKING:
    from ..broker import Broker
    from ..transport import Connection


def handle_heartbeat(broker: Broker, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    data = HeartbeatData.from_json(cmd.body)
    ingress.check_heartbeat(broker, data)
    for group in data.producer_groups:
        broker.clients.register_producer(group, data.client_id, conn)
    created = False
    try:
        for consumer in data.consumers:
            broker.clients.register_consumer(consumer, data.client_id, conn, cmd.version)
            for sub in consumer.subscriptions:  # SQL92: compile now, log a bad one
                property_filter.try_compile(broker, consumer.group_name, sub)
            if consumer.message_model == "CLUSTERING":
                _, new = broker.topics.ensure(retry_topic(consumer.group_name),
                                              broker.config.retry_queue_nums, persist=False)
                created |= new
    except Exception:
        if created:  # a limit stopped the heartbeat half way: keep what was created
            broker.topics.persist()
        raise
    if created:  # one topics.json write per heartbeat (not one per topic), before the answer
        broker.topics.persist()
    return cmd.response()


def handle_unregister(broker: Broker, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    h = UnregisterClientRequestHeader.from_ext_fields(cmd.ext_fields)
    ingress.check_optional_group(h.producer_group, "producerGroup")
    ingress.check_optional_group(h.consumer_group, "consumerGroup")
    broker.clients.unregister(h.client_id, h.producer_group, h.consumer_group)
    if h.consumer_group:  # a consumer that leaves frees its queues at once, not after 60 s
        broker.locks.release_clients({h.client_id}, h.consumer_group)
    return cmd.response()


def handle_consumer_list(broker: Broker, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    h = ConsumerGroupRequestHeader.from_ext_fields(cmd.ext_fields)
    ingress.check_group(h.consumer_group, "consumerGroup")
    ids = broker.clients.consumer_ids(h.consumer_group)
    if not ids:
        return cmd.error(ResponseCode.SYSTEM_ERROR, f"no consumer in group {h.consumer_group}")
    return cmd.response(body=encode_consumer_list(ids))


def handle_lock(broker: Broker, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    req = LockBatchRequest.from_json(cmd.body)
    mqs = ingress.check_lock_batch(broker, req)
    wanted = [(mq.topic, mq.queue_id) for mq in mqs]
    held = set(broker.locks.try_lock(req.consumer_group, req.client_id, wanted))
    locked = [mq for mq in mqs if (mq.topic, mq.queue_id) in held]
    return cmd.response(body=encode_lock_response(locked))


def handle_unlock(broker: Broker, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    req = LockBatchRequest.from_json(cmd.body)
    mqs = ingress.check_lock_batch(broker, req)
    broker.locks.unlock(req.consumer_group, req.client_id,
                        [(mq.topic, mq.queue_id) for mq in mqs])
    return cmd.response()


def handle_check_client_config(broker: Broker, conn: Connection,
                               cmd: RemotingCommand) -> RemotingCommand:
    # TAG passes; SQL92 must compile (SUBSCRIPTION_PARSE_FAILED with the position)
    property_filter.check_client_config(broker, cmd.body)
    return cmd.response()


