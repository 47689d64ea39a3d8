"""Request builders shared by the broker integration tests (raw protocol, no client)."""

from __future__ import annotations

from typing import Any

from kairosmq.protocol.codes import RequestCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.properties import encode_properties

from tests.wire import RawPeer


def send_ext(topic: str, props: dict[str, str] | None = None, queue_id: int = 0,
             **extra: Any) -> dict[str, Any]:
    ext: dict[str, Any] = {"a": "PG", "b": topic, "c": "TBW102", "d": 4, "e": queue_id,
                           "f": 0, "g": 1700000000000, "h": 0,
                           "i": encode_properties(props or {})}
    ext.update(extra)
    return ext


async def send(peer: RawPeer, topic: str, body: bytes = b"x", props: dict[str, str] | None = None,
               queue_id: int = 0, **extra: Any) -> RemotingCommand:
    return await peer.call(RequestCode.SEND_MESSAGE_V2, send_ext(topic, props, queue_id, **extra),
                           body)


async def pull(peer: RawPeer, topic: str, queue_id: int = 0, offset: int = 0, *,
               group: str = "G", sys_flag: int = 0, suspend_ms: int = 1000, max_n: int = 32,
               subscription: str | None = None, timeout: float = 5.0) -> RemotingCommand:
    ext: dict[str, Any] = {"consumerGroup": group, "topic": topic, "queueId": queue_id,
                           "queueOffset": offset, "maxMsgNums": max_n, "sysFlag": sys_flag,
                           "commitOffset": 0, "suspendTimeoutMillis": suspend_ms,
                           "subVersion": 0}
    if subscription is not None:
        ext["subscription"] = subscription
    return await peer.call(RequestCode.PULL_MESSAGE, ext, timeout=timeout)
