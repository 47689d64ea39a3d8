"""client/options.py and how Producer / PushConsumer take options: an options value, keyword
overrides on top, RocketMQ's defaults, range checks naming the field."""

from __future__ import annotations

import pytest
from kairosmq.client import InvalidName, MessageModel, Producer, PushConsumer
from kairosmq.client.options import (
    ClientConfig,
    ConsumeFromWhere,
    ProducerOptions,
    PushConsumerOptions,
    build_options,
)
from kairosmq.protocol.codes import SerializeType


def test_rocketmq_defaults() -> None:
    p, c = ProducerOptions(), PushConsumerOptions()
    assert (
        p.producer_group,
        p.create_topic_key,
        p.send_msg_timeout,
        p.retry_times_when_send_failed,
        p.max_message_size,
        p.compress_msg_body_over_howmuch,
    ) == ("DEFAULT_PRODUCER", "TBW102", 3.0, 2, 4 * 1024 * 1024, 4096)
    assert (
        c.consumer_group,
        c.message_model,
        c.consume_from_where,
        c.pull_batch_size,
        c.consume_message_batch_max_size,
        c.max_reconsume_times,
        c.consume_timeout,
        c.pull_interval,
    ) == (
        "DEFAULT_CONSUMER",
        MessageModel.CLUSTERING,
        ConsumeFromWhere.LAST_OFFSET,
        32,
        1,
        None,
        15.0,
        0,
    )
    assert (
        c.poll_name_server_interval,
        c.heartbeat_broker_interval,
        c.persist_consumer_offset_interval,
        c.serialize_type,
    ) == (30.0, 30.0, 5.0, SerializeType.JSON)
    assert isinstance(p, ClientConfig) and isinstance(c, ClientConfig)


def test_keyword_overrides_apply_on_top_of_an_options_value() -> None:
    base = ProducerOptions(send_msg_timeout=1.5, retry_times_when_send_failed=5)
    p = Producer("PG", "10.0.0.1:9876", options=base, retry_times_when_send_failed=0)
    assert (
        p.options.producer_group,
        p.options.namesrv_addr,
        p.options.send_msg_timeout,
        p.options.retry_times_when_send_failed,
    ) == ("PG", "10.0.0.1:9876", 1.5, 0)
    assert base.retry_times_when_send_failed == 5  # the caller's value is not changed
    assert p.group == "PG" and p.send_msg_timeout == 1.5


def test_consumer_keywords_keep_working() -> None:
    c = PushConsumer(
        "CG",
        "127.0.0.1:1",
        message_model=MessageModel.BROADCASTING,
        consume_thread_max=4,
        request_timeout=1.25,
        instance_name="x",
    )
    assert c.options.message_model is MessageModel.BROADCASTING
    assert c.options.thread_min == 4  # None means min(20, consume_thread_max)
    assert c.options.mq_client_api_timeout == c.request_timeout == 1.25
    assert c.client_id.endswith("@x")
    assert Producer("PG", client_ip="10.1.2.3").client_id.startswith("10.1.2.3@")
    opts = PushConsumerOptions(consumer_group="FromOptions", pull_batch_size=8)
    assert PushConsumer(options=opts).group == "FromOptions"


@pytest.mark.parametrize(
    ("cls", "kw", "field"),
    [
        (PushConsumerOptions, {"pull_batch_size": 0}, "pull_batch_size"),
        (
            PushConsumerOptions,
            {"consume_message_batch_max_size": 2000},
            "consume_message_batch_max_size",
        ),
        (
            PushConsumerOptions,
            {"consume_thread_min": 30, "consume_thread_max": 20},
            "consume_thread_min",
        ),
        (PushConsumerOptions, {"consume_timeout": 0}, "consume_timeout"),
        (PushConsumerOptions, {"pull_interval": -1}, "pull_interval"),
        (ProducerOptions, {"send_msg_timeout": 0}, "send_msg_timeout"),
        (ProducerOptions, {"retry_times_when_send_failed": -1}, "retry_times_when_send_failed"),
        (ProducerOptions, {"max_message_size": 0}, "max_message_size"),
        (ClientConfig, {"heartbeat_broker_interval": 0}, "heartbeat_broker_interval"),
        (ClientConfig, {"client_ip": "::1"}, "client_ip"),
    ],
)
def test_out_of_range_values_name_the_field(cls: type, kw: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        cls(**kw)


def test_unknown_keyword_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="send_msg_timout"):
        Producer("PG", send_msg_timout=1.0)
    with pytest.raises(TypeError, match="options must be PushConsumerOptions"):
        build_options(PushConsumerOptions, ProducerOptions())  # type: ignore[arg-type]


def test_bad_group_is_refused_before_anything_starts() -> None:
    with pytest.raises(InvalidName):
        Producer("bad group")
    with pytest.raises(InvalidName):
        PushConsumer(options=PushConsumerOptions(consumer_group="x" * 300))
