"""Unit tests of QueryMessageProcessor (server/handlers/admin/messages.py) on a real store and
key index."""

from __future__ import annotations

from typing import Any

from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.message import decode_record, decode_records
from kairosmq.protocol.properties import KEYS, UNIQ_KEY
from kairosmq.server.handlers.admin.messages import QueryMessageProcessor

from tests.server.handlers.rig import Services, req


def _query(s: Services) -> QueryMessageProcessor:
    return QueryMessageProcessor(reads=s.store, index=s.broker.index)


async def test_view_by_offset_checks_the_record_start(services: Services) -> None:
    r = services.store_message("T", b"seen")
    services.store.write_out()
    view = services.guarded(_query(services).handle_view_message)
    ok = view(services.conn(), req(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": r.phy_offset}))
    assert ok.code == ResponseCode.SUCCESS and decode_record(ok.body).body == b"seen"
    inside = view(
        services.conn(), req(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": r.phy_offset + 4})
    )
    assert inside.code == ResponseCode.SYSTEM_ERROR


async def test_query_by_key_and_by_msg_id(services: Services) -> None:
    for i in range(3):
        services.store_message("T", f"k{i}".encode(), props={KEYS: "order-7", UNIQ_KEY: f"U{i}"})
    services.store_message("Other", b"x", props={KEYS: "order-7"})
    services.store.write_out()
    query = services.guarded(_query(services).handle_query_message)

    def ask(**ext: Any) -> RemotingCommand:
        return query(services.conn(), req(RequestCode.QUERY_MESSAGE, {"maxNum": 32, **ext}))

    by_key = ask(key="order-7", topic="T")
    assert sorted(m.body for m in decode_records(by_key.body)) == [b"k0", b"k1", b"k2"]
    assert len(decode_records(ask(key="order-7").body)) == 4  # any topic
    by_id = ask(key="U1", _UNIQUE_KEY_QUERY="true")
    assert [m.body for m in decode_records(by_id.body)] == [b"k1"]
    none = ask(key="order-8")
    assert none.code == ResponseCode.QUERY_NOT_FOUND and "order-8" in none.remark
