"""Producer: route lookup, queue choice, retries and every RocketMQ send mode.

Owns: ``Producer`` (start/shutdown/``async with``; ``send``, ``send_async``, ``send_oneway``,
``send_batch``; ordered sends through a queue selector), ``hash_selector`` and the
SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE request building.

Invariants:
* Client-side checks (topic, body size against ``max_message_size``, batch rules) run
  before anything is sent and raise ``MessageError`` subclasses.
* Every message gets a UNIQ_KEY (``UniqIdGenerator``, RocketMQ's layout) before the
  first attempt, so retries of one ``send`` carry the same msgId.
* A send makes at most ``1 + retry_times_when_send_failed`` attempts, all inside one
  ``send_msg_timeout`` budget; only ``retriable`` errors are retried, each time on the
  next queue of another broker when there is one (RocketMQ's ``selectOneMessageQueue``).
  Sends through a selector or to an explicit queue are not retried (order matters more).
* Response codes FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT and SLAVE_NOT_AVAILABLE mean
  "stored" and become ``SendStatus`` values; any other non-zero code raises.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import time
import zlib
from collections.abc import Callable
from typing import Any

from kairosmq.protocol.bodies import HeartbeatData
from kairosmq.protocol.codes import (
    SYSFLAG_COMPRESSED,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from kairosmq.protocol.ids import UniqIdGenerator
from kairosmq.protocol.message import BatchItem, encode_batch, java_string_hash
from kairosmq.protocol.naming import is_retry_topic

from .common import (
    CLIENT_INNER_PRODUCER,
    Periodic,
    check_group,
    check_topic,
    make_client_id,
    unregister_client,
)
from .errors import BrokerError, ClientError, ClientStateError, MessageError, MessageTooLarge
from .message import Message, MessageQueue, SendResult, SendStatus, wire_properties
from .remoting import RemotingPool, local_ip
from .route import DEFAULT_TOPIC, RouteCache, TopicRouteInfo

log = logging.getLogger("kairosmq.client.producer")

QueueSelector = Callable[[list[MessageQueue], Message, Any], MessageQueue]
SendCallback = Callable[..., Any]

_STORED = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


def hash_selector(queues: list[MessageQueue], _msg: Message, arg: Any) -> MessageQueue:
    """RocketMQ's SelectMessageQueueByHash, stable across processes (Java hash of str)."""
    key = java_string_hash(arg) if isinstance(arg, str) else int(arg)
    return queues[abs(key) % len(queues)]


class Producer:
    """An asyncio RocketMQ producer.

    Args:
        group: producer group name (``InvalidName`` if it breaks the naming rules).
        namesrv: name server address(es), ``"host:port"`` or ``"a:9876;b:9876"``.
        send_msg_timeout: seconds for one send, retries included (RocketMQ 3 s).
        retry_times_when_send_failed: extra attempts on retriable errors (RocketMQ 2).
        max_message_size: largest body (or batch body) accepted, bytes (4 MiB).
        compress_msg_body_over_howmuch: zlib-compress bodies from this size (4 KiB).
        poll_name_server_interval / heartbeat_broker_interval: seconds (30 / 30).
        instance_name: overrides the ``<pid>#<n>`` part of the client id.
        serialize_type: remoting header encoding (JSON, as stock Java clients).
    """

    def __init__(
        self,
        group: str,
        namesrv: str | list[str] = "127.0.0.1:9876",
        *,
        send_msg_timeout: float = 3.0,
        retry_times_when_send_failed: int = 2,
        max_message_size: int = 4 * 1024 * 1024,
        compress_msg_body_over_howmuch: int = 4096,
        default_topic_queue_nums: int = 4,
        poll_name_server_interval: float = 30.0,
        heartbeat_broker_interval: float = 30.0,
        instance_name: str | None = None,
        serialize_type: SerializeType = SerializeType.JSON,
    ) -> None:
        check_group(group)
        self.group = group
        self.send_msg_timeout = send_msg_timeout
        self.retry_times_when_send_failed = retry_times_when_send_failed
        self.max_message_size = max_message_size
        self.compress_over = compress_msg_body_over_howmuch
        self.default_topic_queue_nums = str(default_topic_queue_nums)
        ip = local_ip()
        self.client_id = make_client_id(ip, instance_name)
        self._ids = UniqIdGenerator(bytes(int(p) for p in ip.split(".")))
        self._pool = RemotingPool(serialize_type=serialize_type)
        self._routes = RouteCache(self._pool, namesrv, send_msg_timeout)
        self._counter = itertools.count()
        self._heartbeat_sent: set[str] = set()
        self._timers = [
            Periodic("producer-route", poll_name_server_interval, self._routes.refresh_all),
            Periodic("producer-heartbeat", heartbeat_broker_interval, self._heartbeat_all),
        ]
        self._tasks: set[asyncio.Task[Any]] = set()
        self._state = "created"

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        if self._state != "created":
            raise ClientStateError(f"producer is {self._state}; start() runs once")
        self._state = "running"
        for t in self._timers:
            t.start()

    async def shutdown(self) -> None:
        """Finish in-flight async sends, unregister from brokers and close connections."""
        if self._state != "running":
            self._state = "shutdown"
            return
        self._state = "stopping"
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=self.send_msg_timeout)
        for t in self._timers:
            await t.stop()
        await unregister_client(self._pool, self._routes.broker_addrs(),
                                {"clientID": self.client_id, "producerGroup": self.group})
        self._pool.close()
        self._state = "shutdown"

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    async def _heartbeat_all(self) -> None:
        body = HeartbeatData(self.client_id, [self.group, CLIENT_INNER_PRODUCER]).to_json()
        for addr in self._routes.broker_addrs():
            await self._heartbeat(addr, body)

    async def _heartbeat(self, addr: str, body: bytes) -> None:
        self._heartbeat_sent.add(addr)
        try:
            resp = await self._pool.invoke(addr, RequestCode.HEART_BEAT, None, body, timeout=3.0)
            if resp.code != ResponseCode.SUCCESS:
                log.warning("heartbeat to %s answered %d %s", addr, resp.code, resp.remark)
        except ClientError as err:
            log.warning("heartbeat to %s failed: %s", addr, err)

    # ------------------------------------------------------------ routing

    async def _route(self, topic: str) -> TopicRouteInfo:
        if self._state != "running":
            raise ClientStateError(f"producer is {self._state}; call start() first")
        info = self._routes.cached(topic)
        if info is None:
            info = await self._routes.get(topic, allow_default=True)
            new = set(info.broker_addrs.values()) - self._heartbeat_sent
            if new:
                body = HeartbeatData(self.client_id, [self.group, CLIENT_INNER_PRODUCER]).to_json()
                for addr in new:
                    self._spawn(self._heartbeat(addr, body))
        if not info.publish_queues:
            raise BrokerError.for_code(
                ResponseCode.TOPIC_NOT_EXIST, f"no writable queue for {topic}"
            )
        return info

    def _pick(self, queues: list[MessageQueue], avoid: str | None) -> MessageQueue:
        n = len(queues)
        start = next(self._counter)
        if avoid is not None:
            for i in range(n):
                mq = queues[(start + i) % n]
                if mq.broker_name != avoid:
                    return mq
        return queues[start % n]

    def _refresh_later(self, topic: str) -> None:
        self._spawn(self._routes.refresh(topic, allow_default=True))

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(_reap(self._tasks))
        return task

    # ------------------------------------------------------------ sending

    def _encode(self, msg: Message) -> tuple[bytes, int, str, str]:
        """Check ``msg``; return (body, sysFlag, uniq id, properties string)."""
        check_topic(msg.topic)
        body = msg.body
        if len(body) > self.max_message_size:
            raise MessageTooLarge(len(body), self.max_message_size)
        if not body:
            raise MessageError("message body is empty")
        sys_flag = 0
        if len(body) >= self.compress_over:
            body = zlib.compress(body, 5)
            sys_flag = SYSFLAG_COMPRESSED
        uniq = self._ids.next_id()
        return body, sys_flag, uniq, wire_properties(msg, uniq)

    def _header(
        self, mq: MessageQueue, topic: str, sys_flag: int, flag: int, props: str, batch: bool
    ) -> dict[str, str]:
        return {
            "a": self.group, "b": topic, "c": DEFAULT_TOPIC, "d": self.default_topic_queue_nums,
            "e": str(mq.queue_id), "f": str(sys_flag), "g": str(int(time.time() * 1000)),
            "h": str(flag), "i": props, "j": "0", "k": "false", "m": "true" if batch else "false",
            "n": mq.broker_name,
        }

    async def _send_once(
        self, info: TopicRouteInfo, mq: MessageQueue, code: int, ext: dict[str, str],
        body: bytes, uniq: str, timeout: float,
    ) -> SendResult:
        addr = info.broker_addrs.get(mq.broker_name)
        if addr is None:
            raise BrokerError.for_code(
                ResponseCode.SERVICE_NOT_AVAILABLE, f"no master address for {mq.broker_name}"
            )
        resp = await self._pool.invoke(addr, code, ext, body, timeout=timeout)
        status = _STORED.get(resp.code)  # type: ignore[call-overload]
        if status is None:
            raise BrokerError.for_code(resp.code, resp.remark, addr)
        f = resp.ext_fields
        try:
            queue = MessageQueue(mq.topic, mq.broker_name, int(f["queueId"]))
            return SendResult(status, uniq, f["msgId"], queue, int(f["queueOffset"]))
        except (KeyError, ValueError) as err:
            raise BrokerError(resp.code, f"send response lacks {err}", addr) from None

    async def _send(
        self, topic: str, code: int, body: bytes, sys_flag: int, flag: int, props: str,
        uniq: str, batch: bool, selector: QueueSelector | None, arg: Any,
        queue: MessageQueue | None, timeout: float | None, msg: Message | None,
    ) -> SendResult:
        loop = asyncio.get_running_loop()
        budget = self.send_msg_timeout if timeout is None else timeout
        deadline = loop.time() + budget
        info = await self._route(topic)
        if queue is not None or selector is not None:
            mq = queue if queue is not None else selector(info.publish_queues, msg, arg)  # type: ignore[misc,arg-type]
            ext = self._header(mq, topic, sys_flag, flag, props, batch)
            return await self._send_once(info, mq, code, ext, body, uniq, budget)
        avoid: str | None = None
        last: ClientError | None = None
        for _ in range(1 + self.retry_times_when_send_failed):
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            mq = self._pick(info.publish_queues, avoid)
            ext = self._header(mq, topic, sys_flag, flag, props, batch)
            try:
                return await self._send_once(info, mq, code, ext, body, uniq, remaining)
            except ClientError as err:
                if not err.retriable:
                    raise
                last, avoid = err, mq.broker_name
                log.debug("send to %s failed (%s); retrying", mq, err)
                self._refresh_later(topic)
        if last is None:
            raise ClientError(f"send to {topic} timed out after {budget:.3f}s before an attempt")
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
        body, sys_flag, uniq, props = self._encode(msg)
        return await self._send(
            msg.topic, RequestCode.SEND_MESSAGE_V2, body, sys_flag, msg.flag, props, uniq,
            False, selector, arg, queue, timeout, msg,
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
        """
        if self._state != "running":
            raise ClientStateError(f"producer is {self._state}; call start() first")
        return self._spawn(self._send_with_callbacks(msg, on_success, on_exception, selector, arg))

    async def _send_with_callbacks(
        self, msg: Message, on_success: SendCallback | None, on_exception: SendCallback | None,
        selector: QueueSelector | None, arg: Any,
    ) -> SendResult | None:
        try:
            result = await self.send(msg, selector=selector, arg=arg)
        except ClientError as err:
            if on_exception is None:
                raise
            await _call(on_exception, err)
            return None
        if on_success is not None:
            await _call(on_success, result)
        return result

    async def send_oneway(self, msg: Message, *, queue: MessageQueue | None = None) -> None:
        """Send without waiting for an acknowledgement (one attempt, no result)."""
        body, sys_flag, uniq, props = self._encode(msg)
        info = await self._route(msg.topic)
        mq = queue if queue is not None else self._pick(info.publish_queues, None)
        addr = info.broker_addrs.get(mq.broker_name)
        if addr is None:
            raise BrokerError.for_code(ResponseCode.SERVICE_NOT_AVAILABLE, f"no master for {mq}")
        ext = self._header(mq, msg.topic, sys_flag, msg.flag, props, False)
        await self._pool.invoke_oneway(
            addr, RequestCode.SEND_MESSAGE_V2, ext, body, timeout=self.send_msg_timeout
        )

    async def send_batch(
        self, msgs: list[Message], *, queue: MessageQueue | None = None,
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
        if len(body) > self.max_message_size:
            raise MessageTooLarge(len(body), self.max_message_size)
        return await self._send(
            topic, RequestCode.SEND_BATCH_MESSAGE, body, 0, 0, "WAIT\x01true", ",".join(ids),
            True, None, None, queue, timeout, None,
        )


async def _call(fn: SendCallback, value: Any) -> None:
    try:
        out = fn(value)
        if inspect.isawaitable(out):
            await out
    except Exception:  # a user callback must not break the producer
        log.exception("send callback %r failed", fn)


def _reap(tasks: set[asyncio.Task[Any]]) -> Callable[[asyncio.Task[Any]], None]:
    def done(task: asyncio.Task[Any]) -> None:
        tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            if isinstance(exc, ClientError):
                log.warning("background send failed: %s", exc)
            else:
                log.error("background task failed", exc_info=exc)
    return done
