"""SQL92 filtering at a real in-process broker, raw frames: CHECK_CLIENT_CONFIG, the
property-filter switch, and filtered pulls (matching, long non-matching runs, the
heartbeat's subscription, held pulls). The clients (bundled PushConsumer, ali-ons, the
stock Java client) are in test_sql92_filter_clients.py."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import orjson
from kairosmq.protocol.bodies import ConsumerData, HeartbeatData, SubscriptionData
from kairosmq.protocol.codes import PULL_SUBSCRIPTION, PULL_SUSPEND, RequestCode, ResponseCode
from kairosmq.protocol.message import decode_records
from kairosmq.server import property_filter
from kairosmq.server.broker import Broker
from kairosmq.server.cli import _broker_parser, build_config

from tests.helpers import send
from tests.wire import RawPeer


def check_body(expression: str, expression_type: str = "SQL92") -> bytes:
    sub = SubscriptionData("T", expression, [], [], 1, expression_type)
    return orjson.dumps({"clientId": "c1", "group": "CG", "subscriptionData": sub.to_dict()})


async def sql_pull(
    peer: RawPeer,
    topic: str,
    expression: str | None,
    offset: int = 0,
    *,
    max_n: int = 32,
    flags: int = PULL_SUBSCRIPTION,
    group: str = "G",
    suspend_ms: int = 0,
    timeout: float = 5.0,
) -> Any:
    ext: dict[str, Any] = {
        "consumerGroup": group,
        "topic": topic,
        "queueId": 0,
        "queueOffset": offset,
        "maxMsgNums": max_n,
        "sysFlag": flags,
        "commitOffset": 0,
        "suspendTimeoutMillis": suspend_ms,
        "subVersion": 1,
        "expressionType": "SQL92",
    }
    if expression is not None:
        ext["subscription"] = expression
    return await peer.call(RequestCode.PULL_MESSAGE, ext, timeout=timeout)


async def fill(peer: RawPeer, topic: str, n: int) -> None:
    """Message i: a=i, region eu for even i, us for odd; every 3rd has no ``a``."""
    for i in range(n):
        props = {"region": "eu" if i % 2 == 0 else "us", "TAGS": f"T{i % 3}"}
        if i % 3:
            props["a"] = str(i)
        r = await send(peer, topic, b"%d" % i, props)
        assert r.code == ResponseCode.SUCCESS


# ---------------------------------------------------------------- CHECK_CLIENT_CONFIG


async def test_check_client_config_compiles_sql92(broker: Broker) -> None:
    peer = await RawPeer.connect(broker.address)
    try:
        r = await peer.call(
            RequestCode.CHECK_CLIENT_CONFIG, body=check_body("a > 5 AND region = 'eu'")
        )
        assert r.code == ResponseCode.SUCCESS
        r = await peer.call(RequestCode.CHECK_CLIENT_CONFIG, body=check_body("TagA || TagB", "TAG"))
        assert r.code == ResponseCode.SUCCESS
        r = await peer.call(
            RequestCode.CHECK_CLIENT_CONFIG, body=check_body("a > 5 AND\nregion = ")
        )
        assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert "line 2, column 10" in (r.remark or "")
        r = await peer.call(RequestCode.CHECK_CLIENT_CONFIG, body=check_body("a > 'x'"))
        assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED and "column 3" in r.remark
        r = await peer.call(RequestCode.CHECK_CLIENT_CONFIG, body=check_body("a", "XPATH"))
        assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        for bad in (b"{not json", b"[1]", b'{"subscriptionData": 5}'):
            r = await peer.call(RequestCode.CHECK_CLIENT_CONFIG, body=bad)
            assert r.code == ResponseCode.SYSTEM_ERROR and r.remark
        r = await peer.call(
            RequestCode.CHECK_CLIENT_CONFIG,
            body=b'{"subscriptionData": {"expressionType": 92, "subString": 1}}',
        )
        assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        r = await peer.call(RequestCode.CHECK_CLIENT_CONFIG, body=b"")
        assert r.code == ResponseCode.SUCCESS  # nothing to check (RocketMQ)
    finally:
        await peer.close()


async def test_property_filter_off_answers_system_error(broker_factory: Any) -> None:
    b = await broker_factory(enable_property_filter=False)
    peer = await RawPeer.connect(b.address)
    try:
        await send(peer, "T", b"x", {"a": "9"})
        r = await peer.call(RequestCode.CHECK_CLIENT_CONFIG, body=check_body("a > 5"))
        assert r.code == ResponseCode.SYSTEM_ERROR and "SQL92" in (r.remark or "")
        r = await sql_pull(peer, "T", "a > 5")
        assert r.code == ResponseCode.SYSTEM_ERROR
        r = await peer.call(RequestCode.CHECK_CLIENT_CONFIG, body=check_body("A", "TAG"))
        assert r.code == ResponseCode.SUCCESS
    finally:
        await peer.close()


def test_cli_flag_turns_property_filtering_off() -> None:
    ap = argparse.ArgumentParser()
    _broker_parser(ap.add_subparsers())
    assert build_config(ap.parse_args(["broker"])).enable_property_filter is True
    off = build_config(ap.parse_args(["broker", "--no-enable-property-filter"]))
    assert off.enable_property_filter is False


# ---------------------------------------------------------------- pulls (raw frames)


async def test_filtered_pull_delivers_matching_and_skips_the_rest(broker: Broker) -> None:
    peer = await RawPeer.connect(broker.address)
    try:
        await fill(peer, "S", 20)
        r = await sql_pull(peer, "S", "a > 5 AND region = 'eu'")
        assert r.code == ResponseCode.SUCCESS
        msgs = decode_records(r.body)
        assert [m.body for m in msgs] == [b"8", b"10", b"14", b"16"]
        assert [m.queue_offset for m in msgs] == [8, 10, 14, 16]
        assert int(r.ext_fields["nextBeginOffset"]) == 20  # past the non-matching tail
        # maxMsgNums 1: the first match, and the offset right after it
        r = await sql_pull(peer, "S", "a > 5 AND region = 'eu'", max_n=1)
        assert [m.body for m in decode_records(r.body)] == [b"8"]
        assert int(r.ext_fields["nextBeginOffset"]) == 9
        r = await sql_pull(peer, "S", "a > 5 AND region = 'eu'", offset=9, max_n=1)
        assert [m.body for m in decode_records(r.body)] == [b"10"]
        # null rules: missing a is null, so NOT (a > 5) skips messages without it
        r = await sql_pull(peer, "S", "NOT (a > 5) AND a IS NOT NULL")
        assert [m.body for m in decode_records(r.body)] == [b"1", b"2", b"4", b"5"]
        r = await sql_pull(peer, "S", "a IS NULL")
        assert [m.body for m in decode_records(r.body)] == [b"%d" % i for i in range(0, 20, 3)]
        r = await sql_pull(peer, "S", "TAGS IN ('T1') AND region = 'us'")
        assert [m.body for m in decode_records(r.body)] == [b"1", b"7", b"13", b"19"]
        # nothing matches: PULL_RETRY_IMMEDIATELY with the offset after what was scanned
        r = await sql_pull(peer, "S", "a > 1000")
        assert r.code == ResponseCode.PULL_RETRY_IMMEDIATELY
        assert int(r.ext_fields["nextBeginOffset"]) == 20 and r.body in (b"", None)
        r = await sql_pull(peer, "S", "a > 1000", offset=20)
        assert r.code == ResponseCode.PULL_NOT_FOUND
        # a bad expression in the pull header: the position in the remark
        r = await sql_pull(peer, "S", "a > 5 AND OR")
        assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        assert "column 11" in (r.remark or "")
    finally:
        await peer.close()


async def test_filtered_pull_scans_a_long_non_matching_run(broker: Broker) -> None:
    peer = await RawPeer.connect(broker.address)
    try:
        n = property_filter.SCAN_MAX + 300
        for i in range(n):
            await send(peer, "L", b"%d" % i, {"a": "1" if i == n - 1 else "0"})
        r = await sql_pull(peer, "L", "a = 1")
        assert r.code == ResponseCode.PULL_RETRY_IMMEDIATELY  # one pull scans SCAN_MAX
        nxt = int(r.ext_fields["nextBeginOffset"])
        assert 0 < nxt < n
        r = await sql_pull(peer, "L", "a = 1", offset=nxt)
        assert [m.body for m in decode_records(r.body)] == [b"%d" % (n - 1)]
        assert int(r.ext_fields["nextBeginOffset"]) == n
    finally:
        await peer.close()


async def test_pull_uses_the_heartbeat_subscription_without_the_flag(broker: Broker) -> None:
    peer = await RawPeer.connect(broker.address)
    try:
        await fill(peer, "H", 10)
        sub = SubscriptionData("H", "region = 'us' AND a >= 5", [], [], 7, "SQL92")
        hb = HeartbeatData("raw-client", [], [ConsumerData("HG", [sub])])
        r = await peer.call(RequestCode.HEART_BEAT, body=hb.to_json())
        assert r.code == ResponseCode.SUCCESS
        r = await sql_pull(peer, "H", None, flags=0, group="HG")
        assert [m.body for m in decode_records(r.body)] == [b"5", b"7"]
        # a heartbeat with SQL that does not compile registers; its pulls are refused
        bad = SubscriptionData("H", "region = ", [], [], 8, "SQL92")
        hb = HeartbeatData("raw-client", [], [ConsumerData("HG", [bad])])
        assert (await peer.call(RequestCode.HEART_BEAT, body=hb.to_json())).code == 0
        r = await sql_pull(peer, "H", None, flags=0, group="HG")
        assert r.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
    finally:
        await peer.close()


async def test_held_filtered_pull_skips_a_non_matching_arrival(broker: Broker) -> None:
    peer = await RawPeer.connect(broker.address)
    sender = await RawPeer.connect(broker.address)
    try:
        await send(sender, "W", b"first", {"a": "0"})
        held = asyncio.ensure_future(
            sql_pull(
                peer,
                "W",
                "a > 5",
                offset=1,
                flags=PULL_SUBSCRIPTION | PULL_SUSPEND,
                suspend_ms=3000,
            )
        )
        await asyncio.sleep(0.2)
        assert not held.done()
        await send(sender, "W", b"no", {"a": "1"})
        r = await asyncio.wait_for(held, 5)
        # woken by the arrival, nothing matched: retry at once from after it
        assert r.code == ResponseCode.PULL_RETRY_IMMEDIATELY
        assert int(r.ext_fields["nextBeginOffset"]) == 2
        held = asyncio.ensure_future(
            sql_pull(
                peer,
                "W",
                "a > 5",
                offset=2,
                flags=PULL_SUBSCRIPTION | PULL_SUSPEND,
                suspend_ms=3000,
            )
        )
        await asyncio.sleep(0.2)
        await send(sender, "W", b"yes", {"a": "6"})
        r = await asyncio.wait_for(held, 5)
        assert [m.body for m in decode_records(r.body)] == [b"yes"]
    finally:
        await peer.close()
        await sender.close()
