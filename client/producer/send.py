"""One send's description and the queue selectors RocketMQ ships.

Owns: ``SendRequest`` (what goes on the wire and where it may go), ``QueueSelector``,
``hash_selector`` (RocketMQ's SelectMessageQueueByHash) and the response codes that mean
"stored" (``STORED``). The Producer (client/producer/producer.py) sends them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.message import java_string_hash

from ..message import Message, MessageQueue, SendStatus
from .request import is_reply

QueueSelector = Callable[[list[MessageQueue], Message, Any], MessageQueue]

STORED = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


@dataclass(slots=True)
class SendRequest:
    """One send: the encoded payload and where it may go.

    ``body``/``sys_flag``/``flag``/``properties`` go on the wire as they are; ``uniq`` is the
    msgId reported back (comma-joined for a batch). ``queue`` pins the queue, ``selector``
    picks one from ``(queues, msg, arg)``; either means one attempt. Otherwise up to
    ``1 + retries`` attempts within ``timeout`` seconds (None: ``send_msg_timeout``).
    """

    topic: str
    body: bytes
    uniq: str
    properties: str
    sys_flag: int = 0
    flag: int = 0
    batch: bool = False
    queue: MessageQueue | None = None
    selector: QueueSelector | None = None
    arg: Any = None
    msg: Message | None = None
    timeout: float | None = None
    retries: int = 0

    @property
    def code(self) -> int:
        if self.msg is not None and is_reply(self.msg):  # REPLY: create_reply's message
            return RequestCode.SEND_REPLY_MESSAGE_V2
        return RequestCode.SEND_BATCH_MESSAGE if self.batch else RequestCode.SEND_MESSAGE_V2

    @property
    def pinned(self) -> bool:
        """True when the queue is fixed (explicit queue or selector): no retries."""
        return self.queue is not None or self.selector is not None


def hash_selector(queues: list[MessageQueue], _msg: Message, arg: Any) -> MessageQueue:
    """RocketMQ's SelectMessageQueueByHash, stable across processes (Java hash of str)."""
    key = java_string_hash(arg) if isinstance(arg, str) else int(arg)
    return queues[abs(key) % len(queues)]
