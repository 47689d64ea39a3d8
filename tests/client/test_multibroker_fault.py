"""The producer's latency fault tolerance (client/producer/fault.py): RocketMQ 4.9's MQFaultStrategy
and LatencyFaultToleranceImpl semantics on a fake clock, plus the queue choice over the
queues of two brokers with and without it."""

from __future__ import annotations

from collections import Counter

import pytest
from kairosmq.client import Producer
from kairosmq.client.message import MessageQueue
from kairosmq.client.options import LATENCY_MAX, NOT_AVAILABLE_DURATION, ProducerOptions
from kairosmq.client.producer.fault import (
    ISOLATION_LATENCY_MILLIS,
    FaultStrategy,
    LatencyFaultTolerance,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


QUEUES = [MessageQueue("T", b, q) for b in ("broker-a", "broker-b") for q in range(4)]


def strategy(
    enabled: bool = True, backing_off: set[str] | None = None, clock: FakeClock | None = None
) -> tuple[FaultStrategy, FakeClock]:
    clock = clock or FakeClock()
    off = backing_off if backing_off is not None else set()
    return FaultStrategy(enabled, clock=clock, backing_off=off.__contains__), clock


def test_java_tables_and_not_available_duration() -> None:
    assert LATENCY_MAX == (50, 100, 550, 1000, 2000, 3000, 15000)
    assert NOT_AVAILABLE_DURATION == (0, 0, 30000, 60000, 120000, 180000, 600000)
    s, _ = strategy()
    cases = {
        0: 0,
        49: 0,
        50: 0,
        549: 0,
        550: 30000,
        999: 30000,
        1000: 60000,
        2000: 120000,
        3000: 180000,
        14999: 180000,
        15000: 600000,
        ISOLATION_LATENCY_MILLIS: 600000,
    }
    assert {lat: s.not_available_for(lat) for lat in cases} == cases


def test_a_failed_send_isolates_its_broker_until_the_duration_passes() -> None:
    s, clock = strategy()
    s.update("broker-b", 12.0, isolation=True)  # e.g. connection refused after 12 ms
    assert not s.tolerance.is_available("broker-b")
    picks = {s.select(QUEUES, None).broker_name for _ in range(20)}
    assert picks == {"broker-a"}
    clock.now += 600000 - 1
    assert not s.tolerance.is_available("broker-b")
    clock.now += 1
    assert s.tolerance.is_available("broker-b")
    assert {s.select(QUEUES, None).broker_name for _ in range(8)} == {"broker-a", "broker-b"}


def test_slow_answers_rest_a_broker_fast_ones_do_not() -> None:
    s, clock = strategy()
    s.update("broker-a", 120.0, isolation=False)  # < 550 ms: no rest
    assert s.tolerance.is_available("broker-a")
    s.update("broker-a", 600.0, isolation=False)  # >= 550 ms: 30 s
    assert not s.tolerance.is_available("broker-a")
    clock.now += 30000
    assert s.tolerance.is_available("broker-a")
    s.update("broker-a", 5.0, isolation=False)  # a fast answer clears it at once
    assert s.tolerance.is_available("broker-a")


def test_disabled_records_nothing_and_only_skips_the_last_broker() -> None:
    s, _ = strategy(enabled=False)
    s.update("broker-b", 20000.0, isolation=True)
    assert s.tolerance.items() == {}
    assert {s.select(QUEUES, "broker-b").broker_name for _ in range(10)} == {"broker-a"}
    spread = Counter(s.select(QUEUES, None) for _ in range(80))
    assert set(spread) == set(QUEUES) and set(spread.values()) == {10}  # round robin


def test_every_broker_resting_still_picks_the_least_bad_one() -> None:
    s, clock = strategy()
    s.update("broker-a", 3000.0, isolation=False)  # rests 180 s
    clock.now += 1
    s.update("broker-b", 1000.0, isolation=False)  # rests 60 s, lower latency
    mq = s.select(QUEUES, None)
    # two items: half = 1, so the best of the sorted table (lowest latency) is taken
    assert mq.broker_name == "broker-b" and 0 <= mq.queue_id < 4


def test_pick_one_at_least_orders_available_then_latency_then_end() -> None:
    clock = FakeClock()
    t = LatencyFaultTolerance(clock)
    assert t.pick_one_at_least() is None
    t.update("slow", 900, 60000)
    t.update("fast", 100, 60000)
    t.update("ok", 2000, 0)  # available again: first despite its latency
    t.update("late", 100, 90000)
    # 4 items, half = 2: it rotates over the best two (ok, fast)
    assert {t.pick_one_at_least() for _ in range(4)} == {"ok", "fast"}
    t.remove("ok")
    t.remove("fast")
    assert {t.pick_one_at_least() for _ in range(4)} == {"late"}


def test_a_broker_the_route_lost_is_removed_from_the_table() -> None:
    s, _ = strategy()
    s.update("gone", 0, isolation=True)
    s.update("broker-a", 0, isolation=True)
    s.update("broker-b", 0, isolation=True)
    only_a = [q for q in QUEUES if q.broker_name == "broker-a"]
    assert s.select(only_a, None) in only_a  # "gone" ranks first (inserted first): dropped
    assert "gone" not in s.tolerance.items()
    assert {s.select(only_a, None) for _ in range(6)} <= set(only_a)


@pytest.mark.parametrize("enabled", [False, True])
def test_a_broker_in_connect_backoff_is_skipped_while_another_works(enabled: bool) -> None:
    off = {"broker-b"}
    s, _ = strategy(enabled, backing_off=off)
    assert {s.select(QUEUES, None).broker_name for _ in range(16)} == {"broker-a"}
    off.add("broker-a")  # both back off: still a queue (remoting waits or fails fast)
    assert s.select(QUEUES, None) in QUEUES
    off.clear()
    assert {s.select(QUEUES, None).broker_name for _ in range(16)} == {"broker-a", "broker-b"}


def test_round_robin_prefers_the_failed_broker_over_one_in_backoff() -> None:
    """Broker a just failed (e.g. timed out), b is dead (connect refused): retry on a."""
    s, _ = strategy(enabled=False, backing_off={"broker-b"})
    assert {s.select(QUEUES, "broker-a").broker_name for _ in range(8)} == {"broker-a"}


def test_options_carry_the_java_names_and_check_the_table() -> None:
    o = ProducerOptions()
    assert (o.send_latency_fault_enable, o.latency_max, o.not_available_duration) == (
        False,
        LATENCY_MAX,
        NOT_AVAILABLE_DURATION,
    )
    o = ProducerOptions(latency_max=[10, 20], not_available_duration=[0, 500])
    assert o.latency_max == (10, 20) and o.not_available_duration == (0, 500)
    with pytest.raises(ValueError, match="same length"):
        ProducerOptions(latency_max=(1, 2), not_available_duration=(0,))
    with pytest.raises(ValueError, match="ascend"):
        ProducerOptions(latency_max=(20, 10), not_available_duration=(0, 0))
    p = Producer(
        "PG",
        "127.0.0.1:9",
        send_latency_fault_enable=True,
        latency_max=(10,),
        not_available_duration=(777,),
    )
    assert p._fault.enabled and p._fault.not_available_for(10) == 777
    assert not Producer("PG", "127.0.0.1:9")._fault.enabled
