"""Consumer retry policy: where a message a consumer gave up on goes next (pure).

Owns: ``plan_send_back`` — RocketMQ's rule from ``AbstractSendMessageProcessor``:
``reconsumeTimes >= maxReconsumeTimes`` or a negative requested level sends it to
``%DLQ%<group>``; otherwise it goes to ``%RETRY%<group>`` with the requested level, or
``3 + reconsumeTimes`` when the client passes 0 (10 s, 30 s, 1 m, ... with the default
levels), and ``reconsumeTimes + 1``.

Invariant: the plan depends only on its arguments (no clock, no I/O), so it is tested
on its own and shared by CONSUMER_SEND_MSG_BACK and the send path's %RETRY% check. The
send path (RocketMQ's ``handleRetryAndDLQ``) calls ``plan_send_back(group,
reconsumeTimes, 0, maxReconsumeTimes)`` and uses only ``dead_letter`` and ``topic``: a
message sent to ``%RETRY%<group>`` keeps the sender's reconsumeTimes and delay.
"""

from __future__ import annotations

from dataclasses import dataclass

from kairosmq.protocol.naming import dlq_topic, retry_topic


@dataclass(frozen=True, slots=True)
class SendBackPlan:
    topic: str
    delay_level: int
    reconsume_times: int
    dead_letter: bool


def plan_send_back(
    group: str, reconsume_times: int, requested_level: int, max_reconsume_times: int
) -> SendBackPlan:
    """Plan the next hop of a message consumed ``reconsume_times`` times already."""
    if reconsume_times >= max_reconsume_times or requested_level < 0:
        return SendBackPlan(dlq_topic(group), 0, reconsume_times + 1, True)
    level = requested_level if requested_level > 0 else 3 + reconsume_times
    return SendBackPlan(retry_topic(group), level, reconsume_times + 1, False)
