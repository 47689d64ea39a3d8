"""Wire helpers of the transaction tests: half sends, END_TRANSACTION, reads."""

from __future__ import annotations

from typing import Any

import orjson
from kairosmq.protocol.bodies import HeartbeatData
from kairosmq.protocol.codec import encode_command
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.commands import request
from kairosmq.protocol.headers import CheckTransactionStateRequestHeader
from kairosmq.protocol.ids import decode_offset_msg_id
from kairosmq.protocol.message import decode_record, decode_records

from tests.helpers import pull, send
from tests.wire import RawPeer

HALF = "RMQ_SYS_TRANS_HALF_TOPIC"
OP = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
FAST = {"transaction_timeout": 0.3, "transaction_check_interval": 0.3, "transaction_check_max": 3}


async def half(peer: RawPeer, topic: str, uniq: str, body: bytes = b"half", **props: str) -> Any:
    r = await send(
        peer, topic, body, {"TRAN_MSG": "true", "PGROUP": "PG", "UNIQ_KEY": uniq, **props}, f=4
    )
    assert r.code == ResponseCode.SUCCESS, r.remark
    return r


def end_ext(r: Any, how: int, *, group: str = "PG", from_check: bool = False) -> dict:
    _ip, _port, phy = decode_offset_msg_id(r.ext_fields["msgId"])
    return {
        "producerGroup": group,
        "tranStateTableOffset": r.ext_fields["queueOffset"],
        "commitLogOffset": phy,
        "commitOrRollback": how,
        "msgId": r.ext_fields["msgId"],
        "transactionId": r.ext_fields.get("transactionId", ""),
        "fromTransactionCheck": "true" if from_check else "false",
    }


async def end(peer: RawPeer, r: Any, how: int, **kw: Any) -> Any:
    return await peer.call(RequestCode.END_TRANSACTION, end_ext(r, how, **kw))


async def messages(peer: RawPeer, topic: str, queue_id: int = 0) -> list:
    r = await pull(peer, topic, queue_id=queue_id, suspend_ms=0, max_n=64)
    return decode_records(r.body) if r.code == ResponseCode.SUCCESS else []


def stored(broker: Any, topic: str) -> list:
    """Every record of ``topic`` queue 0 read from the store (system topics cannot be
    pulled)."""
    res = broker.store.get(topic, 0, 0, 1000)
    return [m for chunk in res.chunks for m in decode_records(chunk)]


async def pending(peer: RawPeer) -> int:
    """Half messages the broker still holds unresolved (KAIROS_GET_TRANSACTION_STATUS)."""
    r = await peer.call(RequestCode.KAIROS_GET_TRANSACTION_STATUS)
    return int(orjson.loads(r.body)["pending"])


async def register_producer(peer: RawPeer, group: str = "PG", cid: str = "tx-client") -> None:
    r = await peer.call(RequestCode.HEART_BEAT, body=HeartbeatData(cid, [group]).to_json())
    assert r.code == ResponseCode.SUCCESS


async def commit_every_check(producer: RawPeer, checked: list[str] | None = None) -> None:
    """Answer every CHECK_TRANSACTION_STATE that reaches ``producer`` (registered with
    ``register_producer``) with a one-way COMMIT, appending each checked message's
    UNIQ_KEY to ``checked``; runs until cancelled."""
    while True:
        check = await producer.requests.get()
        if check.code != RequestCode.CHECK_TRANSACTION_STATE:
            continue
        h = CheckTransactionStateRequestHeader.from_ext_fields(check.ext_fields)
        if checked is not None:
            checked.append(decode_record(check.body).properties["UNIQ_KEY"])
        producer.send_raw(
            encode_command(
                request(
                    RequestCode.END_TRANSACTION,
                    {
                        "producerGroup": "PG",
                        "tranStateTableOffset": str(h.tran_state_table_offset),
                        "commitLogOffset": str(h.commit_log_offset),
                        "commitOrRollback": "8",
                        "msgId": h.msg_id or "",
                        "fromTransactionCheck": "true",
                    },
                    oneway=True,
                )
            )
        )
