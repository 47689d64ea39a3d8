"""MessageSelector: how a consumer subscription filters (RocketMQ's ``MessageSelector``).

Owns: the two selector kinds a subscription can carry - ``MessageSelector.tag("A || B")``
(the tag-hash filter, also what a plain string means to ``PushConsumer.subscribe``) and
``MessageSelector.sql("a > 5 AND region = 'eu'")`` (SQL92 over message properties,
evaluated by the broker) -, ``tag_filter`` (the client-side tag re-check a TAG
subscription applies to pulled messages after the broker's hash filter, as Java's
``PullAPIWrapper.processPullResult``) and ``check_body``, the CHECK_CLIENT_CONFIG body a
consumer sends for an SQL92 subscription before it starts (Java ``checkClientInBroker``).

Invariants: the expression is sent as written (a TAG expression stripped, empty -> ``*``);
an SQL92 expression is not compiled here - the broker is the authority and answers a
bad one with SUBSCRIPTION_PARSE_FAILED and the position, which ``start()`` raises.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import orjson
from kairosmq.protocol.bodies import SubscriptionData, parse_tag_expression
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.message import MessageExt
from kairosmq.protocol.properties import TAGS

from ..errors import BrokerError, ConnectionClosed, RequestTimeout
from .pull import Subscription

log = logging.getLogger("kairosmq.client.selector")
Invoke = Callable[..., Awaitable[RemotingCommand]]

TAG = "TAG"
SQL92 = "SQL92"


@dataclass(frozen=True, slots=True)
class MessageSelector:
    expression_type: str
    expression: str

    @classmethod
    def tag(cls, expression: str = "*") -> MessageSelector:
        """Tags ``"TagA || TagB"``; ``"*"`` (or empty) selects every message."""
        return cls(TAG, expression.strip() or "*")

    @classmethod
    def sql(cls, expression: str) -> MessageSelector:
        """RocketMQ SQL92 over message properties (``TAGS`` is one of them)."""
        if not expression.strip():
            raise ValueError("an SQL92 selector needs an expression")
        return cls(SQL92, expression)

    # RocketMQ's Java names
    by_tag = tag
    by_sql = sql

    @property
    def is_tag(self) -> bool:
        return self.expression_type == TAG

    def subscription_data(self, topic: str, sub_version: int) -> SubscriptionData:
        if self.is_tag:
            return SubscriptionData.build(topic, self.expression, sub_version)
        return SubscriptionData(topic, self.expression, [], [], sub_version, self.expression_type)


def tag_filter(expression: str | None) -> Callable[[MessageExt], bool] | None:
    """A predicate keeping messages whose TAGS is in ``expression``; None means keep all."""
    tags, _codes = parse_tag_expression(expression)
    if not tags:
        return None
    wanted = frozenset(tags)

    def keep(msg: MessageExt) -> bool:
        return msg.properties.get(TAGS) in wanted

    return keep


def check_body(client_id: str, group: str, sub: SubscriptionData) -> bytes:
    """CHECK_CLIENT_CONFIG (46) body: Java ``CheckClientRequestBody``."""
    return orjson.dumps({"clientId": client_id, "group": group, "subscriptionData": sub.to_dict()})


async def check_in_brokers(
    invoke: Invoke,
    addrs: Iterable[str],
    client_id: str,
    group: str,
    subs: Iterable[Subscription],
    timeout: float,
) -> None:
    """Ask every broker to compile each SQL92 subscription (CHECK_CLIENT_CONFIG); raise
    the broker's refusal (``BrokerError``: SubscriptionError with the position, or
    BrokerSystemError when its property filter is off). An unreachable broker is skipped:
    its pulls will answer the same refusal."""
    for s in subs:
        if s.expression_type == TAG:
            continue
        sub = MessageSelector(s.expression_type, s.expression).subscription_data(
            s.topic, s.sub_version
        )
        body = check_body(client_id, group, sub)
        for addr in sorted(addrs):
            try:
                resp = await invoke(
                    addr, RequestCode.CHECK_CLIENT_CONFIG, None, body, timeout=timeout
                )
            except (ConnectionClosed, RequestTimeout) as err:
                log.warning("check client config at %s failed: %s", addr, err)
                continue
            if resp.code != ResponseCode.SUCCESS:
                raise BrokerError.for_code(resp.code, resp.remark, addr)
