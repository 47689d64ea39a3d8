"""Topic administration and message lookup: UPDATE_AND_CREATE_TOPIC (17),
DELETE_TOPIC_IN_BROKER (215), GET_ALL_TOPIC_CONFIG (21), VIEW_MESSAGE_BY_ID (33).

Owns: the broker side of those requests. System topics cannot be created, changed or
deleted by clients; names, queue counts, perm bits and offsets are checked by
``ingress`` first. Invariant: UPDATE_AND_CREATE_TOPIC is answered only after
``topics.json`` holds the topic (written in a thread, off the event loop).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

import orjson
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import (
    CreateTopicRequestHeader,
    TopicRequestHeader,
    ViewMessageRequestHeader,
)

from .. import ingress

if TYPE_CHECKING:
    from ..broker import Broker
    from ..transport import Connection


def handle_create_topic(broker: Broker, conn: Connection, cmd: RemotingCommand) -> Any:
    h = CreateTopicRequestHeader.from_ext_fields(cmd.ext_fields)
    n = ingress.check_create_topic(h)
    broker.topics.create(h.topic, n, perm=h.perm, order=h.order, persist=False)
    broker.log.info("topic.created", topic=h.topic, queue_nums=n, auto=False)
    return _created(broker, cmd)


async def _created(broker: Broker, cmd: RemotingCommand) -> RemotingCommand:
    """Acknowledge only once topics.json holds the topic (written in a thread)."""
    await broker.topics.persist_async()
    return cmd.response()


def handle_delete_topic(broker: Broker, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    h = TopicRequestHeader.from_ext_fields(cmd.ext_fields)
    ingress.check_admin_topic(h.topic)
    if not broker.topics.delete(h.topic):
        return cmd.error(ResponseCode.TOPIC_NOT_EXIST, f"topic {h.topic} does not exist")
    broker.offsets.remove_topic(h.topic)
    broker.log.info("topic.deleted", topic=h.topic)
    return cmd.response()


def handle_all_topic_config(broker: Broker, conn: Connection,
                            cmd: RemotingCommand) -> RemotingCommand:
    table = {name: asdict(cfg) for name, cfg in broker.topics.topics.items()}
    return cmd.response(body=orjson.dumps({"topicConfigTable": table}))


def handle_view_message(broker: Broker, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    h = ViewMessageRequestHeader.from_ext_fields(cmd.ext_fields)
    ingress.check_offset(h.offset, "offset")
    record = broker.store.read_record(h.offset)  # checked: size cap, magic, CRC, record start
    if not isinstance(record, bytes):
        return cmd.error(ResponseCode.SYSTEM_ERROR,
                         f"no message at commit-log offset {h.offset}: {record.value}")
    return cmd.response(body=record)
