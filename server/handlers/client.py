"""Client management requests: HEART_BEAT (34), UNREGISTER_CLIENT (35),
GET_CONSUMER_LIST_BY_GROUP (38), LOCK_BATCH_MQ (41), UNLOCK_BATCH_MQ (42),
CHECK_CLIENT_CONFIG (46).

Owns: turning those bodies into ``ClientRegistry``/``LockManager`` calls, and creating
``%RETRY%<group>`` for clustering consumer groups (as J4 ClientManageProcessor does), so
the retry topic is routable before the first send-back.

Invariant: a malformed JSON body answers SYSTEM_ERROR with the parse error as remark.
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

from ..topics import retry_topic

if TYPE_CHECKING:
    from ..broker import Broker
    from ..transport import Connection


def handle_heartbeat(broker: Broker, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    data = HeartbeatData.from_json(cmd.body)
    for group in data.producer_groups:
        broker.clients.register_producer(group, data.client_id, conn)
    for consumer in data.consumers:
        if consumer.message_model == "CLUSTERING":
            broker.topics.ensure(retry_topic(consumer.group_name), broker.config.retry_queue_nums)
        broker.clients.register_consumer(consumer, data.client_id, conn, cmd.version)
    return cmd.response()


def handle_unregister(broker: Broker, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    h = UnregisterClientRequestHeader.from_ext_fields(cmd.ext_fields)
    broker.clients.unregister(h.client_id, h.producer_group, h.consumer_group)
    return cmd.response()


def handle_consumer_list(broker: Broker, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    h = ConsumerGroupRequestHeader.from_ext_fields(cmd.ext_fields)
    ids = broker.clients.consumer_ids(h.consumer_group)
    if not ids:
        return cmd.error(ResponseCode.SYSTEM_ERROR, f"no consumer in group {h.consumer_group}")
    return cmd.response(body=encode_consumer_list(ids))


def handle_lock(broker: Broker, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    req = LockBatchRequest.from_json(cmd.body)
    wanted = [(mq.topic, mq.queue_id) for mq in req.mq_set]
    held = set(broker.locks.try_lock(req.consumer_group, req.client_id, wanted))
    locked = [mq for mq in req.mq_set if (mq.topic, mq.queue_id) in held]
    return cmd.response(body=encode_lock_response(locked))


def handle_unlock(broker: Broker, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    req = LockBatchRequest.from_json(cmd.body)
    broker.locks.unlock(req.consumer_group, req.client_id,
                        [(mq.topic, mq.queue_id) for mq in req.mq_set])
    return cmd.response()


def handle_check_client_config(broker: Broker, conn: Connection,
                               cmd: RemotingCommand) -> RemotingCommand:
    return cmd.error(ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                     "only TAG subscriptions are supported (no SQL92 filtering)")


