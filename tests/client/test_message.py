"""Outgoing messages (client/message.py): the wire properties a Message carries."""

from __future__ import annotations

from kairosmq.client import (
    Message,
)
from kairosmq.client.message import wire_properties
from kairosmq.protocol.properties import decode_properties


def test_wire_properties_carry_system_fields_and_user_props() -> None:
    msg = Message(
        "T",
        "hé",
        tags="TagA",
        keys=["k1", "k2"],
        delay_level=3,
        properties={"color": "red", "empty": ""},
    )
    assert msg.body == "hé".encode()
    props = decode_properties(wire_properties(msg, "ABC"))
    assert props == {
        "color": "red",
        "TAGS": "TagA",
        "KEYS": "k1 k2",
        "DELAY": "3",
        "UNIQ_KEY": "ABC",
        "WAIT": "true",
    }


def test_wire_properties_bytes_user_first_then_system_in_order() -> None:
    msg = Message(
        "T",
        b"x",
        tags="TagA",
        keys="k1",
        delay_level=2,
        properties={"color": "red", "": "no name", "empty": "", "UNIQ_KEY": "OLD"},
    )
    assert wire_properties(msg, "ABC") == (
        "color\x01red\x02TAGS\x01TagA\x02KEYS\x01k1\x02DELAY\x012\x02UNIQ_KEY\x01ABC"
        "\x02WAIT\x01true"
    )
    # no id generated: the message's own UNIQ_KEY goes as a user property; no WAIT
    assert (
        wire_properties(Message("T", b"x", properties={"UNIQ_KEY": "OLD"}), None, wait=False)
        == "UNIQ_KEY\x01OLD"
    )


def test_wire_properties_fields_win_over_user_properties_of_the_same_name() -> None:
    msg = Message("T", b"x", tags="Field", properties={"TAGS": "User", "KEYS": "uk"})
    assert decode_properties(wire_properties(msg, None)) == {
        "TAGS": "Field",
        "KEYS": "uk",
        "WAIT": "true",
    }
