"""Timer messages (RocketMQ 5.x properties over the 4.x protocol) and recall handles.

Owns: the rule that turns a send's timer properties into a due instant
(``resolve_timer``), the names the broker writes on a timer record (``TIMER_TOPIC``,
``TIMER_OUT_MS``) and the recall handle codec (RocketMQ 5.3's ``RecallMessageHandle``
v1: base64url of ``v1 <topic> <brokerName> <deliverMs> <uniqKey>``). Sans-IO: shared by
the broker (validation, the send response's ``recallHandle``, RECALL_MESSAGE) and the
bundled client (building properties, reading handles).

Invariants (RocketMQ's ``HookUtils.transformTimerMessage`` where it is sound):
* Precedence ``TIMER_DELAY_SEC`` > ``TIMER_DELAY_MS`` > ``TIMER_DELIVER_MS`` >
  ``__STARTDELIVERTIME`` (Aliyun ONS / ali-ons, absolute epoch ms). A message that also
  has a delay level keeps the level and loses its timer properties (the caller's rule,
  as RocketMQ's ``checkIfTimerMessage``).
* A value must be a Java ``long`` (``Long.parseLong``: optional sign, digits). Unlike
  RocketMQ, a negative relative delay is refused (MESSAGE_ILLEGAL) instead of silently
  delivered at once: it is a client bug, not a schedule.
* A due instant at or before now means "deliver now" (``None``), as RocketMQ does; one
  more than ``max_delay_ms`` ahead is refused with RocketMQ's remark.
* Never early: a relative delay counts from the put instant, which lies in
  ``[now_ms, now_ms + 1)`` for a truncated wall clock, so the broker passes
  ``round_up_ms=1``. There is no precision rounding (RocketMQ floors to
  ``timerPrecisionMs``, 1 s by default, which delivers up to a second early).
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

from .errors import shown
from .properties import START_DELIVER_TIME, TIMER_DELAY_MS, TIMER_DELAY_SEC, TIMER_DELIVER_MS

TIMER_OUT_MS = "TIMER_OUT_MS"  # on the stored timer record: its due instant (epoch ms)
DEFAULT_TIMER_MAX_DELAY_MS = 40 * 86_400_000  # 40 days (RocketMQ 5: 3 days, ONS: 40 days)
RECALL_HANDLE_VERSION = "v1"

_JAVA_LONG = re.compile(r"[+-]?[0-9]{1,19}", re.ASCII)
_INT64_MAX = 2**63 - 1


class TimerIllegal(ValueError):
    """A timer property that cannot be scheduled: answer MESSAGE_ILLEGAL with ``str(err)``."""


class RecallHandleInvalid(ValueError):
    """A recall handle that does not decode: answer ILLEGAL_OPERATION with ``str(err)``."""


def _java_long(name: str, value: str) -> int:
    if not _JAVA_LONG.fullmatch(value):
        raise TimerIllegal(
            f"timer message illegal: property {name}={shown(value, 40)} is not a long integer"
        )
    n = int(value)
    if not -_INT64_MAX - 1 <= n <= _INT64_MAX:
        raise TimerIllegal(
            f"timer message illegal: property {name}={shown(value, 40)} does not fit a 64-bit long"
        )
    return n


def has_timer(props: dict[str, str]) -> bool:
    """True if any timer property is present (before validation)."""
    return (
        TIMER_DELAY_SEC in props
        or TIMER_DELAY_MS in props
        or TIMER_DELIVER_MS in props
        or START_DELIVER_TIME in props
    )


def resolve_timer(
    props: dict[str, str], now_ms: int, max_delay_ms: int, *, round_up_ms: int = 0
) -> int | None:
    """The due instant (epoch ms, > now_ms) of a timer send, or None to deliver now.

    ``None`` too when no timer property is present. Raises ``TimerIllegal``.
    """
    if TIMER_DELAY_SEC in props:
        delay = _java_long(TIMER_DELAY_SEC, props[TIMER_DELAY_SEC])
        if delay < 0:
            raise TimerIllegal(f"timer message illegal: {TIMER_DELAY_SEC}={delay} is negative")
        due = now_ms + delay * 1000 + round_up_ms if delay else now_ms
    elif TIMER_DELAY_MS in props:
        delay = _java_long(TIMER_DELAY_MS, props[TIMER_DELAY_MS])
        if delay < 0:
            raise TimerIllegal(f"timer message illegal: {TIMER_DELAY_MS}={delay} is negative")
        due = now_ms + delay + round_up_ms if delay else now_ms
    elif TIMER_DELIVER_MS in props:
        due = _java_long(TIMER_DELIVER_MS, props[TIMER_DELIVER_MS])
    elif START_DELIVER_TIME in props:
        due = _java_long(START_DELIVER_TIME, props[START_DELIVER_TIME])
    else:
        return None
    if due <= now_ms:
        return None
    if due - now_ms > max_delay_ms:
        raise TimerIllegal(
            f"timer message illegal, the delay time should not be bigger than "
            f"the max delay {max_delay_ms}ms"
        )
    return due


@dataclass(frozen=True, slots=True)
class RecallHandle:
    """What a recall handle names: one message of ``topic`` on ``broker_name``."""

    topic: str
    broker_name: str
    deliver_ms: int  # -1 when the handle's timestamp is not a number (Java's toLong)
    uniq_key: str

    def encode(self) -> str:
        return encode_recall_handle(self.topic, self.broker_name, self.deliver_ms, self.uniq_key)


_URLSAFE = bytes.maketrans(b"+/", b"-_")


def encode_recall_handle(topic: str, broker_name: str, deliver_ms: int, uniq_key: str) -> str:
    """A recall handle's text (RocketMQ's ``RecallMessageHandle.HandleV1.buildHandle``:
    base64url of ``v1 topic brokerName timestamp uniqKey``, padded)."""
    raw = f"{RECALL_HANDLE_VERSION} {topic} {broker_name} {deliver_ms} {uniq_key}".encode()
    return binascii.b2a_base64(raw, newline=False).translate(_URLSAFE).decode("ascii")


def decode_recall_handle(handle: str) -> RecallHandle:
    """Decode as RocketMQ's ``RecallMessageHandle.decodeHandle`` (padding optional)."""
    if not handle:
        raise RecallHandleInvalid("recall handle is invalid")
    try:
        data = handle.encode("ascii")
        raw = base64.urlsafe_b64decode(data + b"=" * (-len(data) % 4)).decode("utf-8")
    except (UnicodeError, binascii.Error, ValueError):
        raise RecallHandleInvalid("recall handle is invalid") from None
    items = raw.split(" ")
    while items and items[-1] == "":  # Java's split drops trailing empty strings
        items.pop()
    if len(items) < 5 or items[0] != RECALL_HANDLE_VERSION:
        raise RecallHandleInvalid("recall handle is invalid")
    try:
        ts = int(items[3]) if _JAVA_LONG.fullmatch(items[3]) else -1
    except ValueError:
        ts = -1
    if not -_INT64_MAX - 1 <= ts <= _INT64_MAX:
        ts = -1
    return RecallHandle(items[1], items[2], ts, items[4])
