"""Client management requests: HEART_BEAT (34), UNREGISTER_CLIENT (35),
GET_CONSUMER_LIST_BY_GROUP (38), LOCK_BATCH_MQ (41), UNLOCK_BATCH_MQ (42),
CHECK_CLIENT_CONFIG (46).

Owns: ``ClientManageProcessor`` (services: the client registry, the lock manager, the
topic and subscription-group tables, log and config values): turning those bodies into
``ClientRegistry``/``LockManager`` calls, auto-creating each consumer group's subscription
group and ``%RETRY%<group>`` for clustering consumer groups whose subscription group
exists (as RocketMQ ClientManageProcessor does, with the group's retryQueueNums), so the
retry topic is routable before the first send-back.

Invariants: a malformed JSON body answers SYSTEM_ERROR with the parse error as remark;
every name (and count, when ``max_groups_per_heartbeat`` / ``max_subscriptions_per_heartbeat``
are set: RocketMQ has no such limit, nor by default kairosmq) is checked by ``ingress``
before anything is registered or created; a heartbeat whose new subscription groups or
retry topics would not fit under ``max_subscription_groups`` / ``max_topics`` is refused
whole with SYSTEM_ERROR naming the option, before anything is registered or created; a
heartbeat of more than ``HEARTBEAT_SLICE`` groups and subscriptions is registered that
many per loop turn (other connections are answered meanwhile); the retry topics one
heartbeat creates are in ``topics.json`` before it is answered (one background write for
all of them: ``handlers/__init__.py``'s ``after_topic_write``); lock requests lock only
queues that exist.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any  # Any: structlog's logger; handler answers (see Handler)

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

from .. import property_filter
from ..remoting import ingress

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from ..remoting.transport import Connection
    from ..tables.clients import ClientRegistry, LockManager
    from ..tables.subscriptions import SubscriptionGroupManager
    from ..tables.topics import TopicConfigManager


HEARTBEAT_SLICE = 64  # groups plus subscriptions registered per loop turn


def heartbeat_parts(data: HeartbeatData) -> list[HeartbeatData]:
    """``data`` cut into parts of about ``HEARTBEAT_SLICE`` groups and subscriptions each
    (``[data]`` for an ordinary heartbeat)."""
    producers = data.producer_groups
    total = len(producers) + sum(1 + len(c.subscriptions) for c in data.consumers)
    if total <= HEARTBEAT_SLICE:
        return [data]
    parts = [
        HeartbeatData(data.client_id, producers[i : i + HEARTBEAT_SLICE], [])
        for i in range(0, len(producers), HEARTBEAT_SLICE)
    ]
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

    def __init__(
        self,
        *,
        clients: ClientRegistry,
        locks: LockManager,
        topics: TopicConfigManager,
        config: BrokerConfig,
        log: Any,
        subscriptions: SubscriptionGroupManager | None = None,
    ) -> None:
        self.subscriptions = subscriptions  # MQADMIN: auto-created on heartbeat, as RocketMQ
        self.clients = clients
        self.locks = locks
        self.topics = topics
        self.config = config
        self.log = log

    def handle_heartbeat(self, conn: Connection, cmd: RemotingCommand) -> Any:
        data = HeartbeatData.from_json(cmd.body)
        ingress.check_heartbeat(self.topics, self.config, data)
        self._check_room(data)
        parts = heartbeat_parts(data)
        if len(parts) == 1:
            self._register(conn, cmd, data)
            return cmd.response()
        return self._register_parts(conn, cmd, parts)

    async def _register_parts(
        self, conn: Connection, cmd: RemotingCommand, parts: list[HeartbeatData]
    ) -> RemotingCommand:
        """A big heartbeat (RocketMQ has no count limit: one client instance heartbeats
        for every group in its JVM) registered ``HEARTBEAT_SLICE`` groups per loop turn."""
        for i, part in enumerate(parts):
            if i:
                await asyncio.sleep(0)
                if conn.closed:  # its registrations went with it: register no more
                    break
            self._register(conn, cmd, part)
        return cmd.response()

    def _register(self, conn: Connection, cmd: RemotingCommand, data: HeartbeatData) -> None:
        """Register the groups of ``data`` (and create their retry topics)."""
        config = self.config
        for group in data.producer_groups:
            self.clients.register_producer(group, data.client_id, conn, cmd.version, _language(cmd))
        for consumer in data.consumers:
            self.clients.register_consumer(
                consumer, data.client_id, conn, cmd.version, _language(cmd)
            )
            for sub in consumer.subscriptions:  # SQL92: compile now, log a bad one
                property_filter.try_compile(
                    config.enable_property_filter, self.log, consumer.group_name, sub
                )
            queue_nums = config.retry_queue_nums
            if self.subscriptions is not None:
                group_cfg = self.subscriptions.find(consumer.group_name)
                if group_cfg is None:  # autoCreateSubscriptionGroup off: RocketMQ creates
                    continue  # no retry topic for a group it does not know
                queue_nums = group_cfg.retry_queue_nums
            if consumer.message_model == "CLUSTERING":
                self.topics.ensure(retry_topic(consumer.group_name), queue_nums)

    def _check_room(self, data: HeartbeatData) -> None:
        """Refuse the heartbeat (nothing registered) if the subscription groups and retry
        topics it would create do not fit under the table limits."""
        subs = self.subscriptions
        if subs is not None and subs.auto_create:
            try:
                subs.check_room([c.group_name for c in data.consumers])
            except ValueError as err:
                raise ingress.Rejected(ResponseCode.SYSTEM_ERROR, str(err)) from None
        new = sorted(
            {
                retry_topic(c.group_name)
                for c in data.consumers
                if c.message_model == "CLUSTERING" and self._group_exists_after(c.group_name)
            }
            - self.topics.topics.keys()
        )
        if new:
            self.topics.check_room(new[0], len(new))

    def _group_exists_after(self, group: str) -> bool:
        """Whether the heartbeat's ``find`` will return a config for ``group``."""
        subs = self.subscriptions
        return subs is None or subs.auto_create or subs.get(group) is not None

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
            return cmd.error(ResponseCode.SYSTEM_ERROR, f"no consumer in group {h.consumer_group}")
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
        self.locks.unlock(
            req.consumer_group, req.client_id, [(mq.topic, mq.queue_id) for mq in mqs]
        )
        return cmd.response()

    def handle_check_client_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        # TAG passes; SQL92 must compile (SUBSCRIPTION_PARSE_FAILED with the position)
        property_filter.check_client_config(self.config.enable_property_filter, cmd.body)
        return cmd.response()
