"""protocol/timer.py: the timer property rule and the recall handle codec."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kairosmq.protocol.properties import (
    START_DELIVER_TIME,
    TIMER_DELAY_MS,
    TIMER_DELAY_SEC,
    TIMER_DELIVER_MS,
)
from kairosmq.protocol.timer import (
    DEFAULT_TIMER_MAX_DELAY_MS,
    RecallHandle,
    RecallHandleInvalid,
    TimerIllegal,
    decode_recall_handle,
    has_timer,
    resolve_timer,
)

NOW = 1_700_000_000_000
DAY = 86_400_000


def resolve(props: dict[str, str], round_up: int = 0) -> int | None:
    return resolve_timer(props, NOW, DEFAULT_TIMER_MAX_DELAY_MS, round_up_ms=round_up)


@pytest.mark.parametrize(
    ("props", "due"),
    [
        ({TIMER_DELIVER_MS: str(NOW + 1)}, NOW + 1),
        ({TIMER_DELIVER_MS: str(NOW + 40 * DAY)}, NOW + 40 * DAY),
        ({TIMER_DELAY_MS: "1"}, NOW + 1),
        ({TIMER_DELAY_MS: "+250"}, NOW + 250),
        ({TIMER_DELAY_SEC: "3"}, NOW + 3000),
        ({START_DELIVER_TIME: str(NOW + 5000)}, NOW + 5000),
        # precedence: SEC > MS > DELIVER_MS > __STARTDELIVERTIME (RocketMQ's order, then ONS)
        ({TIMER_DELAY_SEC: "2", TIMER_DELAY_MS: "9", TIMER_DELIVER_MS: str(NOW + 7)}, NOW + 2000),
        ({TIMER_DELAY_MS: "9", TIMER_DELIVER_MS: str(NOW + 7)}, NOW + 9),
        ({TIMER_DELIVER_MS: str(NOW + 7), START_DELIVER_TIME: str(NOW + 8)}, NOW + 7),
    ],
)
def test_due_instants(props: dict[str, str], due: int) -> None:
    assert resolve(props) == due


@pytest.mark.parametrize(
    "props",
    [
        {},
        {TIMER_DELIVER_MS: str(NOW)},  # due now: delivered at once, as RocketMQ
        {TIMER_DELIVER_MS: "0"},
        {START_DELIVER_TIME: str(NOW - 1)},
        {TIMER_DELAY_MS: "0"},
        {TIMER_DELAY_SEC: "0"},
    ],
)
def test_not_a_timer_or_due_already(props: dict[str, str]) -> None:
    assert resolve(props) is None


@pytest.mark.parametrize(
    ("props", "words"),
    [
        ({TIMER_DELIVER_MS: "soon"}, "not a long"),
        ({TIMER_DELIVER_MS: " 5"}, "not a long"),
        ({TIMER_DELIVER_MS: "1.5"}, "not a long"),
        ({TIMER_DELAY_MS: "99999999999999999999"}, "not a long"),
        ({TIMER_DELAY_MS: "9223372036854775808"}, "64-bit"),
        ({TIMER_DELAY_MS: "-5"}, "negative"),
        ({TIMER_DELAY_SEC: "-1"}, "negative"),
        ({TIMER_DELIVER_MS: str(NOW + 40 * DAY + 1)}, "max delay 3456000000ms"),
        ({TIMER_DELAY_SEC: str(41 * 86_400)}, "max delay"),
    ],
)
def test_illegal(props: dict[str, str], words: str) -> None:
    with pytest.raises(TimerIllegal, match=words):
        resolve(props)


def test_relative_delays_round_up_never_early() -> None:
    assert resolve({TIMER_DELAY_MS: "10"}, round_up=1) == NOW + 11
    assert resolve({TIMER_DELIVER_MS: str(NOW + 10)}, round_up=1) == NOW + 10  # absolute


def test_has_timer() -> None:
    assert has_timer({START_DELIVER_TIME: "x"}) and not has_timer({"DELAY": "3"})


def test_recall_handle_is_rocketmq_v1_base64url() -> None:
    h = RecallHandle("TopicA", "broker-a", NOW + 5, "7F0000010001000000000000000A")
    enc = h.encode()
    # the documented form, computed independently
    raw = f"v1 TopicA broker-a {NOW + 5} 7F0000010001000000000000000A".encode()
    assert enc == base64.urlsafe_b64encode(raw).decode()
    assert decode_recall_handle(enc) == h
    assert decode_recall_handle(enc.rstrip("=")) == h  # Java's decoder takes no padding


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "!!!",
        base64.urlsafe_b64encode(b"v2 T b 1 k").decode(),
        base64.urlsafe_b64encode(b"v1 T b 1").decode(),
        "\u00e9t\u00e9",
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),
    ],
)
def test_bad_recall_handles(bad: str) -> None:
    with pytest.raises(RecallHandleInvalid, match="recall handle is invalid"):
        decode_recall_handle(bad)


def test_handle_timestamp_not_a_number_is_minus_one() -> None:
    enc = base64.urlsafe_b64encode(b"v1 T b soon k").decode()
    assert decode_recall_handle(enc).deliver_ms == -1


@given(
    st.from_regex(r"[A-Za-z0-9_%|-]{1,40}", fullmatch=True),
    st.from_regex(r"[A-Za-z0-9_-]{1,20}", fullmatch=True),
    st.integers(0, 2**62),
    st.from_regex(r"[0-9A-F]{32}", fullmatch=True),
)
def test_handle_round_trip(topic: str, broker: str, ts: int, key: str) -> None:
    h = RecallHandle(topic, broker, ts, key)
    assert decode_recall_handle(h.encode()) == h
