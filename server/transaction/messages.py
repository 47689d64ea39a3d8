"""Transactional message records: half, committed copy, op record, check body (pure).

Owns: the names (``RMQ_SYS_TRANS_HALF_TOPIC``, ``RMQ_SYS_TRANS_OP_HALF_TOPIC``, the op
tags, kairosmq's ``KAIROS_TX_HALF``/``KAIROS_TX_END`` properties), ``is_half`` (which
send is a half message: RocketMQ 4.9.8 SendMessageProcessor's test), ``transform_half``
(RocketMQ's ``parseHalfMessageInner``), ``committed_message`` (its
``endMessageTransaction``: ``put/requeue.py``'s copy without ``COMMIT_STRIP``),
``op_message`` (an op record) and ``check_body`` (the CHECK_TRANSACTION_STATE body: the
half message as the producer sent it).

Invariants:
* A half message keeps every client property, DELAY and timer properties included:
  they are *parked* (not applied to the half) and apply to the committed copy, at
  commit (RocketMQ 4.9.8's Java client drops DELAY from transactional sends; its broker
  would divert a half message carrying DELAY into the schedule topic and lose its real
  topic there).
* The committed copy has the half message's body, flag, born time/host, reconsume
  times and properties (UNIQ_KEY, so the same msgId) without REAL_TOPIC/REAL_QID/
  TRAN_MSG, the transaction type COMMIT in its sysFlag, and ``KAIROS_TX_HALF`` naming
  the half message: the one append that both delivers it and ends the transaction.
* Pure: no I/O, no clock.
"""

from __future__ import annotations

from kairosmq.protocol.codes import (
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_ROLLBACK,
)
from kairosmq.protocol.message import MessageExt, encode_record
from kairosmq.protocol.properties import (
    DELAY,
    INT32_DIGITS,
    INT64_DIGITS,
    PGROUP,
    REAL_QID,
    REAL_TOPIC,
    TAGS,
    TRAN_MSG,
    encode_properties,
    parse_decimal,
    parse_decimal_pair,
)

from ..put.requeue import copy_record
from ..store import MessageInner

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"  # TransactionalMessageUtil.buildHalfTopic()
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"  # TransactionalMessageUtil.buildOpTopic()
CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"  # MessageConst
TRANSACTION_ID = "__transactionId__"  # TransactionalMessageUtil.TRANSACTION_ID
OP_REMOVE_TAG = "d"  # TransactionalMessageUtil.REMOVETAG: the half message is ended
OP_CHECK_TAG = "c"  # kairosmq: the half message was checked once more
TX_HALF = "KAIROS_TX_HALF"  # "<half queue offset>:<half commit-log offset>"
TX_END = "KAIROS_TX_END"  # on an op record tagged "d": commit | rollback | discard
_TX_TYPE = SYSFLAG_TRANSACTION_ROLLBACK  # 0xC: both transaction-type bits
# what a committed copy does not inherit from its half message (DELAY and the timer
# properties stay: they apply at commit)
COMMIT_STRIP = (REAL_TOPIC, REAL_QID, TRAN_MSG, TX_HALF, TX_END)


def is_half(props: dict[str, str], reconsume_times: int) -> bool:
    """``TRAN_MSG=true`` (Java's Boolean.parseBoolean), except a message sent back for
    reconsumption with a delay level (RocketMQ: "for client under version 4.6.1")."""
    if props.get(TRAN_MSG, "").lower() != "true":
        return False
    return not (reconsume_times > 0 and props.get(DELAY, "0") not in ("0", ""))


def transform_half(msg: MessageInner, producer_group: str) -> None:
    """Divert ``msg`` into the half topic in place (``parseHalfMessageInner``): REAL_TOPIC
    and REAL_QID keep where it goes on commit; PGROUP defaults to the send's group."""
    props = msg.properties
    props.setdefault(PGROUP, producer_group)
    props[REAL_TOPIC] = msg.topic
    props[REAL_QID] = str(msg.queue_id)
    msg.sys_flag &= ~_TX_TYPE
    msg.topic = HALF_TOPIC
    msg.queue_id = 0


def format_key(queue_offset: int, phy: int) -> str:
    return f"{queue_offset}:{phy}"


def parse_key(raw: str) -> tuple[int, int] | None:
    """``queueOffset:phy`` -> the pair, None unless both are small decimals."""
    return parse_decimal_pair(raw, INT64_DIGITS, INT64_DIGITS)


def real_address(props: dict[str, str]) -> tuple[str, int] | None:
    """A half record's (REAL_TOPIC, REAL_QID), None if they do not name a queue."""
    topic, qid = props.get(REAL_TOPIC, ""), parse_decimal(props.get(REAL_QID), INT32_DIGITS)
    if not topic or qid is None:
        return None
    return topic, qid


def committed_message(m: MessageExt, topic: str, queue_id: int) -> MessageInner:
    """The message a commit puts into ``topic``/``queue_id`` for the half record ``m``
    (``put/requeue.py``'s copy, ``COMMIT_STRIP`` dropped, ``KAIROS_TX_HALF`` naming it)."""
    return copy_record(
        m,
        topic,
        queue_id,
        COMMIT_STRIP,
        properties={TX_HALF: format_key(m.queue_offset, m.commit_log_offset)},
        sys_flag=(m.sys_flag & ~_TX_TYPE) | SYSFLAG_TRANSACTION_COMMIT,
    )


def op_message(
    queue_offset: int,
    phy: int,
    tag: str,
    end: str | None,
    born_host: tuple[bytes, int],
    now_ms: int,
) -> MessageInner:
    """An op record (``makeOpMessageInner``): body = the half message's queue offset,
    tag ``d`` (ended, ``end`` says how) or ``c`` (checked once more)."""
    props = {TAGS: tag, TX_HALF: format_key(queue_offset, phy)}
    if end is not None:
        props[TX_END] = end
    return MessageInner(
        topic=OP_TOPIC,
        queue_id=0,
        body=str(queue_offset).encode(),
        properties=props,
        born_timestamp=now_ms,
        born_host=born_host,
    )


def check_body(m: MessageExt) -> bytes:
    """CHECK_TRANSACTION_STATE's body: the half record with its real topic and queue
    (``sendCheckMessage``), as ``MessageDecoder.encode(msgExt, false)`` writes it."""
    where = real_address(m.properties) or (m.topic, m.queue_id)
    return encode_record(
        topic=where[0].encode(),
        body=m.body,
        properties=encode_properties(m.properties).encode(),
        queue_id=where[1],
        flag=m.flag,
        queue_offset=m.queue_offset,
        physical_offset=m.commit_log_offset,
        sys_flag=m.sys_flag,
        born_timestamp=m.born_timestamp,
        born_host=m.born_host,
        store_timestamp=m.store_timestamp,
        store_host=m.store_host,
        reconsume_times=m.reconsume_times,
        prepared_transaction_offset=m.prepared_transaction_offset,
    )
