"""Errors the sans-IO protocol layer raises, each saying what to do on the wire.

``ProtocolError`` is abstract: the subclasses tell the transport whether the connection
can continue. ``FrameTooLarge`` and ``MalformedFrame`` mean the byte stream can no longer
be trusted: close that connection (RocketMQ's NettyDecoder does the same).
``HeaderError`` means one request's header fields are missing or ill-typed: answer that
request with ``response_code`` and the message as remark, and keep the connection.

Also owns ``shown``: the one way a value (a client's, most often) is quoted in a remark or an
error message, ``repr``'d and cut after a limit, so a remark stays short whatever the value.
"""

from __future__ import annotations

from .codes import ResponseCode


class ProtocolError(Exception):
    """Base class; never raised itself."""

    close_connection: bool = True
    response_code: ResponseCode = ResponseCode.SYSTEM_ERROR

    def __init__(self, message: str) -> None:
        if type(self) is ProtocolError:
            raise TypeError("ProtocolError is abstract; raise a subclass")
        super().__init__(message)


def shown(value: object, limit: int = 64) -> str:
    """``repr`` of ``value`` for a remark or an error message, cut after ``limit``
    characters; a cut one ends in ``...(N chars)``, N the length of the value."""
    text = repr(value)
    if len(text) > limit:
        size = len(value) if isinstance(value, str | bytes) else len(text)
        text = text[:limit] + f"...({size} chars)"
    return text


class FrameTooLarge(ProtocolError):
    """A frame declared a length above the configured maximum (checked before buffering)."""

    def __init__(self, length: int, limit: int) -> None:
        super().__init__(f"frame length {length} exceeds the maximum {limit}")
        self.length = length
        self.limit = limit


class MalformedFrame(ProtocolError):
    """The frame's bytes do not follow the remoting layout (bad lengths, header or JSON)."""


class HeaderError(ProtocolError):
    """A request header lacks a required field or has one of the wrong type."""

    close_connection = False

    def __init__(
        self, message: str, response_code: ResponseCode = ResponseCode.SYSTEM_ERROR
    ) -> None:
        super().__init__(message)
        self.response_code = response_code


class MessageDecodeError(ProtocolError):
    """A stored or transferred message record (or batch item) is truncated or corrupt."""

    close_connection = False
    response_code = ResponseCode.MESSAGE_ILLEGAL
