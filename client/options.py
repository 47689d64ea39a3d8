"""Client options: RocketMQ's ClientConfig, DefaultMQProducer and DefaultMQPushConsumer knobs.

Owns: ``ClientConfig`` (what every client has: name server, instance name, client ip,
timers, request timeout), ``ProducerOptions`` and ``PushConsumerOptions`` (each extends
``ClientConfig``, as RocketMQ's ``DefaultMQProducer`` / ``DefaultMQPushConsumer`` extend
``ClientConfig``), and ``build_options`` (an options value from an optional base plus
keyword overrides, the way ``Producer(...)`` and ``PushConsumer(...)`` accept both).

Names are RocketMQ's in snake_case, defaults are RocketMQ's. Units: fields ending in
``_millis`` and ``pull_interval`` are milliseconds and ``consume_timeout`` is minutes, as
in RocketMQ; other intervals and timeouts (``poll_name_server_interval``,
``send_msg_timeout``, ...) are seconds as floats, the asyncio convention (RocketMQ's
30000 ms is 30.0 here).

Invariants:
* Every field is documented in docs/client.md, in the table of the class that declares it,
  with its default (tests/client/test_options_doc.py checks both ways).
* ``validate()`` runs when a value is built (``__post_init__``) and raises ``ValueError``
  naming the field; a client never starts with options RocketMQ would refuse.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import ssl
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from kairosmq.protocol.codes import SerializeType
from kairosmq.protocol.naming import AUTO_CREATE_TOPIC_KEY

Opts = TypeVar("Opts", bound="ClientConfig")

MAX_MESSAGE_SIZE = 4 * 1024 * 1024
# RocketMQ 4.9's MQFaultStrategy tables (ms), the defaults of ``latency_max`` and
# ``not_available_duration``; client/producer/fault.py applies them
LATENCY_MAX = (50, 100, 550, 1000, 2000, 3000, 15000)
NOT_AVAILABLE_DURATION = (0, 0, 30000, 60000, 120000, 180000, 600000)


class MessageModel(Enum):
    """How a consumer group shares a topic's queues."""

    CLUSTERING = "CLUSTERING"
    BROADCASTING = "BROADCASTING"


class ConsumeFromWhere(Enum):
    """Where a group without a stored offset starts (RocketMQ's CONSUME_FROM_* values)."""

    LAST_OFFSET = "CONSUME_FROM_LAST_OFFSET"
    FIRST_OFFSET = "CONSUME_FROM_FIRST_OFFSET"
    TIMESTAMP = "CONSUME_FROM_TIMESTAMP"


@dataclass(slots=True)
class ClientConfig:
    """RocketMQ's ClientConfig: what producers and consumers share."""

    namesrv_addr: str | list[str] = "127.0.0.1:9876"
    instance_name: str | None = None
    client_ip: str | None = None
    poll_name_server_interval: float = 30.0
    heartbeat_broker_interval: float = 30.0
    persist_consumer_offset_interval: float = 5.0
    pull_time_delay_millis_when_exception: int = 3000
    mq_client_api_timeout: float = 3.0
    serialize_type: SerializeType = SerializeType.JSON
    # ACL and TLS (client/credentials.py, docs/security.md): None keys fall back to the environment
    access_key: str | None = None
    secret_key: str | None = None
    tls: bool | ssl.SSLContext = False

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        _positive(
            self,
            "poll_name_server_interval",
            "heartbeat_broker_interval",
            "persist_consumer_offset_interval",
            "mq_client_api_timeout",
        )
        _in_range(self, 0, None, "pull_time_delay_millis_when_exception")
        if self.client_ip is not None:
            try:
                ipaddress.IPv4Address(self.client_ip)  # it goes into message ids (4 bytes)
            except ValueError:
                raise ValueError(
                    f"client_ip must be an IPv4 address, got {self.client_ip!r}"
                ) from None
        if (self.access_key is None) != (self.secret_key is None):
            raise ValueError("access_key and secret_key go together: give both, or neither")
        if not isinstance(self.tls, bool | ssl.SSLContext):
            raise ValueError(
                f"tls must be True, False or an ssl.SSLContext, got {type(self.tls).__name__}"
            )


@dataclass(slots=True)
class ProducerOptions(ClientConfig):
    """RocketMQ's DefaultMQProducer knobs (plus ``ClientConfig``)."""

    producer_group: str = "DEFAULT_PRODUCER"
    create_topic_key: str = AUTO_CREATE_TOPIC_KEY
    default_topic_queue_nums: int = 4
    send_msg_timeout: float = 3.0
    compress_msg_body_over_howmuch: int = 4096
    retry_times_when_send_failed: int = 2
    retry_times_when_send_async_failed: int = 2
    max_message_size: int = MAX_MESSAGE_SIZE
    # MQFaultStrategy (client/producer/fault.py): latency fault tolerance across brokers
    send_latency_fault_enable: bool = False
    latency_max: tuple[int, ...] = LATENCY_MAX
    not_available_duration: tuple[int, ...] = NOT_AVAILABLE_DURATION

    def validate(self) -> None:
        ClientConfig.validate(self)
        _positive(self, "send_msg_timeout")
        self.latency_max = tuple(int(v) for v in self.latency_max)
        self.not_available_duration = tuple(int(v) for v in self.not_available_duration)
        if len(self.latency_max) != len(self.not_available_duration):
            raise ValueError("latency_max and not_available_duration need the same length")
        if (
            list(self.latency_max) != sorted(self.latency_max)
            or min(self.latency_max + self.not_available_duration, default=0) < 0
        ):
            raise ValueError("latency_max must ascend and no latency or duration be negative")
        _in_range(self, 1, None, "max_message_size")
        _in_range(
            self,
            0,
            None,
            "retry_times_when_send_failed",
            "retry_times_when_send_async_failed",
            "compress_msg_body_over_howmuch",
        )
        _in_range(self, 1, 1024, "default_topic_queue_nums")


@dataclass(slots=True)
class PushConsumerOptions(ClientConfig):
    """RocketMQ's DefaultMQPushConsumer knobs (plus ``ClientConfig``)."""

    consumer_group: str = "DEFAULT_CONSUMER"
    message_model: MessageModel = MessageModel.CLUSTERING
    consume_from_where: ConsumeFromWhere = ConsumeFromWhere.LAST_OFFSET
    consume_timestamp: int | None = None
    consume_thread_min: int | None = None
    consume_thread_max: int = 20
    consume_message_batch_max_size: int = 1
    pull_batch_size: int = 32
    pull_threshold_for_queue: int = 1000
    pull_interval: int = 0
    max_reconsume_times: int | None = None
    suspend_current_queue_time_millis: int = 1000
    consume_timeout: float = 15.0
    rebalance_interval: float = 20.0
    lock_renew_interval: float = 20.0
    offset_store_dir: str | Path | None = None
    await_termination_seconds: float = 5.0

    @property
    def thread_min(self) -> int:
        """``consume_thread_min``, or ``min(20, consume_thread_max)`` when it is None."""
        if self.consume_thread_min is None:
            return min(20, self.consume_thread_max)
        return self.consume_thread_min

    def validate(self) -> None:
        ClientConfig.validate(self)
        if not 1 <= self.thread_min <= self.consume_thread_max:
            raise ValueError("need 1 <= consume_thread_min <= consume_thread_max")
        _in_range(self, 1, 1024, "consume_message_batch_max_size", "pull_batch_size")
        _in_range(self, 1, None, "pull_threshold_for_queue")
        _in_range(
            self,
            0,
            None,
            "pull_interval",
            "suspend_current_queue_time_millis",
            "await_termination_seconds",
        )
        _positive(self, "consume_timeout", "rebalance_interval", "lock_renew_interval")
        if self.max_reconsume_times is not None and self.max_reconsume_times < -1:
            raise ValueError("max_reconsume_times must be >= -1 (or None)")


def _positive(opts: object, *names: str) -> None:
    for name in names:
        if not getattr(opts, name) > 0:
            raise ValueError(f"{name} must be > 0, got {getattr(opts, name)!r}")


def _in_range(opts: object, low: int, high: int | None, *names: str) -> None:
    for name in names:
        value = getattr(opts, name)
        if value < low or (high is not None and value > high):
            bound = f"within {low}..{high}" if high is not None else f">= {low}"
            raise ValueError(f"{name} must be {bound}, got {value!r}")


def build_options(cls: type[Opts], base: Opts | None, **overrides: Any) -> Opts:
    """``base`` (or the defaults of ``cls``) with ``overrides`` applied; ``None`` overrides
    are skipped so a positional default can pass through. An unknown name is a TypeError,
    as an unknown keyword argument would be."""
    given = {k: v for k, v in overrides.items() if v is not None}
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(given) - names)
    if unknown:
        raise TypeError(f"unknown {cls.__name__} option(s): {', '.join(unknown)}")
    if base is None:
        return cls(**given)
    if not isinstance(base, cls):
        raise TypeError(f"options must be {cls.__name__}, got {type(base).__name__}")
    return dataclasses.replace(base, **given) if given else base
