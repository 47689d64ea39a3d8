"""Broker -> consumer requests the push consumer answers: RocketMQ's
``ClientRemotingProcessor`` for GET_CONSUMER_RUNNING_INFO (307) and
RESET_CONSUMER_CLIENT_OFFSET (220).

Owns: ``on_request`` (called from ``PushConsumer._on_request`` for ``CODES``, with the
consumer's options and its ``Rebalance``: the subscriptions, owned queues and offsets it
reports or moves), ``running_info`` (the ``ConsumerRunningInfo`` JSON that ``mqadmin
consumerStatus`` prints: properties, subscriptionSet, mqTable of ``ProcessQueueInfo``,
statusTable) and ``reset_offset`` (``MQClientInstance.resetOffset``).

Invariants:
* GET_CONSUMER_RUNNING_INFO is answered at once from the consumer's state (no I/O); a
  request for another group answers SYSTEM_ERROR with RocketMQ's remark.
* RESET_CONSUMER_CLIENT_OFFSET (one-way) runs as a background task of the consumer: each
  owned queue of the topic named in the body is dropped (pulling stops, results of
  in-flight consumption are no longer recorded) before anything is awaited, its offset is
  set to the broker's value and persisted with an acknowledged UPDATE_CONSUMER_OFFSET, then
  the rebalance re-adds it and pulls from that offset. Queues this consumer does not own
  are left to their owners (every member gets the request). A request for another group,
  or an unreadable header or body, changes nothing (logged).
* Not tracked by this client, so reported as RocketMQ's idle values: pull/consume RT and
  TPS (0), and the last pull/consume time of a queue (the time of the answer).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time

import orjson
from kairosmq.protocol.bodies import MessageQueueData, encode_mq_table
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.errors import HeaderError
from kairosmq.protocol.headers import GetConsumerRunningInfoRequestHeader, ResetOffsetRequestHeader
from kairosmq.protocol.naming import retry_topic

from ..message import MessageQueue
from ..options import PushConsumerOptions
from .rebalance import Rebalance
from .selector import MessageSelector

log = logging.getLogger("kairosmq.client.callbacks")

CODES = frozenset({RequestCode.GET_CONSUMER_RUNNING_INFO, RequestCode.RESET_CONSUMER_CLIENT_OFFSET})
# MQVersion.getVersionDesc(BROKER_VERSION = 409): the version this client's requests carry
CLIENT_VERSION = "V4_9_8"


def on_request(
    cmd: RemotingCommand, options: PushConsumerOptions, rebalance: Rebalance
) -> RemotingCommand | None:
    """Answer (or start) one of ``CODES``; ``None`` for a one-way request."""
    if cmd.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
        try:
            group = GetConsumerRunningInfoRequestHeader.from_ext_fields(
                cmd.ext_fields
            ).consumer_group
        except HeaderError as err:
            return cmd.response(ResponseCode.SYSTEM_ERROR, remark=str(err))
        if group != rebalance.group:
            return cmd.response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"The Consumer Group <{group}> not exist in this consumer",
            )
        return cmd.response(body=running_info(options, rebalance))
    if cmd.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
        try:
            h = ResetOffsetRequestHeader.from_ext_fields(cmd.ext_fields)
            table = decode_reset_body(cmd.body)
        except HeaderError as err:
            log.warning("unreadable RESET_CONSUMER_CLIENT_OFFSET header: %s", err)
        except (ValueError, KeyError, TypeError) as err:
            log.warning("unreadable RESET_CONSUMER_CLIENT_OFFSET body: %s", err)
        else:
            client = rebalance.client
            if h.group == rebalance.group and client.running:
                client._spawn(reset_offset(rebalance, h.topic, table))
        return None if cmd.is_oneway else cmd.response()
    return None


# ------------------------------------------------------------------ running info

_NOT_SHOWN = frozenset({"access_key", "secret_key", "security_token"})


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def _properties(options: PushConsumerOptions, rebalance: Rebalance) -> dict[str, str]:
    """``MixAll.object2Properties(defaultMQPushConsumer)`` (the options, camelCase, without
    credentials) plus the PROP_* keys. The start time is the ``%RETRY%`` subscription's
    version (set at start)."""
    props: dict[str, str] = {}
    for f in dataclasses.fields(options):
        if f.name in _NOT_SHOWN or "secret" in f.name:  # credentials never leave the client
            continue
        value = getattr(options, f.name)
        value = getattr(value, "value", value)
        if isinstance(value, bool):
            value = str(value).lower()
        if isinstance(value, list):
            value = ";".join(map(str, value))
        props[_camel(f.name)] = "" if value is None else str(value)
    ns = options.namesrv_addr
    subs = rebalance.subscriptions
    versions = [s.sub_version for s in subs.values()]
    retry = subs.get(retry_topic(rebalance.group))
    started = retry.sub_version if retry is not None else min(versions, default=0)
    props.update(
        {
            "PROP_NAMESERVER_ADDR": "".join(f"{a};" for a in ([ns] if isinstance(ns, str) else ns)),
            "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY",
            "PROP_CONSUMEORDERLY": str(rebalance.orderly).lower(),
            "PROP_THREADPOOL_CORE_SIZE": str(options.consume_thread_max),
            "PROP_CLIENT_VERSION": CLIENT_VERSION,
            "PROP_CONSUMER_START_TIMESTAMP": str(started),
        }
    )
    return props


def running_info(options: PushConsumerOptions, rebalance: Rebalance) -> bytes:
    """``ConsumerRunningInfo`` as fastjson writes it (``mqTable`` keyed by MessageQueue)."""
    now = int(time.time() * 1000)
    subs = sorted(
        (
            MessageSelector(s.expression_type, s.expression)
            .subscription_data(s.topic, s.sub_version)
            .to_dict()
            for s in rebalance.subscriptions.values()
        ),
        key=lambda d: (d["topic"], d["subString"]),
    )
    entries = []
    pqs = rebalance.process_queues
    for mq in sorted(pqs, key=lambda m: (m.topic, m.broker_name, m.queue_id)):
        pq = pqs[mq]
        cached = sorted(pq._msgs)  # offsets of pulled, unfinished messages
        committed = rebalance.offsets.cached(mq)
        entries.append(
            (
                MessageQueueData(mq.topic, mq.broker_name, mq.queue_id),
                {
                    "commitOffset": committed if committed >= 0 else pq.commit_offset,
                    "cachedMsgMinOffset": cached[0] if cached else 0,
                    "cachedMsgMaxOffset": cached[-1] if cached else 0,
                    "cachedMsgCount": len(cached),
                    "cachedMsgSizeInMiB": pq.msg_size // (1024 * 1024),
                    "transactionMsgMinOffset": 0,
                    "transactionMsgMaxOffset": 0,
                    "transactionMsgCount": 0,
                    "locked": pq.locked,
                    "tryUnlockTimes": 0,
                    "lastLockTimestamp": int(pq.lock_time * 1000) if pq.locked else 0,
                    "droped": pq.dropped,
                    "lastPullTimestamp": now,
                    "lastConsumeTimestamp": now,
                },
            )
        )
    status = {
        s["topic"]: {
            "pullRT": 0.0,
            "pullTPS": 0.0,
            "consumeRT": 0.0,
            "consumeOKTPS": 0.0,
            "consumeFailedTPS": 0.0,
            "consumeFailedMsgs": 0,
        }
        for s in subs
    }
    return encode_mq_table(
        "mqTable",
        entries,
        {
            "properties": _properties(options, rebalance),
            "subscriptionSet": subs,
            "statusTable": status,
        },
    )


# ------------------------------------------------------------------ reset offset


def decode_reset_body(raw: bytes) -> dict[MessageQueue, int]:
    """``ResetOffsetBody`` (``{"offsetTable": {<mq>: offset}}``, fastjson object keys) or
    ``ResetOffsetBodyForC`` (``{"offsetTable": [{topic, brokerName, queueId, offset}]}``)."""
    text = raw.decode()
    at = text.find('"offsetTable":')
    if at < 0:
        raise ValueError("no offsetTable")
    dec = json.JSONDecoder()
    pos = at + len('"offsetTable":')
    while text[pos : pos + 1].isspace():
        pos += 1
    out: dict[MessageQueue, int] = {}
    if text[pos : pos + 1] == "[":
        for item in dec.raw_decode(text, pos)[0]:
            out[MessageQueue(str(item["topic"]), str(item["brokerName"]), int(item["queueId"]))] = (
                int(item["offset"])
            )
        return out
    if text[pos : pos + 1] != "{":
        raise ValueError("offsetTable is not a map")
    pos += 1
    while text[pos : pos + 1] != "}":
        key, pos = dec.raw_decode(text, pos)
        if text[pos : pos + 1] != ":":
            raise ValueError(f"':' expected at {pos}")
        value, pos = dec.raw_decode(text, pos + 1)
        out[MessageQueue(str(key["topic"]), str(key["brokerName"]), int(key["queueId"]))] = int(
            value
        )
        if text[pos : pos + 1] == ",":
            pos += 1
    return out


async def reset_offset(rebalance: Rebalance, topic: str, table: dict[MessageQueue, int]) -> None:
    """Move the owned queues of ``topic`` to the offsets in ``table`` (see the module doc)."""
    moved: list[MessageQueue] = []
    for mq in [mq for mq in rebalance.process_queues if mq.topic == topic and mq in table]:
        rebalance.forget_queue(mq)
        rebalance.offsets.update(mq, table[mq], increase_only=False)
        moved.append(mq)
    if not moved:
        return
    log.info(
        "reset offsets of %s for %s: %s",
        topic,
        rebalance.group,
        orjson.dumps({str(mq): table[mq] for mq in moved}).decode(),
    )
    await rebalance.offsets.persist(moved, final=True)
    rebalance.timer.wake()
