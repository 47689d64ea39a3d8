"""construct declarations: the single written specification of every binary format.

Owns: the frame prefix, the ROCKETMQ binary command header, the commit-log message
record (which is also the VIEW_MESSAGE and pull-body encoding), the batch item and the
20-byte consume-queue unit. Only declarations live here (and ``Pair``, the one combinator
construct lacks); ``codec``/``message`` use them.

Invariants:
* All integers are big-endian, as RocketMQ writes them.
* Every inbound frame is parsed at runtime by two of these declarations (``codec``):
  ``FramePayload`` (the envelope: type, header, body) and, for ROCKETMQ-serialized
  headers, ``BinaryHeaderCounted``, both ``.compile()``d. The compiled form does not
  detect truncation (a short ``GreedyRange`` item is silently dropped), so ``codec``
  validates every length first and only then parses; ``BinaryHeaderCounted`` reads the
  number of extFields the validation counted (``ext_count``) instead of ``GreedyRange``
  and is held to ``BinaryHeader`` by a parity test.
* The message record is the one format with ``struct.Struct`` fast paths (per message,
  in ``message.py``); a parity test holds each twin to ``MessageRecord`` here.
"""

from __future__ import annotations

from typing import Any  # Any: construct has no stubs: its streams, contexts and parsed values

from construct import (
    Array,
    Bytes,
    Const,
    Construct,
    GreedyBytes,
    GreedyRange,
    IfThenElse,
    Int8ub,
    Int16sb,
    Int16ub,
    Int24ub,
    Int32sb,
    Int32ub,
    Int64sb,
    PascalString,
    Prefixed,
    Struct,
    this,
)

MESSAGE_MAGIC_CODE = 0xDAA320A7
MESSAGE_MAGIC_CODE_V2 = 0xDAA320AB
BLANK_MAGIC_CODE = 0xCBD43194

# Word at offset 4 of a frame: (serialize type << 24) | header length.
FramePrefix = Struct(
    "length" / Int32ub,
    "serialize_type" / Int8ub,
    "header_length" / Int24ub,
)

ExtField = Struct(
    "key" / PascalString(Int16ub, "utf8"),
    "value" / PascalString(Int32ub, "utf8"),
)

# RocketMQSerializable.rocketMQProtocolEncode
BinaryHeader = Struct(
    "code" / Int16sb,
    "language" / Int8ub,
    "version" / Int16sb,
    "opaque" / Int32sb,
    "flag" / Int32sb,
    "remark" / PascalString(Int32ub, "utf8"),
    "ext_fields" / Prefixed(Int32ub, GreedyRange(ExtField)),
)


class Pair(Construct):  # type: ignore[misc]  # construct has no stubs: Construct is Any
    """Two unnamed fields, one after the other, as a ``(first, second)`` tuple.

    A ``Sequence`` without its per-item context (neither field can refer to the other),
    so that it compiles to one inline tuple expression: an ``Array`` of pairs then parses
    each item with no function call and no ``Container`` of its own (``Sequence``: both).
    """

    def __init__(self, first: Construct, second: Construct) -> None:
        super().__init__()
        self.first, self.second = first, second
        self.flagbuildnone = False

    def _parse(self, stream: Any, context: Any, path: str) -> tuple[Any, Any]:
        first = self.first._parsereport(stream, context, path)
        return first, self.second._parsereport(stream, context, path)

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> tuple[Any, Any]:
        a, b = obj
        return (
            self.first._build(a, stream, context, path),
            self.second._build(b, stream, context, path),
        )

    def _sizeof(self, context: Any, path: str) -> int:
        return int(self.first._sizeof(context, path) + self.second._sizeof(context, path))

    def _emitparse(self, code: Any) -> str:
        # a tuple display evaluates left to right: first is read before second
        return f"({self.first._compileparse(code)}, {self.second._compileparse(code)})"


# What the runtime parses: the fixed part, then exactly ``ext_count`` (key, value) pairs
# (``Pair``s: compiled inline, no objects per field beyond the two strings and a tuple).
# Only for a header whose lengths were validated and counted first (codec).
BinaryHeaderCounted = Struct(
    "code" / Int16sb,
    "language" / Int8ub,
    "version" / Int16sb,
    "opaque" / Int32sb,
    "flag" / Int32sb,
    "remark" / PascalString(Int32ub, "utf8"),
    "ext_length" / Int32ub,
    "ext_fields"
    / Array(
        this._params.ext_count, Pair(PascalString(Int16ub, "utf8"), PascalString(Int32ub, "utf8"))
    ),
)

# A frame after its 4-byte length prefix: the type/length word, header and body.
FramePayload = Struct(
    "serialize_type" / Int8ub,
    "header" / Prefixed(Int24ub, GreedyBytes),
    "body" / GreedyBytes,
)

# A whole frame: the outer length counts the type/length word, header and body.
Frame = Prefixed(Int32ub, FramePayload)


def _host(v6_bit: int) -> Struct:
    return Struct(
        "ip" / IfThenElse(this._.sys_flag & v6_bit, Bytes(16), Bytes(4)),
        "port" / Int32sb,
    )


# CommitLog record (MessageDecoder / CommitLog.MessageExtEncoder), magic V1.
MessageRecord = Struct(
    "total_size" / Int32sb,
    "magic" / Const(MESSAGE_MAGIC_CODE, Int32ub),
    "body_crc" / Int32sb,
    "queue_id" / Int32sb,
    "flag" / Int32sb,
    "queue_offset" / Int64sb,
    "physical_offset" / Int64sb,
    "sys_flag" / Int32sb,
    "born_timestamp" / Int64sb,
    "born_host" / _host(0x10),
    "store_timestamp" / Int64sb,
    "store_host" / _host(0x20),
    "reconsume_times" / Int32sb,
    "prepared_transaction_offset" / Int64sb,
    "body" / Prefixed(Int32ub, GreedyBytes),
    "topic" / PascalString(Int8ub, "utf8"),
    "properties" / PascalString(Int16ub, "utf8"),
)

# One item of a batch body (MessageDecoder.encodeMessage).
BatchItem = Struct(
    "total_size" / Int32sb,
    "magic" / Int32sb,
    "body_crc" / Int32sb,
    "flag" / Int32sb,
    "body" / Prefixed(Int32ub, GreedyBytes),
    "properties" / PascalString(Int16ub, "utf8"),
)

# ConsumeQueue unit: CQ_STORE_UNIT_SIZE = 20.
CqUnit = Struct(
    "phy_offset" / Int64sb,
    "size" / Int32sb,
    "tags_code" / Int64sb,
)
