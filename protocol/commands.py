"""RemotingCommand: the one typed object every frame decodes to and encodes from.

Owns: the command value (code, opaque, flag, language, version, remark, ext fields,
body, serialize type) and the helpers that build requests and the matching responses.

Invariants:
* ``code`` is a plain int (see ``codes``); ``ext_fields`` maps str to str. Incoming
  JSON numbers/booleans are coerced to strings by the codec, so handlers see one type.
* A response echoes the request's opaque and serialize type (RocketMQ's server copies
  ``serializeTypeCurrentRPC``), so C++ and Node clients, which read only JSON, get JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .codes import (
    BROKER_VERSION,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    LanguageCode,
    ResponseCode,
    SerializeType,
)


@dataclass(slots=True)
class RemotingCommand:
    """One request or response. Treat as immutable (not frozen only for speed: a frozen
    dataclass pays ``object.__setattr__`` per field on every construction)."""

    code: int
    opaque: int = 0
    flag: int = 0
    language: LanguageCode = LanguageCode.JAVA
    version: int = BROKER_VERSION
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def response(
        self,
        code: int = ResponseCode.SUCCESS,
        *,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """Build the response to this request (same opaque and serialize type)."""
        return RemotingCommand(
            code=int(code),
            opaque=self.opaque,
            flag=FLAG_RESPONSE,
            language=LanguageCode.JAVA,
            version=BROKER_VERSION,
            remark=remark,
            ext_fields=ext_fields if ext_fields is not None else {},
            body=body,
            serialize_type=self.serialize_type,
        )

    def error(self, code: int, remark: str) -> RemotingCommand:
        """Shorthand for an error response with a remark."""
        return self.response(code, remark=remark)


def request(
    code: int,
    ext_fields: dict[str, str] | None = None,
    body: bytes = b"",
    *,
    opaque: int = 0,
    oneway: bool = False,
    language: LanguageCode = LanguageCode.PYTHON,
    serialize_type: SerializeType = SerializeType.JSON,
) -> RemotingCommand:
    """Build a request command."""
    return RemotingCommand(
        code=int(code),
        opaque=opaque,
        flag=FLAG_ONEWAY if oneway else 0,
        language=language,
        version=BROKER_VERSION,
        ext_fields=ext_fields if ext_fields is not None else {},
        body=body,
        serialize_type=serialize_type,
    )
