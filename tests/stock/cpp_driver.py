"""Drive the stock C++ client (librocketmq.so 2.1.0, through PyPI's ``rocketmq-python-cvs``
ctypes wrapper) against a kairosmq broker; run as a script by tests/stock/test_cpp_client.py.

Owns: one flow of the unmodified C++ producer and push consumers, printed as one JSON object
per line on stdout (the test reads them). Start a producer and two push consumers
(``okGroup`` on ``delayTopic``, ``failGroup`` on ``retryTopic``); send warm-up messages
until each consumer got one (so both have rebalanced and are pulling); send one delayed
message per level in ``delayLevels`` and ``plainCount`` plain ones to ``delayTopic``, then
``retry-me`` and, once that one succeeded, ``dlq-me`` to ``retryTopic``. ``failGroup``
answers RECONSUME_LATER for ``retry-me`` until ``reconsumeTimes == succeedAt`` and always
for ``dlq-me``, so the C++ client sends them back (CONSUMER_SEND_MSG_BACK) and the broker
redelivers them through ``%RETRY%<group>`` and finally dead-letters ``dlq-me``. Then print
``{"event": "waiting"}``, read one line from stdin (the test answers once the broker holds
the dead letter), shut everything down (UNREGISTER_CLIENT) and print ``{"event": "done"}``.

Invariants: the C++ library runs only in this process, so a native crash cannot take pytest
down; the process ends with ``os._exit`` after ``done`` (the wrapper's destructors would shut
the clients down a second time); every wait has a deadline (``timeoutMs``) and ends the
process with a ``fatal`` event and exit status 1.

Each consumer has its own instance name (so its own client instance and connection): two
consumers sharing the default instance sometimes leave the second idle until the client's
periodic 10 s rebalance, although the broker notified it (code 40) at once.

Only one message fails at a time: when one pull brings several messages, the C API calls
the callback for them in turn, stops at the first RECONSUME_LATER and sends the rest back
too without showing them to the callback (seen here as ``dlq-me`` skipping from
reconsumeTimes 0 to 2 when it was pulled together with ``retry-me``).

Two workarounds for the client, not the broker (docs/stock-clients.md):
* message trace is turned on for the consumers: this build's ``ShutdownPushConsumer``
  dereferences the trace producer, which exists only when trace is on (SIGSEGV otherwise);
* the failing consumer is registered through the wrapper's own ``Subscribe`` /
  ``_register_callback`` path with a callback that returns the C++ consume status: the
  wrapper's public ``subscribe()`` turns an exception into an ignored ctypes callback error,
  so the message counts as consumed and is never sent back.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import time
from typing import Any

from rocketmq.client import Message, Producer, PushConsumer, RecvMessage
from rocketmq.exceptions import ffi_check
from rocketmq.ffi import _CConsumeStatus, dll

cfg: dict[str, Any] = json.loads(sys.argv[1])
TRACE_OPEN = 0  # CTraceModel {OPEN, CLOSE} in the C API's CCommon.h
dll.SetPushConsumerMessageTrace.argtypes = [ctypes.c_void_p, ctypes.c_int]
dll.SetPushConsumerMessageTrace.restype = ctypes.c_int
_out_lock = threading.Lock()
_cond = threading.Condition()
_seen: dict[str, list[str]] = {}


def out(**obj: Any) -> None:
    line = json.dumps({"at": int(time.time() * 1000), **obj})
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def describe(msg: RecvMessage) -> dict[str, Any]:
    return {
        "msgId": msg.id,
        "topic": msg.topic,
        "queueId": msg.queue_id,
        "queueOffset": msg.queue_offset,
        "commitLogOffset": msg.commit_log_offset,
        "tags": _text(msg.tags),
        "keys": _text(msg.keys),
        "body": _text(msg.body),
        "reconsumeTimes": msg.reconsume_times,
        "bornTimestamp": msg.born_timestamp,
        "storeTimestamp": msg.store_timestamp,
        "delayLevel": msg.delay_time_level,
        "retryTopic": _text(msg.get_property("RETRY_TOPIC")) or None,
        "originMessageId": _text(msg.get_property("ORIGIN_MESSAGE_ID")) or None,
        "uniqKey": _text(msg.get_property("UNIQ_KEY")) or None,
    }


def record(group: str, key: str) -> None:
    with _cond:
        _seen.setdefault(group, []).append(key)
        _cond.notify_all()


def seen(group: str, key: str) -> bool:
    return key in _seen.get(group, [])


def wait_for(pred: Any, what: str, on_tick: Any = None) -> None:
    """Wait until ``pred()``; call ``on_tick()`` (outside the lock) every 0.5 s meanwhile."""
    deadline = time.monotonic() + cfg["timeoutMs"] / 1000
    while True:
        left = deadline - time.monotonic()
        with _cond:
            if _cond.wait_for(pred, timeout=max(0.0, min(left, 0.5))):
                return
        if left <= 0:
            raise TimeoutError(f"timed out waiting for {what}; seen: {_seen}")
        if on_tick is not None:
            on_tick()


def main() -> None:
    log_dir = cfg["logDir"]
    producer = Producer(cfg["producerGroup"])
    producer.set_namesrv_addr(cfg["nameSrv"])
    producer.set_log_root_path(log_dir)
    producer.start()
    out(event="producer.ready")

    def send(topic: str, tag: str, body: str, keys: str, level: int = 0) -> None:
        msg = Message(topic)
        msg.set_tags(tag)
        msg.set_keys(keys)
        msg.set_body(body)
        if level:
            msg.set_delay_time_level(level)
        sent_at = int(time.time() * 1000)
        r = producer.send_sync(msg)
        out(
            event="sent",
            topic=topic,
            body=body,
            keys=keys,
            level=level,
            sentAt=sent_at,
            msgId=r.msg_id,
            sendStatus=r.status.name,
            queueOffset=r.offset,
        )

    ok = PushConsumer(cfg["okGroup"])
    ok.set_namesrv_addr(cfg["nameSrv"])
    ok.set_log_root_path(log_dir)
    ok.set_thread_count(2)
    ok.set_instance_name("kairos-ok")
    ffi_check(dll.SetPushConsumerMessageTrace(ok._handle, TRACE_OPEN))

    def on_ok(msg: RecvMessage) -> None:
        info = describe(msg)
        out(event="consumed", group=cfg["okGroup"], **info)
        record(cfg["okGroup"], info["body"])

    ok.subscribe(cfg["delayTopic"], on_ok)

    fail = PushConsumer(cfg["failGroup"])
    fail.set_namesrv_addr(cfg["nameSrv"])
    fail.set_log_root_path(log_dir)
    fail.set_thread_count(2)
    fail.set_instance_name("kairos-fail")
    ffi_check(dll.SetPushConsumerMessageTrace(fail._handle, TRACE_OPEN))

    def on_fail(_consumer: Any, handle: Any) -> int:
        info = describe(RecvMessage(handle))
        body, times = info["body"], info["reconsumeTimes"]
        failing = (body == "retry-me" and times < cfg["succeedAt"]) or body == "dlq-me"
        out(event="attempt.failed" if failing else "consumed", group=cfg["failGroup"], **info)
        record(cfg["failGroup"], f"{body}#{times}")
        status = _CConsumeStatus.RECONSUME_LATER if failing else _CConsumeStatus.CONSUME_SUCCESS
        return int(status.value)

    ffi_check(dll.Subscribe(fail._handle, cfg["retryTopic"].encode(), b"*"))
    fail._register_callback(on_fail)

    ok.start()
    fail.start()
    out(event="consumers.ready")

    warm = {"n": 0}

    def send_warm() -> None:
        # Sent until each consumer has seen one, so the test's messages are sent only once
        # both consumers have queues assigned and are pulling.
        if not any(b.startswith("warm-delay") for b in _seen.get(cfg["okGroup"], [])):
            send(cfg["delayTopic"], "Warm", f"warm-delay-{warm['n']}", "warm")
        if not any(b.startswith("warm-retry") for b in _seen.get(cfg["failGroup"], [])):
            send(cfg["retryTopic"], "Warm", f"warm-retry-{warm['n']}", "warm")
        warm["n"] += 1

    send_warm()
    wait_for(
        lambda: (
            any(b.startswith("warm-delay") for b in _seen.get(cfg["okGroup"], []))
            and any(b.startswith("warm-retry") for b in _seen.get(cfg["failGroup"], []))
        ),
        "warm-up",
        on_tick=send_warm,
    )
    out(event="warm.consumed")

    expect_ok = []
    for level in cfg["delayLevels"]:
        body = f"delayed-level-{level}"
        send(cfg["delayTopic"], "TagDelay", body, f"key-{body}", level)
        expect_ok.append(body)
    for i in range(cfg["plainCount"]):
        body = f"plain-{i}"
        send(cfg["delayTopic"], "TagPlain", body, f"key-{body}")
        expect_ok.append(body)
    # One failing message at a time: a pull that brings two messages to the C API's callback
    # stops at the first failure and sends the rest back unseen (see the module docstring).
    send(cfg["retryTopic"], "TagRetry", "retry-me", "key-retry-me")
    wait_for(lambda: all(seen(cfg["okGroup"], b) for b in expect_ok), "delayed and plain messages")
    wait_for(lambda: seen(cfg["failGroup"], f"retry-me#{cfg['succeedAt']}"), "retry-me to succeed")
    send(cfg["retryTopic"], "TagRetry", "dlq-me", "key-dlq-me")
    wait_for(
        lambda: seen(cfg["failGroup"], f"dlq-me#{cfg['maxReconsumeTimes']}"), "dlq-me last attempt"
    )
    out(event="waiting")
    sys.stdin.readline()
    out(event="closing")
    for name, client in (("okConsumer", ok), ("failConsumer", fail), ("producer", producer)):
        client.shutdown()
        out(event="shutdown", who=name)
    out(event="done")


if __name__ == "__main__":
    try:
        main()
    except BaseException as exc:  # noqa: BLE001 - reported to the test, then exit 1
        out(event="fatal", message=f"{type(exc).__name__}: {exc}")
        os._exit(1)
    os._exit(0)
