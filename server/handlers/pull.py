"""PULL_MESSAGE (11): serve a queue's messages, holding the request while none are new.

Owns: ``PullMessageProcessor`` (services: store reads, topic table, consumer offsets,
the client registry's subscriptions, the arrival notifier and pull holds, stats, logs,
config values, and whether the broker is running): subscription resolution (the
request's own, else the group's from heartbeats; a TAG expression a request carries is
parsed once and kept in a bounded table),
the server-side tag-hash filter (SQL92 subscriptions: ``property_filter``), the
COMMIT_OFFSET side effect, the store-status to response-code table of the reference
(§9.2), long polling, and ``message.pulled`` logs.

Invariants:
* A held pull is answered when a message lands in its queue, when its suspend timeout
  (capped at ``max_pull_hold_ms``, well under the client's 30 s) passes, or when the
  broker stops - never left unanswered, and it never blocks other requests on the
  connection (it runs as its own task).
* ``suggestWhichBrokerId`` is RocketMQ 4.9.8's: 0 (the master) unless
  ``slave_read_enable``; then the group's ``whichBrokerWhenConsumeSlowly`` when the last
  message served lies further from the commit log's end than
  ``access_message_in_memory_max_ratio`` % of the physical memory (RocketMQ's
  isSuggestPullingFromSlave), else the group's ``brokerId``. A master and a slave answer
  alike (an Apache slave also serves pulls with slaveReadEnable off).
* The pull body is the stored record bytes concatenated, copied from the commit log
  without decoding (one read per contiguous run of records).
* ``handle_pull``, ``_answer`` and ``_hold`` are the reference; their native twin
  (``_pull.pyx``, chosen by ``protocol/native.py``) makes the common pull (a
  request-carried TAG or ``*`` subscription already parsed, a FOUND answer from the
  master, a hold and its wake) in one C function each and calls the methods here for
  everything else.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING, Any  # Any: structlog's loggers; handler answers (see Handler)

from kairosmq.protocol import native
from kairosmq.protocol.bodies import MASTER_ID, SUB_ALL, SubscriptionData
from kairosmq.protocol.codes import (
    PERM_READ,
    PULL_COMMIT_OFFSET,
    PULL_SUBSCRIPTION,
    PULL_SUSPEND,
    ResponseCode,
)
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import PullMessageRequestHeader, PullMessageResponseHeader
from kairosmq.protocol.message import summarize_records
from kairosmq.protocol.sql92 import Selector

from .. import property_filter
from ..remoting import ingress
from ..store import GetResult, GetStatus

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from ..observe.stats import BrokerStats
    from ..remoting.longpoll import ArrivalNotifier, PullHolds
    from ..remoting.transport import Connection
    from ..store.message_store import MessageStore
    from ..tables.clients import ClientRegistry
    from ..tables.offsets import ConsumerOffsetManager
    from ..tables.subscriptions import SubscriptionGroupManager
    from ..tables.topics import TopicConfigManager

# RocketMQ's StoreUtil.TOTAL_PHYSICAL_MEMORY_SIZE (slave_read_enable's threshold)
PHYSICAL_MEMORY = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
_CODES = {
    GetStatus.FOUND: ResponseCode.SUCCESS,
    GetStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}

Filter = frozenset[int] | Selector | None
_TAG_FILTERS = 4096  # request-carried TAG expressions kept parsed (then the table restarts)
_TAG_FILTER_CHARS = 256  # longer expressions are parsed on every pull (the table's memory)


class PullMessageProcessor:
    """PULL_MESSAGE."""

    # slots: the native twin reads the fields a pull touches in place (``_pull.pyx``)
    __slots__ = (
        "subscriptions",
        "reads",
        "topics",
        "offsets",
        "clients",
        "notifier",
        "holds",
        "stats",
        "config",
        "log",
        "msglog",
        "running",
        "_tag_filters",
    )

    def __init__(
        self,
        *,
        reads: MessageStore,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        clients: ClientRegistry,
        notifier: ArrivalNotifier,
        holds: PullHolds,
        stats: BrokerStats,
        config: BrokerConfig,
        log: Any,
        msglog: Any,
        running: Callable[[], bool],
        subscriptions: SubscriptionGroupManager | None = None,
    ) -> None:
        self.subscriptions = subscriptions  # MQADMIN: consumeEnable etc. (tables/subscriptions.py)
        self.reads = reads
        self.topics = topics
        self.offsets = offsets
        self.clients = clients
        self.notifier = notifier
        self.holds = holds
        self.stats = stats
        self.config = config
        self.log = log
        self.msglog = msglog
        self.running = running
        self._tag_filters: dict[str, frozenset[int] | None] = {}  # TAG expression -> codes

    def _subscription(self, h: PullMessageRequestHeader) -> SubscriptionData | None:
        if h.sys_flag & PULL_SUBSCRIPTION and h.subscription:
            if not property_filter.is_tag_type(h.expression_type):
                return property_filter.sql_subscription(
                    h.topic,
                    h.subscription,
                    h.sub_version,
                    h.expression_type,  # type: ignore[arg-type]
                )  # expression_type: a str, not a tag type
            return SubscriptionData.build(h.topic, h.subscription, h.sub_version)
        return self.clients.subscription(h.consumer_group, h.topic)

    def _filter(self, h: PullMessageRequestHeader) -> Filter:
        """What the pull takes: None (everything), the tagsCodes of a TAG subscription or
        a SQL92 selector (``Rejected`` if it does not compile). A TAG expression the
        request carries (stock consumers send theirs with every pull) is parsed once
        (``_tag_filters``: at most ``_TAG_FILTERS`` of at most ``_TAG_FILTER_CHARS``)."""
        expr = h.subscription if h.sys_flag & PULL_SUBSCRIPTION else None
        if (
            not expr
            or len(expr) > _TAG_FILTER_CHARS
            or not property_filter.is_tag_type(h.expression_type)
        ):
            expr = None  # not a request-carried TAG expression the table keeps
        elif expr in self._tag_filters:
            return self._tag_filters[expr]
        sub = self._subscription(h)
        # SQL92: a compiled selector over record properties (Rejected if it does not compile)
        codes: Filter = property_filter.selector_for(self.config.enable_property_filter, sub)
        if codes is None and sub is not None and sub.sub_string != SUB_ALL and sub.code_set:
            codes = frozenset(sub.code_set)
        if expr is not None and not isinstance(codes, Selector):
            if len(self._tag_filters) >= _TAG_FILTERS:
                self._tag_filters.clear()
            self._tag_filters[expr] = codes
        return codes

    def handle_pull(self, conn: Connection, cmd: RemotingCommand) -> Any:
        h = PullMessageRequestHeader.from_ext_fields(cmd.ext_fields)
        cfg = ingress.check_pull(self.topics, h)
        if self.subscriptions is not None:  # the group's config first, as RocketMQ does
            info = self.clients.group_info(h.consumer_group)
            refused = self.subscriptions.pull_refusal(
                h.consumer_group, info.message_model if info is not None else None
            )
            if refused is not None:
                return cmd.error(*refused)
        if cfg is None:
            return cmd.error(ResponseCode.TOPIC_NOT_EXIST, f"topic {h.topic} does not exist")
        if not cfg.perm & PERM_READ:
            return cmd.error(ResponseCode.NO_PERMISSION, f"topic {h.topic} is not readable")
        codes = self._filter(h)
        if h.sys_flag & PULL_COMMIT_OFFSET and h.commit_offset >= 0:
            self.offsets.commit(h.consumer_group, h.topic, h.queue_id, h.commit_offset)
        result = self._get(h, codes)
        if (
            (
                result.status is GetStatus.OFFSET_OVERFLOW_ONE
                or (result.status is GetStatus.NO_MESSAGE_IN_QUEUE and h.queue_offset == 0)
            )
            and h.sys_flag & PULL_SUSPEND
            and self.config.long_polling
            and self.running()
        ):
            # held-pull limits (longpoll.PullHolds): beyond them, answered now, not held
            if self.holds.acquire(conn):
                self._hold(conn, cmd, h, codes)
                return None
        return self._answer(cmd, h, result)

    def _get(self, h: PullMessageRequestHeader, codes: Filter) -> GetResult:
        max_count = max(1, min(h.max_msg_nums, 512))
        if isinstance(codes, Selector):
            return property_filter.get_filtered(
                self.reads,
                h.topic,
                h.queue_id,
                h.queue_offset,
                max_count,
                self.config.pull_max_bytes,
                codes,
            )
        return self.reads.get(
            h.topic,
            h.queue_id,
            h.queue_offset,
            max_count,
            max_bytes=self.config.pull_max_bytes,
            match=codes,  # a set of tagsCodes: tested in C on the native core
        )

    def _hold(
        self, conn: Connection, cmd: RemotingCommand, h: PullMessageRequestHeader, codes: Filter
    ) -> None:
        """Park the pull (admitted by ``holds``): answered with what the queue has after
        the next arrival in it, at its suspend timeout (capped) or when the broker stops.
        Registered in the same synchronous step as the handler's read: nothing can land
        in between."""
        timeout_ms = max(0, min(h.suspend_timeout_millis, self.config.max_pull_hold_ms))
        # parsed into ``h``: what is held keeps no raw header (memory per held pull)
        cmd = RemotingCommand(
            cmd.code,
            cmd.opaque,
            cmd.flag,
            cmd.language,
            cmd.version,
            cmd.remark,
            {},
            b"",
            cmd.serialize_type,
        )
        self.log.debug(
            "pull.held",
            group=h.consumer_group,
            topic=h.topic,
            queue_id=h.queue_id,
            queue_offset=h.queue_offset,
            timeout_ms=timeout_ms,
        )

        def answer(_notified: bool) -> None:
            self.holds.release(conn)
            try:
                response = self._answer(cmd, h, self._get(h, codes))
            except Exception as err:  # noqa: BLE001 - every failure becomes an answer
                response = conn.server.failure_answer(conn, cmd, err)
            if not cmd.is_oneway:
                conn.send(response)

        self.notifier.hold(h.topic, h.queue_id, answer, timeout_ms / 1000)

    def _suggest(self, h: PullMessageRequestHeader, result: GetResult) -> int:
        """suggestWhichBrokerId (module docstring)."""
        if not self.config.slave_read_enable:
            return MASTER_ID
        subs = self.subscriptions
        group = subs.get(h.consumer_group) if subs is not None else None
        slow = group.which_broker_when_consume_slowly if group is not None else 1
        home = group.broker_id if group is not None else MASTER_ID
        if result.status is not GetStatus.FOUND or not result.units:
            return home
        behind = self.reads.phy_range()[1] - result.units[-1][0]
        memory = PHYSICAL_MEMORY * self.config.access_message_in_memory_max_ratio / 100
        return slow if behind > memory else home

    def _answer(
        self, cmd: RemotingCommand, h: PullMessageRequestHeader, result: GetResult
    ) -> RemotingCommand:
        status = result.status
        if status is GetStatus.NO_MESSAGE_IN_QUEUE:
            code = (
                ResponseCode.PULL_NOT_FOUND
                if h.queue_offset == 0
                else ResponseCode.PULL_OFFSET_MOVED
            )
        else:
            code = _CODES[status]
        ext = PullMessageResponseHeader(
            suggest_which_broker_id=self._suggest(h, result),
            next_begin_offset=result.next_begin_offset,
            min_offset=result.min_offset,
            max_offset=result.max_offset,
        ).to_ext_fields()
        body = b""
        if status is GetStatus.FOUND:
            body = result.chunks[0] if len(result.chunks) == 1 else b"".join(result.chunks)
            self.stats.pulled[h.topic] += len(result.units)
            self.stats.group_pulled[(h.topic, h.consumer_group)] += len(result.units)
            if self.config.log_messages and self.msglog.enabled:
                info = self.msglog.info
                for s in summarize_records(body):
                    info(
                        "message.pulled",
                        msg_id=s.msg_id,
                        group=h.consumer_group,
                        topic=h.topic,
                        queue_id=h.queue_id,
                        queue_offset=s.queue_offset,
                        born_ts=s.born_timestamp,
                        reconsume_times=s.reconsume_times,
                    )
        return cmd.response(code, ext_fields=ext, body=body)


# ------------------------------------------------------------------ the native twin

# ``handle_pull``, ``_answer`` and ``_hold`` above are the reference
# (tests/server/handlers/test_native_pull.py holds the twin to them); the twin's
# (``_pull.pyx``) replace them when protocol/native.py chooses it.
reference = SimpleNamespace(
    handle_pull=PullMessageProcessor.handle_pull,
    _answer=PullMessageProcessor._answer,
    _hold=PullMessageProcessor._hold,
)


def _load_twin() -> ModuleType:
    from . import _pull  # type: ignore[attr-defined]

    twin: ModuleType = _pull  # the compiled module, untyped to mypy
    return twin


_twin = native.twin(__name__, _load_twin)
if _twin is not None:
    PullMessageProcessor.handle_pull = _twin.handle_pull  # type: ignore[method-assign]
    PullMessageProcessor._answer = _twin.answer  # type: ignore[method-assign]
    PullMessageProcessor._hold = _twin.hold  # type: ignore[method-assign]
