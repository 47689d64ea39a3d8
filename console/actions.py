"""The admin role's writes: create and delete a topic, reset a consumer group's offsets
to a point in time.

Owns: the broker requests of each write, built with the protocol's header classes
(``CreateTopicRequestHeader``, ``TopicRequestHeader``, ``ResetOffsetRequestHeader``, as
``kairosmq admin topic`` builds them), and the reset's fallback for a group with no
client online, as ``mqadmin resetOffsetByTime`` does: per queue of GET_CONSUME_STATS,
SEARCH_OFFSET_BY_TIMESTAMP (GET_MAX_OFFSET for ``-1``) then UPDATE_CONSUMER_OFFSET.

Invariants:
* Every request goes to an address of the cluster info (``Brokers``); a refusal comes
  back as ``BrokerError`` (422 with the broker's remark) and the caller logs the write
  (``console.action``) either way.
* A topic is deleted on the chosen broker; its name-server route is dropped too when that
  broker is the cluster's only master (what ``mqadmin deleteTopic`` does for a cluster).
* Values are checked by the broker (it names the field); the console only checks types.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kairosmq.protocol.bodies import decode_mq_table
from kairosmq.protocol.codes import PERM_READ, PERM_WRITE, ResponseCode
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.errors import HeaderError
from kairosmq.protocol.headers import (
    CreateTopicRequestHeader,
    GetConsumeStatsRequestHeader,
    OffsetResponseHeader,
    QueueRequestHeader,
    ResetOffsetRequestHeader,
    SearchOffsetRequestHeader,
    TopicRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)

from .http import HttpError
from .views import BrokerError

if TYPE_CHECKING:
    from .api import Brokers

MAX_QUEUES = 1024  # a console form's bound; the broker applies its own


def _str(body: dict[str, Any], name: str) -> str:
    v = body.get(name)
    if not isinstance(v, str) or not v or len(v) > 256:
        raise HttpError(400, f"give {name} as a string of 1-256 characters")
    return v


def _num(body: dict[str, Any], name: str, default: int | None = None) -> int:
    v = body.get(name, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise HttpError(400, f"give {name} as an integer")
    return v


async def create_topic(brokers: Brokers, name: str | None, body: dict[str, Any]) -> Any:
    """UPDATE_AND_CREATE_TOPIC (17) on one broker: ``queues`` read and write queues,
    ``perm`` of ``r``/``w``, ``order``."""
    topic = _str(body, "topic")
    queues = _num(body, "queues", 4)
    if not 1 <= queues <= MAX_QUEUES:
        raise HttpError(400, f"queues {queues} is not within 1..{MAX_QUEUES}")
    perm_text = body.get("perm", "rw")
    if not isinstance(perm_text, str) or not set(perm_text) <= {"r", "w"}:
        raise HttpError(400, "perm is r, w or rw")
    perm = (PERM_READ if "r" in perm_text else 0) | (PERM_WRITE if "w" in perm_text else 0)
    h = CreateTopicRequestHeader(
        topic=topic,
        read_queue_nums=queues,
        write_queue_nums=queues,
        perm=perm,
        order=bool(body.get("order", False)),
    )
    await brokers.raw(await brokers.address(name), R.UPDATE_AND_CREATE_TOPIC, h.to_ext_fields())
    return {"topic": topic, "created": True, "queues": queues}


async def delete_topic(brokers: Brokers, name: str | None, body: dict[str, Any]) -> Any:
    """DELETE_TOPIC_IN_BROKER (215), then DELETE_TOPIC_IN_NAMESRV (216) when the broker
    is the only master of the cluster."""
    topic = _str(body, "topic")
    fields = TopicRequestHeader(topic).to_ext_fields()
    await brokers.raw(await brokers.address(name), R.DELETE_TOPIC_IN_BROKER, fields)
    out: dict[str, Any] = {"topic": topic, "deleted": True}
    if brokers.namesrv is not None and brokers.fixed is None:
        if len(await brokers.masters()) == 1:
            resp = await brokers.namesrv_call(R.DELETE_TOPIC_IN_NAMESRV, fields)
            out["nameServerRoute"] = (
                "deleted" if resp.code == ResponseCode.SUCCESS else f"not deleted: {resp.remark}"
            )
    return out


async def reset_offset(brokers: Brokers, name: str | None, body: dict[str, Any]) -> Any:
    """INVOKE_BROKER_TO_RESET_OFFSET (222: the online clients move and commit); for a
    group with no client online the offsets are written on the broker one queue at a
    time. ``timestamp`` in epoch ms, ``-1`` for each queue's end."""
    group, topic = _str(body, "consumerGroup"), _str(body, "topic")
    ts = _num(body, "timestamp")
    if ts < -1:
        raise HttpError(400, f"timestamp {ts}: give epoch milliseconds or -1 (the end)")
    addr = await brokers.address(name)
    h = ResetOffsetRequestHeader(topic=topic, group=group, timestamp=ts, is_force=True)
    resp = await brokers.raw(
        addr,
        R.INVOKE_BROKER_TO_RESET_OFFSET,
        h.to_ext_fields(),
        accept=(ResponseCode.CONSUMER_NOT_ONLINE,),
    )
    if resp.code == ResponseCode.SUCCESS:
        table, _ = decode_mq_table(resp.body, "offsetTable")
        queues = [{"queueId": mq.queue_id, "offset": off} for mq, off in table.items()]
        return {"group": group, "topic": topic, "timestamp": ts, "online": True, "queues": queues}
    stats = await brokers.raw(
        addr, R.GET_CONSUME_STATS, GetConsumeStatsRequestHeader(group, topic).to_ext_fields()
    )
    table, _ = decode_mq_table(stats.body, "offsetTable")
    if not table:
        raise BrokerError(
            int(ResponseCode.SYSTEM_ERROR), f"group {group} has no offsets on topic {topic}"
        )
    queues = []
    for mq in sorted(table, key=lambda m: m.queue_id):
        if ts == -1:
            q = QueueRequestHeader(topic, mq.queue_id).to_ext_fields()
            off = _offset(await brokers.raw(addr, R.GET_MAX_OFFSET, q))
        else:
            s = SearchOffsetRequestHeader(topic, mq.queue_id, ts).to_ext_fields()
            off = _offset(await brokers.raw(addr, R.SEARCH_OFFSET_BY_TIMESTAMP, s))
        u = UpdateConsumerOffsetRequestHeader(group, topic, mq.queue_id, off)
        await brokers.raw(addr, R.UPDATE_CONSUMER_OFFSET, u.to_ext_fields())
        queues.append({"queueId": mq.queue_id, "offset": off})
    return {"group": group, "topic": topic, "timestamp": ts, "online": False, "queues": queues}


def _offset(resp: Any) -> int:
    try:
        return OffsetResponseHeader.from_ext_fields(resp.ext_fields).offset
    except HeaderError as err:
        raise BrokerError(int(resp.code), f"offset answer unreadable: {err}") from None
