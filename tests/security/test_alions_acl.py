"""The stock npm client ali-ons 3.12.0, unmodified, with accessKey/secretKey against a broker
started with ``--acl``: it signs AccessKey, OnsChannel and its header fields plus the body
(its lib/channel.js), which is what the broker verifies (all extFields but Signature), so
its producer, push consumer, send-back and %RETRY% redelivery all pass; the same client with
a wrong secret is refused with RocketMQ's error. Skipped like tests/stock/test_alions.py
when node/npm are missing or the registry cannot be reached with a cold cache."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from kairosmq.client.credentials import AclRpcHook
from kairosmq.client.remoting import RemotingClient
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.headers import CreateTopicRequestHeader
from kairosmq.server.broker import Broker

from tests.security.acl_setup import ADMIN
from tests.stock.alions_install import NODE_MODULES, ensure_alions, node

pytestmark = pytest.mark.node

TOPIC, PGROUP, CGROUP = "AlionsAclTopic", "PID_ACL", "CID_ACL"
ACL = f"""
accounts:
  - accessKey: alions_ak
    secretKey: alions_secret
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
    topicPerms: [{TOPIC}=PUB|SUB]
    groupPerms: [{CGROUP}=SUB]
  - accessKey: {ADMIN.access_key}
    secretKey: {ADMIN.secret_key}
    admin: true
"""


async def test_alions_with_access_key_end_to_end(
    broker_factory: Callable[..., Awaitable[Broker]], tmp_path: Path
) -> None:
    await ensure_alions()
    acl = tmp_path / "acl.yml"
    acl.write_text(ACL)
    broker = await broker_factory(acl_file=acl)
    admin = RemotingClient(broker.address, rpc_hook=AclRpcHook(ADMIN))
    try:  # ali-ons cannot auto-create topics (what `mqadmin updateTopic` would do)
        r = await admin.invoke(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            CreateTopicRequestHeader(topic=TOPIC).to_ext_fields(),
            timeout=5.0,
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
    finally:
        admin.close()
    cfg = {
        "nameSrv": broker.namesrv_address,
        "topic": TOPIC,
        "producerGroup": PGROUP,
        "consumerGroup": CGROUP,
        "accessKey": "alions_ak",
        "secretKey": "alions_secret",
        "badSecret": "not-the-secret",
        "count": 4,
        "timeoutMs": 20_000,
    }
    proc = await asyncio.create_subprocess_exec(
        node(),
        str(Path(__file__).parent / "alions_acl.js"),
        json.dumps(cfg),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "NODE_NO_WARNINGS": "1", "NODE_PATH": str(NODE_MODULES)},
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    events = [json.loads(x) for x in out.decode().splitlines() if x.startswith("{")]
    diag = f"exit {proc.returncode}\n{out.decode()[-5000:]}\n{err.decode()[-3000:]}"
    assert proc.returncode == 0 and events[-1]["event"] == "done", diag
    sent = [e["body"] for e in events if e["event"] == "sent"]
    assert sent == ["m0", "m1", "m2", "m3"], diag
    consumed = {e["body"]: e["reconsumeTimes"] for e in events if e["event"] == "consumed"}
    assert consumed == {"m0": 1, "m1": 0, "m2": 0, "m3": 0}, diag  # m0 came back via %RETRY%
    bad = [e for e in events if e.get("who") == "badProducer"]
    assert bad and all(
        "Check signature failed for accessKey=alions_ak" in e["message"] for e in bad
    ), diag
    # no other refusal: every signed request of the right client passed
    assert [
        e
        for e in events
        if e["event"] == "error"
        and e.get("who") != "badProducer"
        and "Check signature" in e["message"]
    ] == [], diag
    denied = broker.acl.denied
    assert set(denied) == {"signature"}, (denied, diag)
