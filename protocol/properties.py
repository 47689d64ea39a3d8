"""Message properties string codec and the property names RocketMQ defines.

Owns: ``name \\x01 value \\x02 ...`` encoding (MessageDecoder.messageProperties2String)
of a dict (``encode_properties``) or of ordered pairs (``encode_property_pairs``, what the
bundled client's ``wire_properties`` writes), its tolerant decoder, the
``MessageConst`` key names, ``parse_decimal`` (the one rule for a number read back
from a property value: a queue id, a due instant, a stored offset) with
``parse_decimal_pair`` (two of them joined by ``:``), and ``parse_java_int`` (a signed
int32 as Java parses it).

Invariants: decoding accepts a trailing ``\\x02`` or none (Java omits it, C++ and Node add
it) and skips pairs with an empty name or value (a name given twice: the last value
wins); encoding never writes a trailing separator and never writes a pair with an empty
name or value. Encoded strings over 32767 UTF-8 bytes are the caller's to reject
(MESSAGE_ILLEGAL), because the record stores an int16 length.

This module is the reference core; the string codec's native twin ``_properties.pyx``
replaces ``encode_properties``, ``encode_property_pairs`` and ``decode_properties`` when
``native.py`` chooses it (``reference`` keeps the pure ones; tests/protocol/
test_native_properties.py holds the twin to them).
"""

from __future__ import annotations

from collections.abc import Iterable
from types import ModuleType, SimpleNamespace

from . import native

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"
MAX_PROPERTIES_BYTES = 32767

TAGS = "TAGS"
KEYS = "KEYS"
WAIT = "WAIT"
DELAY = "DELAY"
REAL_TOPIC = "REAL_TOPIC"
REAL_QID = "REAL_QID"
UNIQ_KEY = "UNIQ_KEY"
RETRY_TOPIC = "RETRY_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
RECONSUME_TIME = "RECONSUME_TIME"
MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
TRAN_MSG = "TRAN_MSG"
PGROUP = "PGROUP"
MIN_OFFSET = "MIN_OFFSET"
MAX_OFFSET = "MAX_OFFSET"
CONSUME_START_TIME = "CONSUME_START_TIME"
CLUSTER = "CLUSTER"
# request-reply (RocketMQ MessageConst; client/producer/request.py, server/handlers/reply.py)
CORRELATION_ID = "CORRELATION_ID"
REPLY_TO_CLIENT = "REPLY_TO_CLIENT"
MESSAGE_TTL = "TTL"
MESSAGE_TYPE = "MSG_TYPE"
REPLY_MESSAGE_FLAG = "reply"  # MESSAGE_TYPE of a reply (MixAll.REPLY_MESSAGE_FLAG)
PUSH_REPLY_TIME = "PUSH_REPLY_TIME"
REPLY_MESSAGE_ARRIVE_TIME = "ARRIVE_TIME"
# kairosmq: where a re-put record came from (level and schedule-queue offset), so the
# scheduler's progress is derived from the commit log (exactly-once transfer).
SCHEDULE_ORIGIN = "KAIROS_SCHEDULE_ORIGIN"
# kairosmq: the due time (ms) a delayed message was scheduled for, carried on re-put.
DELIVER_TIME = "KAIROS_DELIVER_MS"
# kairosmq timers (server/schedule/timer/): a fired copy names its timer record
# (``due:phy``), so the fired cursor is derived from the commit log; a recall record names
# its target and kind.
TIMER_ORIGIN = "KAIROS_TIMER_ORIGIN"
RECALL_TARGET = "KAIROS_RECALL_TARGET"
RECALL_KIND = "KAIROS_RECALL_KIND"  # "timer" (default) or "level"
# on a timer record an operator rescheduled from another: "<due>:<phy>" of the record it
# replaces (a timer, or a schedule record with RECALL_KIND "level"); one append moves it
RESCHEDULE_OF = "KAIROS_RESCHEDULE_OF"
# RocketMQ 5 timer messages (and the ONS/aliyun ``__STARTDELIVERTIME``): a due instant
# (protocol/timer.py reads them; server/schedule/timer/ keeps them until due).
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
TIMER_DELAY_MS = "TIMER_DELAY_MS"
START_DELIVER_TIME = "__STARTDELIVERTIME"
TIMER_PROPERTIES = (TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS, START_DELIVER_TIME)
# What a message asks of the scheduler: a delay level or a due instant.
SCHEDULING_PROPERTIES = (DELAY, *TIMER_PROPERTIES)
# Properties only the broker writes: a client's copy is dropped on ingress
# (``server/remoting/ingress.py``); every ``KAIROS_*`` name is the broker's.
BROKER_PROPERTY_PREFIX = "KAIROS_"
BROKER_INTERNAL_PROPERTIES = (REAL_TOPIC, REAL_QID)


INT32_DIGITS = 9  # decimal digits that always fit a Java int (queue ids, counts)
INT64_DIGITS = 18  # ... a Java long (offsets, epoch milliseconds)


def parse_decimal(raw: str | None, max_digits: int) -> int | None:
    """``raw`` as a non-negative int when it is 1..``max_digits`` ASCII digits, else None.

    Properties are client text (or the broker's own, read back after a crash): a value
    that is not a short decimal is never trusted as a number. ``INT32_DIGITS`` /
    ``INT64_DIGITS`` bound it to what a Java int / long holds."""
    if raw and len(raw) <= max_digits and raw.isascii() and raw.isdigit():
        return int(raw)
    return None


def parse_decimal_pair(
    raw: str | None, first_digits: int, second_digits: int
) -> tuple[int, int] | None:
    """``"<a>:<b>"`` (the broker's own pairs: a re-put's origin, a recall target, a
    committed copy's half message) as two ints, each side by ``parse_decimal`` with its
    bound, else None."""
    if not raw:
        return None
    a, sep, b = raw.partition(":")
    first, second = parse_decimal(a, first_digits), parse_decimal(b, second_digits)
    if not sep or first is None or second is None:
        return None
    return first, second


def parse_java_int(raw: str | None) -> int | None:
    """``raw`` as Java's ``Integer.parseInt`` reads it (an optional sign, ASCII digits,
    within int32), else None: a signed count a client wrote (``MAX_RECONSUME_TIMES`` may be
    ``Integer.MAX_VALUE``, ten digits, or -1)."""
    if not raw or len(raw) > 11:
        return None
    digits = raw[1:] if raw[0] in "+-" else raw
    if not (digits and digits.isascii() and digits.isdigit()):
        return None
    value = int(raw)
    return value if -(1 << 31) <= value < 1 << 31 else None


def encode_properties(props: dict[str, str]) -> str:
    """Encode properties; pairs with an empty name or value are left out."""
    return _encode_property_pairs(props.items())


def encode_property_pairs(pairs: Iterable[tuple[str, str]]) -> str:
    """Encode ``(name, value)`` pairs in their order; pairs with an empty name or value are
    left out. A name may come twice (the decoder keeps the last value)."""
    return PROPERTY_SEPARATOR.join(
        f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in pairs if k and v != ""
    )


_encode_property_pairs = encode_property_pairs  # the reference's own (see the end)


def decode_properties(text: str) -> dict[str, str]:
    """Decode a properties string; tolerant of a trailing separator and junk pairs."""
    out: dict[str, str] = {}
    if not text:
        return out
    for pair in text.split(PROPERTY_SEPARATOR):
        name, sep, value = pair.partition(NAME_VALUE_SEPARATOR)
        if sep and name and value:
            out[name] = value
    return out


# ------------------------------------------------------------------ the native twin

# The pure functions above are the reference (parity tests hold the twin to them); the
# codec's public names become the twin's (``_properties.pyx``) when protocol/native.py
# chooses it.
reference = SimpleNamespace(
    encode_properties=encode_properties,
    encode_property_pairs=encode_property_pairs,
    decode_properties=decode_properties,
)


def _load_twin() -> ModuleType:
    from . import _properties  # type: ignore[attr-defined]

    twin: ModuleType = _properties  # the compiled module, untyped to mypy
    return twin


_twin = native.twin(__name__, _load_twin)
if _twin is not None:
    encode_properties = _twin.encode_properties
    encode_property_pairs = _twin.encode_property_pairs
    decode_properties = _twin.decode_properties
