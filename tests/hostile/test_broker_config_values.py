"""UPDATE_BROKER_CONFIG cannot persist a value that bricks the broker (issue 29, row 8b).

The audit: a value persisted by UPDATE_BROKER_CONFIG refused every send after a restart
(``diskMaxUsedSpaceRatio`` below the disk's current use is the write watermark here).
Against a real broker process: every out-of-range or bricking value is refused with
SYSTEM_ERROR and a remark naming the key, nothing is written to broker.properties, sends
go on; kill -9 and restart: the broker serves and nothing acked is lost. A bricking entry
already in the file (as an older version could have written it) is skipped at start.
"""

from __future__ import annotations

import math

import pytest
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.server.tables.settings import disk_used_percent

from tests.helpers import send
from tests.hostile.harness import describe, verify_after_kill9

pytestmark = pytest.mark.slow

BAD = [
    ("diskMaxUsedSpaceRatio", "5"),
    ("diskMaxUsedSpaceRatio", "96"),
    ("diskMaxUsedSpaceRatio", "x"),
    ("defaultTopicQueueNums", "0"),
    ("flushIntervalCommitLog", "0"),
    ("fileReservedTime", "0"),
    ("pullMaxBytes", "10"),
    ("maxPullHoldMs", "-1"),
    ("retryQueueNums", "0"),
    ("autoCreateTopicEnable", "maybe"),
]


async def test_bricking_broker_config_values_are_refused(hostile) -> None:
    hb = await hostile()
    peer = await hb.connect()
    await hb.setup_bystander(peer)
    await hb.good_sends(peer, "ConfigTopic", 3)
    used = disk_used_percent(hb.proc.data_dir)
    below = math.floor(used)  # at or below the disk's use: every send would be refused
    bad = list(BAD)
    if below >= 10:
        bad.append(("diskMaxUsedSpaceRatio", str(below)))
    props = hb.proc.data_dir / "config" / "broker.properties"
    for key, value in bad:
        r = await peer.call(RequestCode.UPDATE_BROKER_CONFIG, {}, f"{key}={value}\n".encode())
        assert r.code == ResponseCode.SYSTEM_ERROR, f"{key}={value}: {describe(r)}"
        assert key in (r.remark or "") and value in (r.remark or ""), r.remark
        assert not props.exists(), f"{key}={value} was persisted"
        await hb.good_send(peer, "ConfigTopic")  # sends go on after each refusal
    # a valid change is persisted, and a mixed request changes nothing (all or nothing)
    ok = await peer.call(RequestCode.UPDATE_BROKER_CONFIG, {}, b"maxPullHoldMs=15000\n")
    assert ok.code == ResponseCode.SUCCESS, describe(ok)
    mixed = await peer.call(
        RequestCode.UPDATE_BROKER_CONFIG, {}, b"fileReservedTime=48\ndiskMaxUsedSpaceRatio=5\n"
    )
    assert mixed.code == ResponseCode.SYSTEM_ERROR
    assert props.read_text() == "maxPullHoldMs=15000\n"
    await verify_after_kill9(hb)

    # a bricking entry already in the file (an older version wrote it): skipped at start
    if below >= 10:
        props.write_text(f"diskMaxUsedSpaceRatio={below}\nmaxPullHoldMs=15000\n")
        hb.proc.kill()
        await hb.close_peers()
        await hb.start()
        peer = await hb.connect()
        r = await send(peer, "ConfigTopic", b"after-bad-file")
        assert r.code == ResponseCode.SUCCESS, describe(r)
        cfg = await peer.call(RequestCode.GET_BROKER_CONFIG, {})
        text = cfg.body.decode()
        assert "maxPullHoldMs=15000" in text and f"diskMaxUsedSpaceRatio={below}\n" not in text
