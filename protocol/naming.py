"""Naming rules for topics and groups: the one place client and server read them.

Owns: the topic and group character rules (RocketMQ 4.9 ``TopicValidator`` and
``Validators.checkGroup``: ``[%|a-zA-Z0-9_-]``, topic 1..127 characters, group 1..255),
the derived topic names (``%RETRY%<group>``, ``%DLQ%<group>``), the system topic names
(``TBW102``, ``SCHEDULE_TOPIC_XXXX``, ``RMQ_SYS_*``, the trace topic) and their predicates,
the request-reply topic ``<cluster>_REPLY_TOPIC``, and the wider rule for a name a broker
registers with a name server (``validate_registered_name``: cluster, broker and topic names
in the route tables).

Invariants:
* ``validate_topic``/``validate_group`` return ``None`` for a valid name, else a reason fit
  for a response remark (it names the bad value as ``errors.shown`` quotes it).
* Matching is ``fullmatch``: ``re.match`` with ``$`` would accept a trailing ``"\\n"``.
* A valid name contains no ``/``, ``.``, NUL or whitespace, so it is safe as one
  file-name component (consume-queue directories are named after topics).
* A group is also at most ``MAX_GROUP_LENGTH`` characters *and* short enough that its
  retry topic ``%RETRY%<group>`` fits one file name (255 bytes, Linux ``NAME_MAX``):
  RocketMQ allows 255-character groups, but a retry or DLQ topic of 262 characters
  would be a directory name the file system refuses after the message was appended.
  So the effective group limit is 248 characters (``MAX_GROUP_LENGTH_WITH_RETRY``).
"""

from __future__ import annotations

import re

from .errors import shown

RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
AUTO_CREATE_TOPIC_KEY = "TBW102"
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
SYSTEM_TOPIC_PREFIX = "RMQ_SYS_"
TIMER_TOPIC = "rmq_sys_wheel_timer"  # RocketMQ 5's TimerMessageStore.TIMER_TOPIC
# message trace (RocketMQ TopicValidator.RMQ_SYS_TRACE_TOPIC): a system topic clients may
# send to when the broker's trace_topic_enable is on (it is then in the topic table)
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
REPLY_TOPIC_POSTFIX = "REPLY_TOPIC"  # MixAll.REPLY_TOPIC_POSTFIX

MAX_TOPIC_LENGTH = 127
MAX_GROUP_LENGTH = 255
MAX_FILE_NAME = 255
MAX_GROUP_LENGTH_WITH_RETRY = MAX_FILE_NAME - len(RETRY_GROUP_TOPIC_PREFIX)
CHARSET = "[%|a-zA-Z0-9_-]"
_VALID = re.compile(r"[%|a-zA-Z0-9_-]+")
MAX_REGISTERED_NAME = 255
_REGISTERED = re.compile(r"[!-~]{1,255}")  # printable ASCII, no spaces


def _validate(kind: str, name: object, limit: int) -> str | None:
    if not isinstance(name, str):
        return f"the {kind} must be a string, got {shown(name)}"
    if not name or not name.strip():
        return f"the {kind} is blank"
    if len(name) > limit:
        return f"the {kind} {shown(name)} is {len(name)} characters, the limit is {limit}"
    if _VALID.fullmatch(name) is None:
        return f"the {kind} {shown(name)} contains characters outside {CHARSET}"
    return None


def validate_topic(name: object) -> str | None:
    """None if ``name`` is a valid topic name, else the reason."""
    return _validate("topic", name, MAX_TOPIC_LENGTH)


def validate_group(name: object) -> str | None:
    """None if ``name`` is a valid (producer or consumer) group name, else the reason."""
    bad = _validate("group", name, MAX_GROUP_LENGTH)
    if bad is None and isinstance(name, str) and len(name) > MAX_GROUP_LENGTH_WITH_RETRY:
        return (
            f"the group {shown(name)} is {len(name)} characters: its retry topic "
            f"{RETRY_GROUP_TOPIC_PREFIX}<group> must fit a {MAX_FILE_NAME}-byte file "
            f"name, so the limit is {MAX_GROUP_LENGTH_WITH_RETRY}"
        )
    return bad


def validate_queue_topic(name: object) -> str | None:
    """None if ``name`` may name a queue a consumer reads: a valid topic, or
    ``%RETRY%``/``%DLQ%`` followed by a valid group (those may exceed 127 characters, as
    RocketMQ creates them without the topic length check)."""
    bad = validate_topic(name)
    if bad is None or not isinstance(name, str):
        return bad
    group = group_of_retry_topic(name)
    if group is None:
        group = group_of_dlq_topic(name)
    if group is not None and validate_group(group) is None:
        return None
    return bad


def validate_registered_name(name: str, field: str) -> str | None:
    """None if ``name`` may stand in a name server's route tables (``field``: clusterName,
    brokerName, a registered topicName, the topic to delete), else the reason.

    Wider than ``validate_topic`` on purpose: a RocketMQ 4.9 broker registers a topic named
    after its cluster and one after its broker name (TopicConfigManager), neither checked by
    TopicValidator (the default broker name is the host name, dots and all), and Apache's
    name server keeps whatever is registered. Refused is only what the route tables'
    encodings cannot carry: spaces (``TopicConfig.encode``, the compressed register body,
    splits on them), control and non-ASCII characters, and more than
    ``MAX_REGISTERED_NAME`` characters."""
    if _REGISTERED.fullmatch(name):
        return None
    return (
        f"{field} {shown(name)} must be 1..{MAX_REGISTERED_NAME} printable characters "
        "without spaces"
    )


def retry_topic(group: str) -> str:
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_GROUP_TOPIC_PREFIX + group


def is_retry_topic(topic: str) -> bool:
    return topic.startswith(RETRY_GROUP_TOPIC_PREFIX)


def is_dlq_topic(topic: str) -> bool:
    return topic.startswith(DLQ_GROUP_TOPIC_PREFIX)


def group_of_retry_topic(topic: str) -> str | None:
    """The group of ``%RETRY%<group>``, or None when ``topic`` is not a retry topic."""
    if not topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return None
    return topic[len(RETRY_GROUP_TOPIC_PREFIX) :]


def group_of_dlq_topic(topic: str) -> str | None:
    """The group of ``%DLQ%<group>``, or None when ``topic`` is not a DLQ topic."""
    if not topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
        return None
    return topic[len(DLQ_GROUP_TOPIC_PREFIX) :]


def reply_topic(cluster: str) -> str:
    """The topic replies of ``cluster`` are sent to (MixAll.getReplyTopic)."""
    return f"{cluster}_{REPLY_TOPIC_POSTFIX}"


def is_system_topic(topic: str) -> bool:
    """Topics clients may neither send to nor create, change or delete."""
    return (
        topic == SCHEDULE_TOPIC
        or topic == AUTO_CREATE_TOPIC_KEY
        or topic.startswith(SYSTEM_TOPIC_PREFIX)
        or topic == TIMER_TOPIC
    )
