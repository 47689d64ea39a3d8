"""Admin requests the broker answers by calling its consumers (RocketMQ ``Broker2Client``):
GET_CONSUMER_RUNNING_INFO (307, ``mqadmin consumerStatus``) and
INVOKE_BROKER_TO_RESET_OFFSET (222, ``mqadmin resetOffsetByTime``).

Owns: ``ConsumerCallbackProcessor`` (services: client registry, topic table, offset table,
store reads, the broker name, the log).

Invariants:
* 307 is relayed as RocketMQ's ``callConsumer`` does: the admin's ext fields and body go to
  the client's connection as a new request, and the client's answer (code, remark, body)
  is the admin's answer. A client not online answers SYSTEM_ERROR "The Consumer <g> <c>
  not online"; no answer within ``client_calls.CALL_TIMEOUT`` answers CONSUME_MSG_TIMEOUT;
  a connection lost meanwhile answers SYSTEM_ERROR. Nothing here blocks the loop: the
  handler returns an awaitable.
* 222 follows ``Broker2Client.resetOffset``: per write queue of the topic, the target is
  the offset of the first message stored at or after ``timestamp`` (-1: the queue's max
  offset), used when ``isForce`` or when it is behind the group's offset; a queue without
  a committed offset answers SYSTEM_ERROR "THe consumer group <g> not exist". With online
  consumers each gets RESET_CONSUMER_CLIENT_OFFSET (220, one-way, ``ResetOffsetBody``; a
  CPP request gets ``ResetOffsetBodyForC``) and the answer is the offset table; the
  consumers move and commit the offsets themselves (the broker's table is not written
  here, so an online client never overwrites it with an older in-memory offset). Without
  online consumers: CONSUMER_NOT_ONLINE, on which mqadmin resets through
  UPDATE_CONSUMER_OFFSET itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any  # Any: structlog's logger; handler answers; a client conn

import orjson
from kairosmq.protocol.bodies import MessageQueueData, encode_mq_map
from kairosmq.protocol.codes import LanguageCode, RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import (
    GetConsumerRunningInfoRequestHeader,
    ResetOffsetRequestHeader,
)

from ...remoting import client_calls, ingress

if TYPE_CHECKING:
    from ...remoting.transport import Connection
    from ...store import MessageStore
    from ...tables.clients import ClientRegistry
    from ...tables.offsets import ConsumerOffsetManager
    from ...tables.topics import TopicConfigManager


def encode_reset_body(offsets: list[tuple[MessageQueueData, int]], for_c: bool = False) -> bytes:
    """``ResetOffsetBody`` (fastjson map keyed by MessageQueue) or ``ResetOffsetBodyForC``."""
    if for_c:
        return orjson.dumps(
            {
                "offsetTable": [
                    {
                        "brokerName": mq.broker_name,
                        "offset": off,
                        "queueId": mq.queue_id,
                        "topic": mq.topic,
                    }
                    for mq, off in offsets
                ]
            }
        )
    return b'{"offsetTable":' + encode_mq_map(offsets) + b"}"  # type: ignore[arg-type]


class ConsumerCallbackProcessor:
    """307 and 222: requests answered with the help of the group's online consumers."""

    def __init__(
        self,
        *,
        clients: ClientRegistry,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        reads: MessageStore,
        broker_name: str,
        log: Any,
    ) -> None:
        self.clients = clients
        self.topics = topics
        self.offsets = offsets
        self.reads = reads
        self.broker_name = broker_name
        self.log = log

    # ------------------------------------------------------------ 307

    def handle_consumer_running_info(self, conn: Connection, cmd: RemotingCommand) -> Any:
        h = GetConsumerRunningInfoRequestHeader.from_ext_fields(cmd.ext_fields)
        ingress.check_group(h.consumer_group, "consumerGroup")
        info = self.clients.consumers.get(h.consumer_group)
        client = info.clients.get(h.client_id) if info is not None else None
        if client is None:
            return cmd.error(
                ResponseCode.SYSTEM_ERROR,
                f"The Consumer <{h.consumer_group}> <{h.client_id}> not online",
            )
        return self._relay(cmd, client.conn, h.consumer_group, h.client_id)

    async def _relay(
        self, cmd: RemotingCommand, target: Any, group: str, client_id: str
    ) -> RemotingCommand:
        try:
            resp = await client_calls.call_client(
                target, RequestCode.GET_CONSUMER_RUNNING_INFO, cmd.ext_fields, cmd.body
            )
        except TimeoutError:
            self._failed(client_id, group, "timeout")
            return cmd.error(
                ResponseCode.CONSUME_MSG_TIMEOUT,
                f"consumer <{group}> <{client_id}> Timeout: no answer in "
                f"{client_calls.CALL_TIMEOUT:g}s",
            )
        except ConnectionError as err:
            self._failed(client_id, group, str(err))
            return cmd.error(
                ResponseCode.SYSTEM_ERROR,
                f"invoke consumer <{group}> <{client_id}> Exception: {err}",
            )
        return cmd.response(
            resp.code, remark=resp.remark, ext_fields=dict(resp.ext_fields), body=resp.body
        )

    def _failed(self, client_id: str, group: str, error: str) -> None:
        self.log.warning(
            "client.call_failed",
            client_id=client_id,
            group=group,
            request_code=int(RequestCode.GET_CONSUMER_RUNNING_INFO),
            error=error,
        )

    # ------------------------------------------------------------ 222

    def handle_reset_offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = ResetOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
        ingress.check_group(h.group, "group")
        cfg = ingress.check_known_topic(self.topics, h.topic)
        if cfg is None:
            return cmd.error(
                ResponseCode.SYSTEM_ERROR,
                f"[reset-offset] reset offset failed, no topic in this broker. topic={h.topic}",
            )
        table: list[tuple[MessageQueueData, int]] = []
        for qid in range(cfg.write_queue_nums):
            committed = self.offsets.query(h.group, h.topic, qid)
            if committed is None:
                return cmd.error(
                    ResponseCode.SYSTEM_ERROR, f"THe consumer group <{h.group}> not exist"
                )
            target = self._offset_at(h.topic, qid, h.timestamp)
            table.append(
                (
                    MessageQueueData(h.topic, self.broker_name, qid),
                    target if h.is_force or target < committed else committed,
                )
            )
        info = self.clients.consumers.get(h.group)
        if info is None or not info.clients:
            return cmd.error(
                ResponseCode.CONSUMER_NOT_ONLINE,
                f"Consumer not online, so can not reset offset, Group: {h.group} "
                f"Topic: {h.topic} Timestamp: {h.timestamp}",
            )
        body = encode_reset_body(table, for_c=cmd.language == LanguageCode.CPP)
        ext = h.to_ext_fields()  # relayed as RESET_CONSUMER_CLIENT_OFFSET (Broker2Client)
        for client in info.clients.values():
            client_calls.notify_client(  # the table's narrow view of a transport Connection
                client.conn,  # type: ignore[arg-type]
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                ext,
                body,
            )
        self.log.info(
            "offset.reset",
            group=h.group,
            topic=h.topic,
            reset_ts=h.timestamp,
            clients=len(info.clients),
        )
        return cmd.response(body=encode_reset_body(table))

    def _offset_at(self, topic: str, qid: int, timestamp: int) -> int:
        if timestamp == -1:
            return max(0, self.reads.max_offset(topic, qid))
        cq = self.reads.find_queue(topic, qid)
        if cq is None:
            return 0
        off = cq.offset_by_time(timestamp, lambda i: self.reads.store_time_at(topic, qid, i))
        return max(0, off)
