"""Outgoing messages (client/message.py): the wire properties a Message carries."""

from __future__ import annotations

from kairosmq.client import (
    Message,
)
from kairosmq.client.message import wire_properties
from kairosmq.protocol.properties import decode_properties


def test_wire_properties_carry_system_fields_and_user_props() -> None:
    msg = Message("T", "hé", tags="TagA", keys=["k1", "k2"], delay_level=3,
                  properties={"color": "red", "empty": ""})
    assert msg.body == "hé".encode()
    props = decode_properties(wire_properties(msg, "ABC"))
    assert props == {"color": "red", "TAGS": "TagA", "KEYS": "k1 k2", "DELAY": "3",
                     "UNIQ_KEY": "ABC", "WAIT": "true"}
