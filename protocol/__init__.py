"""kairosmq.protocol: sans-IO codecs for the RocketMQ 4.x remoting protocol.

Bytes in, typed objects out; no sockets, asyncio or files (a test enforces it).
"""

from __future__ import annotations

from .codec import MAX_FRAME_LENGTH, FrameReader, decode_frame, encode_command
from .codes import LanguageCode, RequestCode, ResponseCode, SerializeType
from .commands import RemotingCommand, request
from .errors import FrameTooLarge, HeaderError, MalformedFrame, MessageDecodeError, ProtocolError
from .message import MessageExt, decode_record, decode_records, encode_record

__all__ = [
    "MAX_FRAME_LENGTH",
    "FrameReader",
    "FrameTooLarge",
    "HeaderError",
    "LanguageCode",
    "MalformedFrame",
    "MessageDecodeError",
    "MessageExt",
    "ProtocolError",
    "RemotingCommand",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "decode_frame",
    "decode_record",
    "decode_records",
    "encode_command",
    "encode_record",
    "request",
]
