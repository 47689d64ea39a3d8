"""Broker side of SQL92 property filtering (RocketMQ's ``enablePropertyFilter``).

Owns: deciding which filter a subscription needs (``selector_for``: TAG -> the tag-hash
path, SQL92 -> a compiled ``Selector`` from a bounded cache keyed by expression text,
so an expression is parsed once, not per pull or per message), CHECK_CLIENT_CONFIG's
verdict (``check_client_config``), and ``get_filtered``: a pull's read that evaluates the
selector over each record's properties.

Default on (``BrokerConfig.enable_property_filter = True``, ``--no-enable-property-filter``
turns it off as RocketMQ's ``enablePropertyFilter=false`` does): RocketMQ 4.9 ships it
off because its implementation computes a bloom-filter bitmap per message per SQL
consumer at dispatch (ConsumerFilterManager, consume-queue ext files). Here the filter
costs nothing unless a consumer subscribes with SQL92, and then only the records its
pulls read anyway (properties decoded, bodies skipped); off by default would only make
stock ``MessageSelector.bySql`` consumers fail at start.

Invariants:
* A record is delivered iff the selector evaluates to TRUE over its properties (user
  and system ones, so ``TAGS`` works); null or an evaluation error (RocketMQ: a failed
  number conversion) means "not delivered", never a failed pull.
* Skipped records advance ``next_begin_offset`` like delivered ones: a pull answers the
  matching records plus the offset after the last record it examined, or, when none
  matched, NO_MATCHED_MESSAGE with the offset after everything it scanned (at most
  ``SCAN_MAX`` units per pull, so one pull never holds the loop for long).
* Records are returned in queue order and byte-identical to the stored ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any  # Any: structlog's logger; decoded JSON of a filter body

import orjson
from kairosmq.protocol.bodies import SubscriptionData
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.message import record_properties
from kairosmq.protocol.sql92 import Selector, SelectorCache, SelectorSyntaxError

from .remoting.ingress import Rejected
from .store import GetResult, GetStatus

if TYPE_CHECKING:
    from .store.message_store import MessageStore

TAG = "TAG"
SQL92 = "SQL92"
SCAN_MAX = 4096  # units examined per filtered pull
_BATCH = 256  # units read per store.get while filtering
SELECTORS = SelectorCache(1024)


def is_tag_type(expression_type: str | None) -> bool:
    """Java ``ExpressionType.isTagType``: null, empty or TAG."""
    return not expression_type or expression_type.upper() == TAG


def sql_subscription(
    topic: str, expression: str, sub_version: int, expression_type: str = SQL92
) -> SubscriptionData:
    """A pull header's own non-TAG subscription (checked by ``selector_for``)."""
    return SubscriptionData(topic, expression, [], [], sub_version, expression_type)


def compile_for(enabled: bool, expression_type: str, expression: str) -> Selector:
    """The compiled selector, or ``Rejected``: SYSTEM_ERROR when property filtering is
    off (``enabled``: ``enable_property_filter``; RocketMQ's answer),
    SUBSCRIPTION_PARSE_FAILED with the position otherwise."""
    if not enabled:
        raise Rejected(
            ResponseCode.SYSTEM_ERROR,
            f"The broker does not support consumer to filter message by "
            f"{expression_type} (enable_property_filter is off)",
        )
    if expression_type.upper() != SQL92:
        raise Rejected(
            ResponseCode.SUBSCRIPTION_PARSE_FAILED,
            f"expression type {expression_type!r} is not supported (TAG or SQL92)",
        )
    try:
        return SELECTORS.get(expression)
    except SelectorSyntaxError as err:
        raise Rejected(ResponseCode.SUBSCRIPTION_PARSE_FAILED, err.remark) from None


def selector_for(enabled: bool, sub: SubscriptionData | None) -> Selector | None:
    """None for no subscription or a TAG one; else the SQL92 selector (or ``Rejected``)."""
    if sub is None or is_tag_type(sub.expression_type):
        return None
    return compile_for(enabled, sub.expression_type, sub.sub_string)


def try_compile(enabled: bool, log: Any, group: str, sub: SubscriptionData) -> None:
    """At heartbeat: warm the cache; log a subscription that will not compile (the
    heartbeat still registers it, as RocketMQ's ConsumerFilterManager does)."""
    if is_tag_type(sub.expression_type) or not enabled:
        return
    try:
        compile_for(enabled, sub.expression_type, sub.sub_string)
    except Rejected as err:
        log.warning(
            "filter.compile_failed",
            group=group,
            topic=sub.topic,
            expression=sub.sub_string[:512],
            remark=err.remark,
        )


def check_client_config(enabled: bool, body: bytes | None) -> None:
    """CHECK_CLIENT_CONFIG (46): TAG subscriptions pass; SQL92 ones must compile.
    Raises ``Rejected`` (or ``ValueError`` for a malformed body)."""
    if not body:
        return
    try:
        data: Any = orjson.loads(body)
    except orjson.JSONDecodeError as err:
        raise ValueError(f"check client config body is not JSON: {err}") from err
    if not isinstance(data, dict):
        raise ValueError("check client config body is not a JSON object")
    raw = data.get("subscriptionData")
    if raw is None:
        return
    if not isinstance(raw, dict):
        raise ValueError("subscriptionData is not an object")
    expression_type = raw.get("expressionType")
    if is_tag_type(None if expression_type is None else str(expression_type)):
        return
    expression = raw.get("subString")
    compile_for(enabled, str(expression_type), expression if isinstance(expression, str) else "")


def get_filtered(
    store: MessageStore,
    topic: str,
    queue_id: int,
    offset: int,
    max_count: int,
    max_bytes: int,
    selector: Selector,
) -> GetResult:
    """``store.get`` with ``selector`` evaluated over each record's properties."""
    pos = offset
    scanned = 0
    while True:
        res = store.get(topic, queue_id, pos, max(max_count, _BATCH), max_bytes=max_bytes)
        if res.status is GetStatus.FOUND:
            body = res.chunks[0] if len(res.chunks) == 1 else b"".join(res.chunks)
            view = memoryview(body)
            kept: list[int] = []
            at = 0
            for i, unit in enumerate(res.units):
                if selector.matches(record_properties(view, at)):
                    kept.append(i)
                    if len(kept) >= max_count:
                        break
                at += unit[1]
            if kept:
                return _result(res, view, kept, max_count)
        elif res.next_begin_offset <= pos or res.status not in (
            GetStatus.NO_MATCHED_MESSAGE,
            GetStatus.OFFSET_FOUND_NULL,
        ):
            if pos == offset:
                return res  # nothing examined: the store's own answer (overflow, moved, ...)
            return GetResult(GetStatus.NO_MATCHED_MESSAGE, pos, res.min_offset, res.max_offset)
        scanned += res.next_begin_offset - pos
        pos = res.next_begin_offset
        if scanned >= SCAN_MAX or pos >= res.max_offset:
            return GetResult(GetStatus.NO_MATCHED_MESSAGE, pos, res.min_offset, res.max_offset)


def _result(res: GetResult, view: memoryview, kept: list[int], max_count: int) -> GetResult:
    starts = [0]
    for unit in res.units:
        starts.append(starts[-1] + unit[1])
    out = GetResult(GetStatus.FOUND, res.next_begin_offset, res.min_offset, res.max_offset)
    out.chunks = [b"".join(view[starts[i] : starts[i + 1]] for i in kept)]
    out.units = [res.units[i] for i in kept]
    out.queue_offsets = [res.queue_offsets[i] for i in kept]
    if len(kept) >= max_count:  # stopped early: continue after the last one delivered
        out.next_begin_offset = out.queue_offsets[-1] + 1
    return out
