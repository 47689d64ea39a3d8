"""Topic administration: UPDATE_AND_CREATE_TOPIC (17), DELETE_TOPIC_IN_BROKER (215) and
GET_ALL_TOPIC_CONFIG (21).

Owns: ``TopicAdminProcessor`` (services: topic table, offset table, log). System topics
cannot be created, changed or deleted by clients; names, queue counts and perm bits are
checked by ``ingress`` first. (Message lookup, VIEW_MESSAGE_BY_ID and QUERY_MESSAGE, is
``messages.py``'s.)

GET_ALL_TOPIC_CONFIG answers RocketMQ's TopicConfigSerializeWrapper (``topicName``,
``readQueueNums``, ... and a ``dataVersion``), what mqadmin and an Apache slave read.

Invariants: UPDATE_AND_CREATE_TOPIC and DELETE_TOPIC_IN_BROKER are answered only after
``topics.json`` holds the change (written off the event loop; ``handlers/__init__.py``),
so an acknowledged creation survives kill -9; a new topic past ``max_topics`` is refused
with SYSTEM_ERROR naming the option.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any  # Any: structlog's logger (dynamic methods)

import orjson
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import (
    CreateTopicRequestHeader,
    TopicRequestHeader,
)

from ...remoting import ingress
from ...tables.table_file import collect, encode_parts

if TYPE_CHECKING:
    from ...remoting.transport import Connection
    from ...tables.offsets import ConsumerOffsetManager
    from ...tables.topics import TopicConfigManager


class TopicAdminProcessor:
    """UPDATE_AND_CREATE_TOPIC, DELETE_TOPIC_IN_BROKER and GET_ALL_TOPIC_CONFIG."""

    def __init__(
        self, *, topics: TopicConfigManager, offsets: ConsumerOffsetManager, log: Any
    ) -> None:
        self.topics = topics
        self.offsets = offsets
        self.log = log
        self.started_ms = int(time.time() * 1000)  # dataVersion's timestamp

    def handle_create_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = CreateTopicRequestHeader.from_ext_fields(cmd.ext_fields)
        n = ingress.check_create_topic(h)
        self.topics.create(h.topic, n, perm=h.perm, order=h.order)  # TopicTableFull: refused
        self.log.info("topic.created", topic=h.topic, queue_nums=n, auto=False)
        return cmd.response()  # sent once topics.json holds it (handlers/__init__.py)

    def handle_delete_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = TopicRequestHeader.from_ext_fields(cmd.ext_fields)
        ingress.check_admin_topic(h.topic)
        if not self.topics.delete(h.topic):
            return cmd.error(ResponseCode.TOPIC_NOT_EXIST, f"topic {h.topic} does not exist")
        self.offsets.remove_topic(h.topic)
        self.log.info("topic.deleted", topic=h.topic)
        return cmd.response()

    async def handle_all_topic_config(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        """RocketMQ's TopicConfigSerializeWrapper: ``dataVersion`` (this broker's start and
        the table's version: an Apache slave's SlaveSynchronize copies the table when it
        moves) and ``topicConfigTable`` with RocketMQ's field names."""
        version = orjson.dumps({"counter": self.topics.version, "timestamp": self.started_ms})
        # encoded in parts between other requests (100k topics: ~10 MB of JSON)
        parts = encode_parts(
            b'{"dataVersion":' + version + b',"topicConfigTable":{',
            list(self.topics.topics.items()),
            b"}}",
            mapping=True,
            value=lambda cfg: cfg.to_data().to_dict(),
        )
        return cmd.response(body=await collect(parts))
