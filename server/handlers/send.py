"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310) and SEND_BATCH_MESSAGE (320, or 310 with m=true).

Owns: ``SendMessageProcessor``, the send's work after ``ingress`` checked header and
properties (the checks of RocketMQ's ``AbstractSendMessageProcessor.msgCheck`` live
there): topic auto-creation, applying ``retry.plan_send_back`` to a %RETRY% send (the one
%RETRY% -> %DLQ% rule), batch unpacking, and the send response. Its services: the topic
table, the put path, the flush waiter, stats, log and config values. A topic that cannot
be auto-created because the table holds ``max_topics`` topics answers TOPIC_NOT_EXIST
with a remark naming the option, as RocketMQ's msgCheck answers a topic it could not
create; a send that created its topic is answered once ``topics.json`` holds it.
A single send with ``TRAN_MSG=true`` is a transaction half message (put kind
TRANSACTION_HALF, ``server/transaction/``; its answer carries ``transactionId`` = its
UNIQ_KEY, as RocketMQ 5's broker sets it); a PREPARED sysFlag without ``TRAN_MSG=true``
is refused (NO_PERMISSION), and so is a batch carrying ``TRAN_MSG``.

Invariants: every rejection answers a RocketMQ code with a remark saying what was wrong
and is logged as ``message.rejected``; nothing is stored for a rejected request; a batch
is all-or-nothing with respect to validation, and a topic is auto-created only for a
request that passed every check. A batch has no count limit (RocketMQ has none: its
4 MiB body bounds it); one of more than ``BATCH_SLICE`` messages is validated, then
stored, that many per loop turn (a task), and answered only if every stored part is
written (``transport.AckedAnswer``: one ack token per part); its queue offsets are
consecutive unless another send to the same queue lands between two parts.

Native twin: ``_send.pyx`` (``protocol/native.py`` chooses it) makes the common single send
(a known, writable user topic; no batch, half message or timer) in one C function and
hands every other request to ``handle_send`` here, the reference, before changing
anything; it calls the put twin as a C function (``put/_path.pyx``'s ``PUT``) when
``self.put`` is that twin. Its ``GuardedSend`` is the handler table's wrapping of the send
codes (``handlers/__init__.py``). ``tests/server/test_native_send.py`` holds both to this
module.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Generator
from types import ModuleType, SimpleNamespace
from typing import TYPE_CHECKING, Any  # Any: structlog's logger; answers; V1/V2 send headers

from kairosmq.protocol import native
from kairosmq.protocol.codes import (
    PERM_WRITE,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
    RequestCode,
    ResponseCode,
)
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.errors import MessageDecodeError
from kairosmq.protocol.headers import (
    DEFAULT_REGION,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
)
from kairosmq.protocol.message import BatchItem, iter_batch
from kairosmq.protocol.naming import AUTO_CREATE_TOPIC_KEY, group_of_retry_topic
from kairosmq.protocol.properties import (
    CLUSTER,
    DELAY,
    INT32_DIGITS,
    MAX_RECONSUME_TIMES,
    PGROUP,
    RETRY_TOPIC,
    TIMER_PROPERTIES,
    TRAN_MSG,
    UNIQ_KEY,
    WAIT,
    parse_decimal,
)
from kairosmq.protocol.timer import TimerIllegal, has_timer

from ..config import FlushMode
from ..put.kind import MessageKind
from ..put.path import response_code
from ..put.retry import plan_send_back
from ..remoting import ingress
from ..remoting.ingress import Rejected
from ..remoting.transport import AckedAnswer
from ..schedule.timer.admission import recall_handle, timer_due, timer_kind
from ..store import MessageInner, PutResult, PutStatus
from ..tables.topics import TopicTableFull
from ..transaction.messages import is_half

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from ..observe.stats import BrokerStats
    from ..remoting.transport import Connection
    from ..tables.topics import TopicConfig, TopicConfigManager

PutFn = Callable[..., PutResult]  # put/path.py: PutPath.put(msg, kind, *, due_ms=0)
# messages of a batch validated or stored per loop turn: a 4 MiB batch holds up to ~180,000
# small messages (RocketMQ has no count limit), each ~50-100 us of put work on this loop
BATCH_SLICE = 64


class SendMessageProcessor:
    """SEND_MESSAGE, SEND_MESSAGE_V2 and SEND_BATCH_MESSAGE."""

    # slots: the native twin reads the fields a send touches in place (``_send.pyx``)
    __slots__ = (
        "topics",
        "config",
        "stats",
        "log",
        "put",
        "offset_msg_id",
        "wait_flushed",
        "clock_ms",
        "ack_token",
    )

    def __init__(
        self,
        *,
        topics: TopicConfigManager,
        config: BrokerConfig,
        stats: BrokerStats,
        log: Any,
        put: PutFn,
        offset_msg_id: Callable[[int], str],
        wait_flushed: Callable[[int], Awaitable[bool]],
        clock_ms: Callable[[], int],
        ack_token: Callable[[], Any],
    ) -> None:
        self.topics = topics
        self.config = config
        self.stats = stats
        self.log = log
        self.put = put
        self.offset_msg_id = offset_msg_id
        self.wait_flushed = wait_flushed
        self.clock_ms = clock_ms
        self.ack_token = ack_token  # the store's: the last append (a batch's parts)

    def handle_send(self, conn: Connection, cmd: RemotingCommand) -> Any:
        v2 = cmd.code != RequestCode.SEND_MESSAGE
        h = SendMessageRequestHeader.from_ext_fields(cmd.ext_fields, v2=v2)
        raw_flag = h.sys_flag
        prepared = raw_flag & SYSFLAG_TRANSACTION_ROLLBACK == SYSFLAG_TRANSACTION_PREPARED
        try:
            cfg = ingress.check_send_header(self.topics, h)
            if cmd.code == RequestCode.SEND_BATCH_MESSAGE or h.batch:
                return self._send_batch(conn, cmd, h, cfg)
            self._check_body_size(cmd, "body")
            props = self._props(h.properties)
            half = is_half(props, h.reconsume_times or 0)
            if prepared and not half:
                raise Rejected(
                    ResponseCode.NO_PERMISSION,
                    f"sysFlag {raw_flag:#x} marks a transaction half message "
                    f"but TRAN_MSG=true is missing",
                )
            try:
                due = timer_due(props, self.clock_ms, self.config.timer_max_delay_sec * 1000)
            except TimerIllegal as err:
                raise Rejected(ResponseCode.MESSAGE_ILLEGAL, str(err)) from None
            queue_id = self._resolve_topic(h, cfg)
        except Rejected as r:
            return self._reject(conn, cmd, h, r.code, r.remark)
        msg = MessageInner(
            topic=h.topic,
            queue_id=queue_id,
            body=cmd.body,
            properties=props,
            flag=h.flag,
            sys_flag=h.sys_flag,
            born_timestamp=h.born_timestamp,
            born_host=(conn.born_ip, conn.peer_port),
            reconsume_times=h.reconsume_times or 0,
        )
        if half:  # DELAY and timer properties are parked until the commit
            props.setdefault(PGROUP, h.producer_group)
            uniq = props.get(UNIQ_KEY)
            result = self.put(msg, MessageKind.TRANSACTION_HALF)
            return self._respond(conn, cmd, h, [result], queue_id, transaction_id=uniq)
        kind = timer_kind(msg, self._kind(h, msg), due)
        result = self.put(msg, kind, due_ms=due)
        return self._respond(
            conn, cmd, h, [result], queue_id, recall_handle(msg, kind, self.config.broker_name)
        )

    def _check_body_size(self, cmd: RemotingCommand, what: str) -> None:
        limit = self.config.max_message_size
        if len(cmd.body) > limit:
            raise Rejected(
                ResponseCode.MESSAGE_ILLEGAL,
                f"the {what} is {len(cmd.body)} bytes, the limit is {limit}",
            )

    def _reject(
        self, conn: Connection, cmd: RemotingCommand, h: Any, code: ResponseCode, remark: str
    ) -> RemotingCommand:
        self.stats.rejected += 1
        self.log.warning(
            "message.rejected",
            topic=getattr(h, "topic", None),
            producer_group=getattr(h, "producer_group", None),
            code=int(code),
            remark=remark,
            peer=conn.peer,
        )
        return cmd.error(code, remark)

    def _resolve_topic(self, h: SendMessageRequestHeader, cfg: TopicConfig | None) -> int:
        """Auto-create the (checked) topic if allowed; return the queue id to use."""
        config = self.config
        if cfg is None:
            try:
                if group_of_retry_topic(h.topic) is not None:
                    cfg, _ = self.topics.ensure(h.topic, config.retry_queue_nums)
                elif config.auto_create_topic and h.default_topic == AUTO_CREATE_TOPIC_KEY:
                    n = max(1, min(h.default_topic_queue_nums, config.default_queue_nums))
                    cfg, _ = self.topics.ensure(h.topic, n)
                    self.log.info("topic.created", topic=h.topic, queue_nums=n, auto=True)
                else:
                    raise Rejected(
                        ResponseCode.TOPIC_NOT_EXIST,
                        f"topic {h.topic} does not exist and auto-creation is off",
                    )
            except TopicTableFull as full:  # RocketMQ: a topic it cannot create is 17
                raise Rejected(ResponseCode.TOPIC_NOT_EXIST, full.remark) from None
            if h.queue_id >= 0:
                ingress.check_queue_id(cfg, h.topic, h.queue_id)
        if not cfg.perm & PERM_WRITE:
            raise Rejected(ResponseCode.NO_PERMISSION, f"the topic {h.topic} is not writable")
        if h.queue_id < 0:
            return random.randrange(cfg.write_queue_nums)
        return h.queue_id

    def _props(self, raw: str | None) -> dict[str, str]:
        props = ingress.message_properties(raw)
        props.pop(WAIT, None)
        props[CLUSTER] = self.config.cluster_name
        return props

    def _kind(self, h: SendMessageRequestHeader, msg: MessageInner) -> MessageKind:
        """DELAYED with a DELAY property, else NORMAL; DLQ for a %RETRY% message past its
        max (the send path's handleRetryAndDLQ: ``plan_send_back`` with level 0 decides;
        only its DLQ verdict and topic are used: a message sent to %RETRY% keeps the
        sender's reconsumeTimes and delay)."""
        kind = MessageKind.DELAYED if DELAY in msg.properties else MessageKind.NORMAL
        group = group_of_retry_topic(h.topic)
        if group is None:
            return kind
        max_times = h.max_reconsume_times
        if max_times is None:
            max_times = parse_decimal(msg.properties.get(MAX_RECONSUME_TIMES), INT32_DIGITS)
            if max_times is None:
                max_times = self.config.max_reconsume_times
        plan = plan_send_back(group, msg.reconsume_times, 0, max_times)
        if plan.dead_letter:
            self.topics.ensure(plan.topic, 1)
            msg.topic, msg.queue_id = plan.topic, 0
            msg.properties.pop(DELAY, None)
            msg.properties.setdefault(RETRY_TOPIC, h.topic)
            return MessageKind.DLQ
        return kind

    def _send_batch(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        h: SendMessageRequestHeader,
        cfg: TopicConfig | None,
    ) -> Any:
        """A batch of at most ``BATCH_SLICE`` messages is answered in this loop turn; a
        bigger one is validated, then stored, ``BATCH_SLICE`` messages per loop turn (a
        task), so that a 4 MiB batch of small messages does not stall the loop."""
        self._check_body_size(cmd, "batch")
        steps = self._batch_steps(conn, cmd, h, cfg)
        try:
            next(steps)
        except StopIteration as done:
            answer: Any = done.value[0]  # RemotingCommand, or the SYNC_FLUSH awaitable
            return answer
        return self._batch_later(steps)

    async def _batch_later(
        self, steps: Generator[None, None, tuple[Any, list[Any]]]
    ) -> AckedAnswer:
        while True:
            await asyncio.sleep(0)  # one loop turn: other connections, timers, the outbox
            try:
                next(steps)
            except StopIteration as done:
                answer, acks = done.value
                break
        if not isinstance(answer, RemotingCommand):  # SYNC_FLUSH: after the group commit
            answer = await answer
        return AckedAnswer(answer, tuple(acks))

    def _batch_steps(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        h: SendMessageRequestHeader,
        cfg: TopicConfig | None,
    ) -> Generator[None, None, tuple[Any, list[Any]]]:
        """Validate every item (nothing is stored for a refused batch), then store them;
        yields after each ``BATCH_SLICE`` messages. Returns the answer and, when it
        yielded while storing, the store's ack token after each stored slice.

        Memory stays a small multiple of the body: each pass decodes the items again
        instead of keeping 10^5 decoded messages, and offset msg ids are joined per slice.
        """
        count = 0
        kept: list[dict[str, str]] = []  # a small batch's properties, not decoded twice
        try:
            shared = self._props(h.properties)
            for item in iter_batch(cmd.body):
                props = self._batch_item_properties(item, shared)
                count += 1
                if count <= BATCH_SLICE:
                    kept.append(props)
                elif count % BATCH_SLICE == 0:
                    yield
            ingress.check_batch_items(count)
            queue_id = self._resolve_topic(h, cfg)
        except MessageDecodeError as err:
            return self._reject(
                conn, cmd, h, ResponseCode.MESSAGE_ILLEGAL, f"bad batch body: {err}"
            ), []
        except Rejected as r:
            return self._reject(conn, cmd, h, r.code, r.remark), []
        first: PutResult | None = None
        last: PutResult | None = None
        acks: list[Any] = []
        ids: list[str] = []  # offset msg ids, joined per slice
        part: list[str] = []
        born = (conn.born_ip, conn.peer_port)
        small = count <= BATCH_SLICE
        for n, item in enumerate(iter_batch(cmd.body), start=1):
            last = self.put(
                MessageInner(  # a batch never carries DELAY
                    topic=h.topic,
                    queue_id=queue_id,
                    body=item.body,
                    properties=kept[n - 1] if small else self._batch_item_properties(item, shared),
                    flag=item.flag,
                    sys_flag=h.sys_flag,
                    born_timestamp=h.born_timestamp,
                    born_host=born,
                    reconsume_times=h.reconsume_times or 0,
                ),
                MessageKind.NORMAL,
            )
            first = first or last
            if last.status is not PutStatus.PUT_OK:
                break
            part.append(last.offset_msg_id or self.offset_msg_id(last.phy_offset))
            if n % BATCH_SLICE == 0 and n < count:
                ids.append(",".join(part))
                part = []
                acks.append(self.ack_token())
                yield
        ids.append(",".join(part))
        assert first is not None and last is not None  # count >= 1
        answer = self._respond(conn, cmd, h, [first, last], queue_id, msg_ids=ids)
        if acks:
            acks.append(self.ack_token())
        return answer, acks

    @staticmethod
    def _batch_item_properties(item: BatchItem, shared: dict[str, str]) -> dict[str, str]:
        """One batch message's properties (the header's shared ones over its own), or
        ``Rejected``: a batch carries no transaction, delay level or timer message."""
        props = ingress.message_properties(item.properties)
        props.update(shared)
        if props.get(TRAN_MSG, "").lower() == "true":
            raise Rejected(
                ResponseCode.MESSAGE_ILLEGAL,
                "a batch cannot carry transaction messages (TRAN_MSG); send half messages singly",
            )
        if ingress.delay_level(props) > 0:  # RocketMQ refuses level > 0 only
            raise Rejected(
                ResponseCode.MESSAGE_ILLEGAL,
                "a batch cannot carry a delay level; send delayed messages singly",
            )
        if has_timer(props):
            key = next(k for k in TIMER_PROPERTIES if k in props)
            raise Rejected(
                ResponseCode.MESSAGE_ILLEGAL,
                f"a batch cannot carry timer properties ({key}); send timer messages singly",
            )
        return props

    def _respond(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        h: SendMessageRequestHeader,
        results: list[PutResult],
        queue_id: int,
        recall: str | None = None,
        *,
        transaction_id: str | None = None,
        msg_ids: list[str] | None = None,
    ) -> Any:
        """The answer to a send of ``results``, or of a batch given by its first and last
        put results and ``msg_ids`` (the offset msg ids, joined along the way)."""
        bad = results[-1]  # a batch stops at its first failed put
        if bad.status is not PutStatus.PUT_OK:
            return self._reject(
                conn, cmd, h, response_code(bad.status), bad.remark or bad.status.value
            )
        if msg_ids is None:
            msg_ids = [r.offset_msg_id or self.offset_msg_id(r.phy_offset) for r in results]
        ext = SendMessageResponseHeader(
            msg_id=",".join(msg_ids),
            queue_id=queue_id,
            queue_offset=results[0].queue_offset,
            recall_handle=recall,
            transaction_id=transaction_id,
            msg_region=DEFAULT_REGION,
            trace_on=True,
        ).to_ext_fields()
        response = cmd.response(ResponseCode.SUCCESS, ext_fields=ext)
        if self.config.flush_mode is FlushMode.SYNC_FLUSH:
            return self._after_flush(cmd, response, results[-1].phy_offset + results[-1].size)
        return response

    async def _after_flush(
        self, cmd: RemotingCommand, response: RemotingCommand, end: int
    ) -> RemotingCommand:
        if await self.wait_flushed(end):
            return response
        return cmd.response(
            ResponseCode.FLUSH_DISK_TIMEOUT,
            ext_fields=response.ext_fields,
            remark="stored, but the disk flush did not finish in time",
        )


# ------------------------------------------------------------------ the native twin

# ``SendMessageProcessor.handle_send`` above is the reference
# (tests/server/test_native_send.py holds the twin to it); the twin's (``_send.pyx``:
# the common single send in one C function) replaces it when protocol/native.py chooses it.
reference = SimpleNamespace(handle_send=SendMessageProcessor.handle_send)
# the twin's send entry: handlers/__init__.py's wrapping of the send handlers
# (``ingress.guarded`` over ``after_topic_write``) in one C call; None on the pure core
GuardedSend: Callable[[Any, TopicConfigManager, BrokerStats, Any], Any] | None = None


def _load_twin() -> ModuleType:
    from . import _send  # type: ignore[attr-defined]

    twin: ModuleType = _send  # the compiled module, untyped to mypy
    return twin


_twin = native.twin(__name__, _load_twin)
if _twin is not None:
    SendMessageProcessor.handle_send = _twin.handle_send  # type: ignore[method-assign]
    GuardedSend = _twin.GuardedSend
