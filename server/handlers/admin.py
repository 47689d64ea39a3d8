"""Topic administration and message lookup: UPDATE_AND_CREATE_TOPIC (17),
DELETE_TOPIC_IN_BROKER (215), GET_ALL_TOPIC_CONFIG (21), VIEW_MESSAGE_BY_ID (33).

Owns: the broker side of those requests. System topics cannot be created, changed or
deleted by clients.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

import orjson
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import (
    CreateTopicRequestHeader,
    TopicRequestHeader,
    ViewMessageRequestHeader,
)

from ..topics import is_system_topic, validate_topic

if TYPE_CHECKING:
    from ..broker import Broker
    from ..transport import Connection


def handle_create_topic(broker: Broker, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    h = CreateTopicRequestHeader.from_ext_fields(cmd.ext_fields)
    bad = validate_topic(h.topic)
    if bad:
        return cmd.error(ResponseCode.SYSTEM_ERROR, bad)
    if is_system_topic(h.topic):
        return cmd.error(ResponseCode.NO_PERMISSION, f"{h.topic} is a system topic")
    n = max(h.read_queue_nums, h.write_queue_nums)
    if not 1 <= n <= 1024:
        return cmd.error(ResponseCode.SYSTEM_ERROR, "queue numbers must be within 1..1024")
    broker.topics.create(h.topic, n, perm=h.perm, order=h.order)
    broker.log.info("topic.created", topic=h.topic, queue_nums=n, auto=False)
    return cmd.response()


def handle_delete_topic(broker: Broker, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    h = TopicRequestHeader.from_ext_fields(cmd.ext_fields)
    if is_system_topic(h.topic):
        return cmd.error(ResponseCode.NO_PERMISSION, f"{h.topic} is a system topic")
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
    record = broker.store.read_at(h.offset)
    if record is None:
        return cmd.error(ResponseCode.SYSTEM_ERROR, f"no message at commit-log offset {h.offset}")
    return cmd.response(body=record)
