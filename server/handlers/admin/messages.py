"""Message lookup: VIEW_MESSAGE_BY_ID (33) and QUERY_MESSAGE (12), as ``mqadmin
queryMsgById`` / ``queryMsgByKey`` and a client's ``viewMessage`` send them.

Owns: ``QueryMessageProcessor`` (RocketMQ's; services: store reads and the key index).
Offsets, keys and counts are checked by ``ingress`` first. QUERY_MESSAGE answers
concatenated records like the Java broker; ``topic`` may be empty for any topic.

Invariants: VIEW_MESSAGE_BY_ID reads with the store's checked read (a client-given
offset). Index hits are verified by reading the record, so a hash collision or a stale
entry never yields a wrong message.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.errors import MessageDecodeError
from kairosmq.protocol.headers import (
    QueryMessageRequestHeader,
    QueryMessageResponseHeader,
    ViewMessageRequestHeader,
)
from kairosmq.protocol.message import MessageExt, decode_record
from kairosmq.protocol.properties import KEYS, UNIQ_KEY

from ...remoting import ingress
from ...store.index import KIND_KEY, KIND_UNIQ

if TYPE_CHECKING:
    from ...remoting.transport import Connection
    from ...store.index import KeyIndex
    from ...store.reads import StoreReads

MAX_QUERY = 64


def _matches(m: MessageExt, kind: str, key: str) -> bool:
    if kind == KIND_UNIQ:
        return m.properties.get(UNIQ_KEY) == key
    return key in (m.properties.get(KEYS) or "").split(" ")


class QueryMessageProcessor:
    """VIEW_MESSAGE_BY_ID and QUERY_MESSAGE (by msgId or key, through the key index)."""

    def __init__(self, *, reads: StoreReads, index: KeyIndex) -> None:
        self.reads = reads
        self.index = index

    def handle_view_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = ViewMessageRequestHeader.from_ext_fields(cmd.ext_fields)
        ingress.check_offset(h.offset, "offset")
        record = self.reads.read_record(h.offset)  # checked: size cap, magic, CRC, start
        if not isinstance(record, bytes):
            return cmd.error(
                ResponseCode.SYSTEM_ERROR,
                f"no message at commit-log offset {h.offset}: {record.value}",
            )
        return cmd.response(body=record)

    def handle_query_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryMessageRequestHeader.from_ext_fields(cmd.ext_fields)
        ingress.check_query_message(h)
        kind = KIND_UNIQ if h.unique_key_query == "true" else KIND_KEY
        want = max(1, min(h.max_num, MAX_QUERY))
        end_ts = h.end_timestamp if h.end_timestamp > 0 else 1 << 62
        found: list[bytes] = []
        for phy in self.index.lookup(kind, h.key, limit=want * 4):
            record = self.reads.read_at(phy)
            if record is None:
                continue
            try:
                m = decode_record(record)
            except MessageDecodeError:
                continue
            if (
                m.commit_log_offset == phy
                and _matches(m, kind, h.key)
                and (not h.topic or m.topic == h.topic)
                and h.begin_timestamp <= m.store_timestamp <= end_ts
            ):
                found.append(record)
                if len(found) >= want:
                    break
        if not found:
            what = "msgId" if kind == KIND_UNIQ else "key"
            return cmd.error(
                ResponseCode.QUERY_NOT_FOUND,
                f"no message with {what} {h.key!r}" + (f" in topic {h.topic}" if h.topic else ""),
            )
        header = QueryMessageResponseHeader(
            index_last_update_timestamp=int(time.time() * 1000),
            index_last_update_phyoffset=self.index.end_phy,
        )
        return cmd.response(ext_fields=header.to_ext_fields(), body=b"".join(found))
