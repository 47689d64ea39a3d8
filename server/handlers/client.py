"""Client management requests: HEART_BEAT (34), UNREGISTER_CLIENT (35),
GET_CONSUMER_LIST_BY_GROUP (38), LOCK_BATCH_MQ (41), UNLOCK_BATCH_MQ (42),
CHECK_CLIENT_CONFIG (46).

Owns: ``ClientManageProcessor`` (services: the client registry, the lock manager, the
topic table, log and config values): turning those bodies into
``ClientRegistry``/``LockManager`` calls, and creating
``%RETRY%<group>`` for clustering consumer groups (as RocketMQ ClientManageProcessor does), so
the retry topic is routable before the first send-back.

Invariants: a malformed JSON body answers SYSTEM_ERROR with the parse error as remark;
every name (and count, when ``max_groups_per_heartbeat`` / ``max_subscriptions_per_heartbeat``
are set: RocketMQ has no such limit, nor by default kairosmq) is checked by ``ingress``
before anything is registered or created; a heartbeat of more than ``HEARTBEAT_SLICE``
groups and subscriptions is registered that many per loop turn (other connections are
answered meanwhile); the retry topics one heartbeat creates are persisted with one
``topics.json`` write before it is answered; lock requests lock only queues that exist.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kairosmq.protocol.bodies import (
    ConsumerData,
    HeartbeatData,
    LockBatchRequest,
    encode_consumer_list,
    encode_lock_response,
)
from kairosmq.protocol.codes import LanguageCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import ConsumerGroupRequestHeader, UnregisterClientRequestHeader
from kairosmq.protocol.naming import retry_topic

from .. import ingress, property_filter

if TYPE_CHECKING:
    from ..clients import ClientRegistry, LockManager
    from ..config import BrokerConfig
    from ..subscriptions import SubscriptionGroupManager
    from ..topics import TopicConfigManager
    from ..transport import Connection


HEARTBEAT_SLICE = 64  # groups plus subscriptions registered per loop turn


def heartbeat_parts(data: HeartbeatData) -> list[HeartbeatData]:
    """``data`` cut into parts of about ``HEARTBEAT_SLICE`` groups and subscriptions each
    (``[data]`` for an ordinary heartbeat)."""
    producers = data.producer_groups
    total = len(producers) + sum(1 + len(c.subscriptions) for c in data.consumers)
    if total <= HEARTBEAT_SLICE:
        return [data]
    parts = [HeartbeatData(data.client_id, producers[i:i + HEARTBEAT_SLICE], [])
             for i in range(0, len(producers), HEARTBEAT_SLICE)]
    consumers: list[ConsumerData] = []
    work = 0
    for consumer in data.consumers:
        consumers.append(consumer)
        work += 1 + len(consumer.subscriptions)
        if work >= HEARTBEAT_SLICE:
            parts.append(HeartbeatData(data.client_id, [], consumers))
            consumers, work = [], 0
    if consumers:
        parts.append(HeartbeatData(data.client_id, [], consumers))
    return parts


def _language(cmd: RemotingCommand) -> str:
    """The client's language as RocketMQ shows it (``LanguageCode`` name; MQADMIN)."""
    try:
        return LanguageCode(cmd.language).name
    except ValueError:
        return "OTHER"


class ClientManageProcessor:
    """HEART_BEAT, UNREGISTER_CLIENT, GET_CONSUMER_LIST_BY_GROUP, LOCK_BATCH_MQ,
    UNLOCK_BATCH_MQ and CHECK_CLIENT_CONFIG."""

    def __init__(self, *, clients: ClientRegistry, locks: LockManager,
                 topics: TopicConfigManager, config: BrokerConfig, log: Any,
                 subscriptions: SubscriptionGroupManager | None = None) -> None:
        self.subscriptions = subscriptions  # MQADMIN: auto-created on heartbeat, as RocketMQ
        self.clients = clients
        self.locks = locks
        self.topics = topics
        self.config = config
        self.log = log

    def handle_heartbeat(self, conn: Connection, cmd: RemotingCommand) -> Any:
        data = HeartbeatData.from_json(cmd.body)
        ingress.check_heartbeat(self.topics, self.config, data)
        parts = heartbeat_parts(data)
        if len(parts) == 1:
            if self._register(conn, cmd, data):  # one topics.json write, before the answer
                self.topics.persist()
            return cmd.response()
        return self._register_parts(conn, cmd, parts)

    async def _register_parts(self, conn: Connection, cmd: RemotingCommand,
                              parts: list[HeartbeatData]) -> RemotingCommand:
        """A big heartbeat (RocketMQ has no count limit: one client instance heartbeats
        for every group in its JVM) registered ``HEARTBEAT_SLICE`` groups per loop turn."""
        created = False
        try:
            for i, part in enumerate(parts):
                if i:
                    await asyncio.sleep(0)
                    if conn.closed:  # its registrations went with it: register no more
                        break
                created |= self._register(conn, cmd, part)
        finally:
            if created:  # one topics.json write (in a thread), before the answer
                await self.topics.persist_async()
        return cmd.response()

    def _register(self, conn: Connection, cmd: RemotingCommand, data: HeartbeatData) -> bool:
        """Register the groups of ``data``; True if retry topics were created."""
        config = self.config
        for group in data.producer_groups:
            self.clients.register_producer(group, data.client_id, conn, cmd.version,
                                           _language(cmd))
        created = False
        try:
            for consumer in data.consumers:
                self.clients.register_consumer(consumer, data.client_id, conn, cmd.version,
                                               _language(cmd))
                if self.subscriptions is not None:
                    self.subscriptions.find(consumer.group_name)
                for sub in consumer.subscriptions:  # SQL92: compile now, log a bad one
                    property_filter.try_compile(config.enable_property_filter, self.log,
                                                consumer.group_name, sub)
                if consumer.message_model == "CLUSTERING":
                    _, new = self.topics.ensure(retry_topic(consumer.group_name),
                                                config.retry_queue_nums, persist=False)
                    created |= new
        except Exception:
            if created:  # a limit stopped the heartbeat half way: keep what was created
                self.topics.persist()
            raise
        return created

    def handle_unregister(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = UnregisterClientRequestHeader.from_ext_fields(cmd.ext_fields)
        ingress.check_optional_group(h.producer_group, "producerGroup")
        ingress.check_optional_group(h.consumer_group, "consumerGroup")
        self.clients.unregister(h.client_id, h.producer_group, h.consumer_group)
        if h.consumer_group:  # a consumer that leaves frees its queues at once, not after 60 s
            self.locks.release_clients({h.client_id}, h.consumer_group)
        return cmd.response()

    def handle_consumer_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = ConsumerGroupRequestHeader.from_ext_fields(cmd.ext_fields)
        ingress.check_group(h.consumer_group, "consumerGroup")
        ids = self.clients.consumer_ids(h.consumer_group)
        if not ids:
            return cmd.error(ResponseCode.SYSTEM_ERROR,
                             f"no consumer in group {h.consumer_group}")
        return cmd.response(body=encode_consumer_list(ids))

    def handle_lock(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        req = LockBatchRequest.from_json(cmd.body)
        mqs = ingress.check_lock_batch(self.topics, req)
        wanted = [(mq.topic, mq.queue_id) for mq in mqs]
        held = set(self.locks.try_lock(req.consumer_group, req.client_id, wanted))
        locked = [mq for mq in mqs if (mq.topic, mq.queue_id) in held]
        return cmd.response(body=encode_lock_response(locked))

    def handle_unlock(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        req = LockBatchRequest.from_json(cmd.body)
        mqs = ingress.check_lock_batch(self.topics, req)
        self.locks.unlock(req.consumer_group, req.client_id,
                          [(mq.topic, mq.queue_id) for mq in mqs])
        return cmd.response()

    def handle_check_client_config(self, conn: Connection,
                                   cmd: RemotingCommand) -> RemotingCommand:
        # TAG passes; SQL92 must compile (SUBSCRIPTION_PARSE_FAILED with the position)
        property_filter.check_client_config(self.config.enable_property_filter, cmd.body)
        return cmd.response()
