"""Producer: route lookup, queue choice, retries and every RocketMQ send mode.

Owns: ``Producer`` (RocketMQ's DefaultMQProducerImpl: ``send``, ``send_async``,
``send_oneway``, ``send_batch``; ordered sends through a queue selector; ``recall``;
``request``, the request-reply flow, over request.py's reply waiters; requests a broker
sends it, by code, in ``_broker_requests``; its lifecycle is ``ClientLifecycle``).
``SendRequest`` and ``hash_selector`` live in send.py, queue choice in fault.py. Request
headers are ``SendMessageRequestHeader`` values written with the V2 short names.

Invariants:
* Client-side checks (topic, body size against ``max_message_size``, batch rules) run
  before anything is sent and raise ``MessageError`` subclasses.
* Every message gets a UNIQ_KEY (``UniqIdGenerator``, RocketMQ's layout) before the
  first attempt, so retries of one ``send`` carry the same msgId.
* A send makes at most ``1 + retry_times_when_send_failed`` attempts
  (``retry_times_when_send_async_failed`` for ``send_async``), all inside one
  ``send_msg_timeout`` budget; only ``retriable`` errors are retried, each time on the
  next queue of another broker when there is one (RocketMQ's ``selectOneMessageQueue``).
  Sends through a selector or to an explicit queue are not retried (order matters more).
* Queue choice is ``FaultStrategy`` (fault.py): round robin over the queues of all
  brokers of the route, brokers in reconnect backoff last; with
  ``send_latency_fault_enable`` RocketMQ's latency fault tolerance (each attempt's latency
  recorded, a retriable failure isolates its broker).
* A ``%RETRY%<group>`` send carries reconsumeTimes / maxReconsumeTimes from the message's
  RECONSUME_TIME / MAX_RECONSUME_TIMES (Java's ``sendKernelImpl``); a UNIQ_KEY already in
  the properties is kept (the consumer's send-back fallback,
  consumer/consume_service.py's ``retry_message``).
* Response codes FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE mean
  "stored" and become ``SendStatus`` values; any other non-zero code raises.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
import zlib
from collections.abc import Callable
from typing import Any

from kairosmq.protocol.bodies import HeartbeatData
from kairosmq.protocol.codes import SYSFLAG_COMPRESSED, RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.errors import HeaderError, shown
from kairosmq.protocol.headers import (
    RecallMessageRequestHeader,
    RecallMessageResponseHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    UnregisterClientRequestHeader,
)
from kairosmq.protocol.ids import UniqIdGenerator
from kairosmq.protocol.message import BatchItem, encode_batch
from kairosmq.protocol.naming import is_retry_topic
from kairosmq.protocol.properties import (
    MAX_RECONSUME_TIMES,
    RECONSUME_TIME,
    UNIQ_KEY,
    WAIT,
    encode_properties,
    parse_java_int,
)
from kairosmq.protocol.timer import RecallHandleInvalid, decode_recall_handle

from ..common import CLIENT_INNER_PRODUCER, Periodic, check_group, check_topic
from ..errors import BrokerError, ClientError, MessageError, MessageTooLarge
from ..lifecycle import ClientLifecycle
from ..message import Message, MessageExt, MessageQueue, SendResult, wire_properties
from ..options import ProducerOptions, build_options
from ..route import TopicRouteInfo
from .fault import FaultStrategy
from .request import ReplyWaiters, prepare_request
from .send import STORED, QueueSelector, SendRequest

log = logging.getLogger("kairosmq.client.producer")

SendCallback = Callable[..., Any]


class Producer(ClientLifecycle):
    """An asyncio RocketMQ producer.

    ``Producer(group, namesrv, options=ProducerOptions(...), **overrides)``: the options
    (docs/client.md lists every field), with ``group``/``namesrv`` and any keyword named
    like a field (``send_msg_timeout=1.0``) applied on top. ``InvalidName`` if the group
    breaks the naming rules.
    """

    kind = "producer"

    def __init__(
        self,
        group: str | None = None,
        namesrv: str | list[str] | None = None,
        *,
        options: ProducerOptions | None = None,
        **overrides: Any,
    ) -> None:
        opts = build_options(
            ProducerOptions, options, producer_group=group, namesrv_addr=namesrv, **overrides
        )
        check_group(opts.producer_group)
        super().__init__(
            opts, on_request=self._on_broker_request, route_timeout=opts.send_msg_timeout
        )  # a lookup is in a send
        # requests a broker sends this producer, by code (REPLY: pushed replies, 326)
        self._replies = ReplyWaiters()
        self._reply_registered: set[str] = set()
        self._broker_requests: dict[int, Callable[[RemotingCommand], Any]] = {
            RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT: self._replies.on_push
        }
        self.options = opts
        self.group = opts.producer_group
        self._routes.default_topic = opts.create_topic_key
        self._ids = UniqIdGenerator(bytes(int(p) for p in self.client_ip.split(".")))
        self._timers = [
            Periodic("producer-route", opts.poll_name_server_interval, self._refresh_routes),
            Periodic("producer-heartbeat", opts.heartbeat_broker_interval, self._heartbeat_all),
        ]
        self._fault = FaultStrategy(
            opts.send_latency_fault_enable,
            latency_max=opts.latency_max,
            not_available_duration=opts.not_available_duration,
            backing_off=self._broker_backing_off,
        )

    @property
    def send_msg_timeout(self) -> float:
        return self.options.send_msg_timeout

    @property
    def max_message_size(self) -> int:
        return self.options.max_message_size

    # ------------------------------------------------------------ lifecycle hooks

    def _on_broker_request(self, _client: Any, cmd: RemotingCommand) -> RemotingCommand | None:
        handler = self._broker_requests.get(cmd.code)
        return None if handler is None else handler(cmd)

    def _heartbeat_data(self) -> HeartbeatData:
        return HeartbeatData(self.client_id, [self.group, CLIENT_INNER_PRODUCER])

    def _unregister_header(self) -> UnregisterClientRequestHeader:
        return UnregisterClientRequestHeader(self.client_id, producer_group=self.group)

    async def _shutdown(self) -> None:
        """Finish in-flight async sends (bounded by ``send_msg_timeout``)."""
        if self._bg:
            await asyncio.wait(list(self._bg), timeout=self.options.send_msg_timeout)

    # ------------------------------------------------------------ routing

    async def _refresh_routes(self) -> None:
        """Every ``poll_name_server_interval``: refresh the routes, drop gone brokers."""
        await self._routes.refresh_all()
        await self._sync_brokers()

    async def _route(self, topic: str) -> TopicRouteInfo:
        self._check_running()
        info = self._routes.cached(topic)
        if info is None:
            info = await self._routes.get(topic, allow_default=True)
            if not set(info.broker_addrs.values()) <= self._heartbeated:
                self._spawn(self._heartbeat_new(info.broker_addrs.values()))
        if not info.publish_queues:
            raise BrokerError.for_code(
                ResponseCode.TOPIC_NOT_EXIST, f"no writable queue for {topic}"
            )
        return info

    def _pick(self, queues: list[MessageQueue], avoid: str | None) -> MessageQueue:
        """The queue of the next attempt (fault.py: round robin skipping ``avoid``,
        or RocketMQ's latency fault tolerance when ``send_latency_fault_enable``)."""
        return self._fault.select(queues, avoid)

    def _broker_backing_off(self, broker_name: str) -> bool:
        addr = self._routes.broker_addr(broker_name)
        return addr is not None and self._pool.backing_off(addr)

    # ------------------------------------------------------------ sending

    def _request(self, msg: Message, **where: Any) -> SendRequest:
        """Check ``msg`` and encode it (compressed from ``compress_msg_body_over_howmuch``)."""
        check_topic(msg.topic)
        body = msg.body
        if len(body) > self.options.max_message_size:
            raise MessageTooLarge(len(body), self.options.max_message_size)
        if not body:
            raise MessageError("message body is empty")
        sys_flag = 0
        if len(body) >= self.options.compress_msg_body_over_howmuch:
            body = zlib.compress(body, 5)
            sys_flag = SYSFLAG_COMPRESSED
        uniq = msg.properties.get(UNIQ_KEY) or self._ids.next_id()  # Java: setUniqID if absent
        return SendRequest(
            msg.topic, body, uniq, wire_properties(msg, uniq), sys_flag, msg.flag, msg=msg, **where
        )

    def _header(self, req: SendRequest, mq: MessageQueue) -> dict[str, str]:
        """The SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE header of ``req`` for ``mq``."""
        opts = self.options
        reconsume, max_reconsume = 0, None
        if req.msg is not None and is_retry_topic(req.topic):  # Java's sendKernelImpl
            props = req.msg.properties
            reconsume = _int_prop(props.get(RECONSUME_TIME), 0) or 0
            max_reconsume = _int_prop(props.get(MAX_RECONSUME_TIMES), None)
        return SendMessageRequestHeader(
            producer_group=self.group,
            topic=req.topic,
            default_topic=opts.create_topic_key,
            default_topic_queue_nums=opts.default_topic_queue_nums,
            queue_id=mq.queue_id,
            sys_flag=req.sys_flag,
            born_timestamp=int(time.time() * 1000),
            flag=req.flag,
            properties=req.properties,
            reconsume_times=reconsume,
            unit_mode=False,
            batch=req.batch,
            broker_name=mq.broker_name,
            max_reconsume_times=max_reconsume,
        ).to_ext_fields(v2=True)

    async def _send_once(
        self,
        info: TopicRouteInfo,
        mq: MessageQueue,
        req: SendRequest,
        timeout: float,
    ) -> SendResult:
        addr = _master(info, mq)
        resp = await self._pool.invoke(
            addr, req.code, self._header(req, mq), req.body, timeout=timeout
        )
        status = STORED.get(resp.code)  # type: ignore[call-overload]
        if status is None:
            raise BrokerError.for_code(resp.code, resp.remark, addr)
        try:
            h = SendMessageResponseHeader.from_ext_fields(resp.ext_fields)
        except HeaderError as err:
            raise BrokerError(resp.code, f"send response lacks {err}", addr) from None
        queue = MessageQueue(mq.topic, mq.broker_name, h.queue_id)
        return SendResult(status, req.uniq, h.msg_id, queue, h.queue_offset, h.recall_handle)

    async def _send(self, req: SendRequest) -> SendResult:
        loop = asyncio.get_running_loop()
        budget = self.options.send_msg_timeout if req.timeout is None else req.timeout
        deadline = loop.time() + budget
        info = await self._route(req.topic)
        if req.pinned:
            mq = req.queue
            if mq is None:
                assert req.selector is not None
                mq = req.selector(info.publish_queues, req.msg, req.arg)  # type: ignore[arg-type]
            return await self._send_once(info, mq, req, budget)
        avoid: str | None = None
        last: ClientError | None = None
        for _ in range(1 + req.retries):
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            mq = self._pick(info.publish_queues, avoid)
            begin = loop.time()
            try:
                result = await self._send_once(info, mq, req, remaining)
            except ClientError as err:
                if not err.retriable:
                    raise
                self._fault.update(mq.broker_name, (loop.time() - begin) * 1000, True)
                last, avoid = err, mq.broker_name
                log.debug("send to %s failed (%s); retrying", mq, err)
                self._spawn(self._routes.refresh(req.topic, allow_default=True))
                continue
            self._fault.update(mq.broker_name, (loop.time() - begin) * 1000, False)
            return result
        if last is None:
            raise ClientError(
                f"send to {req.topic} timed out after {budget:.3f}s before an attempt"
            )
        raise last

    async def send(
        self,
        msg: Message,
        *,
        selector: QueueSelector | None = None,
        arg: Any = None,
        queue: MessageQueue | None = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Send ``msg`` and await the broker's acknowledgement.

        Args:
            msg: the message.
            selector: ``fn(queues, msg, arg) -> MessageQueue`` for ordered sends
                (e.g. ``hash_selector`` with ``arg=order_id``); no retries then.
            arg: passed to ``selector``.
            queue: send to this queue (no retries).
            timeout: overrides ``send_msg_timeout`` for this call.

        Raises:
            MessageError: the message failed a client-side check.
            BrokerError, ConnectionClosed, RequestTimeout: the last attempt's failure.
        """
        return await self._send(
            self._request(
                msg,
                selector=selector,
                arg=arg,
                queue=queue,
                timeout=timeout,
                retries=self.options.retry_times_when_send_failed,
            )
        )

    def send_async(
        self,
        msg: Message,
        on_success: SendCallback | None = None,
        on_exception: SendCallback | None = None,
        *,
        selector: QueueSelector | None = None,
        arg: Any = None,
    ) -> asyncio.Task[SendResult | None]:
        """Start sending ``msg`` and return at once; callbacks (sync or async) get the outcome.

        ``on_success(result)`` or ``on_exception(exc)`` is called; the returned task can
        also be awaited (it yields the SendResult, or None after ``on_exception``).
        Retriable failures are retried ``retry_times_when_send_async_failed`` times.
        """
        self._check_running()
        return self._spawn(self._send_with_callbacks(msg, on_success, on_exception, selector, arg))

    async def _send_with_callbacks(
        self,
        msg: Message,
        on_success: SendCallback | None,
        on_exception: SendCallback | None,
        selector: QueueSelector | None,
        arg: Any,
    ) -> SendResult | None:
        try:
            result = await self._send(
                self._request(
                    msg,
                    selector=selector,
                    arg=arg,
                    retries=self.options.retry_times_when_send_async_failed,
                )
            )
        except ClientError as err:
            if on_exception is None:
                raise
            await _call(on_exception, err)
            return None
        if on_success is not None:
            await _call(on_success, result)
        return result

    async def recall(self, topic: str, handle: str, *, timeout: float | None = None) -> str:
        """Recall (cancel) a timer or delayed message before it fires, by the
        ``SendResult.recall_handle`` its send returned (RocketMQ 5.3's RECALL_MESSAGE).
        Returns the message id. Recalling twice succeeds; a message already delivered or
        unknown raises ``RecallFailed`` (ILLEGAL_OPERATION, the remark says which)."""
        try:
            h = decode_recall_handle(handle)
        except RecallHandleInvalid as err:
            raise MessageError(f"{err}: {shown(handle, 80)}") from None
        if h.topic != topic:
            raise MessageError(f"the recall handle is for topic {h.topic}, not {topic}")
        info = await self._route(topic)
        addr = info.broker_addrs.get(h.broker_name)
        if addr is None:
            raise BrokerError.for_code(
                ResponseCode.SERVICE_NOT_AVAILABLE, f"no master address for {h.broker_name}"
            )
        header = RecallMessageRequestHeader(
            producer_group=self.group, topic=topic, recall_handle=handle
        ).to_ext_fields()
        resp = await self._pool.invoke(
            addr,
            RequestCode.RECALL_MESSAGE,
            header,
            b"",
            timeout=timeout or self.options.send_msg_timeout,
        )
        if resp.code != ResponseCode.SUCCESS:
            raise BrokerError.for_code(resp.code, resp.remark, addr)
        return RecallMessageResponseHeader.from_ext_fields(resp.ext_fields).msg_id

    async def request(
        self,
        msg: Message,
        timeout: float | None = None,
        *,
        selector: QueueSelector | None = None,
        arg: Any = None,
        queue: MessageQueue | None = None,
    ) -> MessageExt:
        """Send ``msg`` as a request and await its reply (RocketMQ 4.6+ request-reply):
        ``timeout`` (default ``send_msg_timeout``) bounds the send and the wait. A
        responder answers with ``producer.send(create_reply(msg, body))``
        (``kairosmq.client``). Raises ``ReplyTimeout`` or the send's errors."""
        budget = self.send_msg_timeout if timeout is None else timeout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget
        request, correlation_id = prepare_request(msg, self.client_id, budget)
        await self._register_for_replies(msg.topic)
        fut = self._replies.add(correlation_id)
        try:
            await self.send(
                request,
                timeout=max(deadline - loop.time(), 0.001),
                selector=selector,
                arg=arg,
                queue=queue,
            )
        except BaseException:
            self._replies.discard(correlation_id)
            raise
        return await self._replies.wait(correlation_id, fut, msg.topic, deadline - loop.time())

    async def _register_for_replies(self, topic: str) -> None:
        """HEART_BEAT every broker of ``topic``'s route not yet told about this producer, and
        wait for it: the broker finds a reply's requester among its registered producers
        (RocketMQ's prepareSendRequest sends heartbeats the same way)."""
        info = await self._route(topic)
        new = set(info.broker_addrs.values()) - self._reply_registered
        if new:
            body = self._heartbeat_data().to_json()
            await asyncio.gather(*(self._heartbeat(addr, body) for addr in new))
            self._reply_registered |= new

    async def send_oneway(self, msg: Message, *, queue: MessageQueue | None = None) -> None:
        """Send without waiting for an acknowledgement (one attempt, no result)."""
        req = self._request(msg, queue=queue)
        info = await self._route(msg.topic)
        mq = queue if queue is not None else self._pick(info.publish_queues, None)
        await self._pool.invoke_oneway(
            _master(info, mq),
            req.code,
            self._header(req, mq),
            req.body,
            timeout=self.options.send_msg_timeout,
        )

    async def send_batch(
        self,
        msgs: list[Message],
        *,
        queue: MessageQueue | None = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Send several messages of one topic as one SEND_BATCH_MESSAGE (one queue).

        Raises:
            MessageError: empty batch, mixed topics, a delay level, a %RETRY% topic, or
                an encoded batch larger than ``max_message_size``.
        """
        if not msgs:
            raise MessageError("batch is empty")
        topic = msgs[0].topic
        check_topic(topic)
        if is_retry_topic(topic):
            raise MessageError("retry-group messages are not supported in a batch")
        items: list[BatchItem] = []
        ids: list[str] = []
        for m in msgs:
            if m.topic != topic:
                raise MessageError(f"all messages of a batch need one topic ({topic} != {m.topic})")
            if m.delay_level > 0:
                raise MessageError("delay level is not supported for batching")
            if not m.body:
                raise MessageError("message body is empty")
            uniq = self._ids.next_id()
            ids.append(uniq)
            items.append(BatchItem(m.body, m.flag, wire_properties(m, uniq)))
        body = encode_batch(items)
        limit = self.options.max_message_size
        if len(body) > limit:
            raise MessageTooLarge(len(body), limit)
        return await self._send(
            SendRequest(
                topic,
                body,
                ",".join(ids),
                encode_properties({WAIT: "true"}),
                batch=True,
                queue=queue,
                timeout=timeout,
                retries=self.options.retry_times_when_send_failed,
            )
        )


def _int_prop(raw: str | None, default: int | None) -> int | None:
    value = parse_java_int(raw)
    return default if value is None else value


def _master(info: TopicRouteInfo, mq: MessageQueue) -> str:
    """The master address of ``mq``'s broker (SERVICE_NOT_AVAILABLE when the route has none)."""
    addr = info.broker_addrs.get(mq.broker_name)
    if addr is None:
        raise BrokerError.for_code(
            ResponseCode.SERVICE_NOT_AVAILABLE, f"no master address for {mq.broker_name}"
        )
    return addr


async def _call(fn: SendCallback, value: Any) -> None:
    try:
        out = fn(value)
        if inspect.isawaitable(out):
            await out
    except Exception:  # a user callback must not break the producer
        log.exception("send callback %r failed", fn)
