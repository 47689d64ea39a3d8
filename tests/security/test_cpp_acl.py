"""The stock C++ client (librocketmq 2.1.0, ``rocketmq-python-cvs``) with session credentials
against a broker started with ``--acl``: it signs every request (AccessKey, OnsChannel and
the header fields plus the body), the broker verifies it and stores its sends; the same
client with a wrong secret is refused. Skipped where the package is not installed (it
bundles librocketmq.so for Linux x86_64 only)."""

from __future__ import annotations

import asyncio
import json
import platform
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from kairosmq.client.credentials import AclRpcHook
from kairosmq.client.remoting import RemotingClient
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.headers import CreateTopicRequestHeader
from kairosmq.server.broker import Broker

from tests.security.acl_setup import ACL_FILE, ADMIN, PRODUCER

pytestmark = pytest.mark.slow  # the stock C++ client in a child process

DRIVER = Path(__file__).parent / "cpp_acl_driver.py"


def _skip_reason() -> str | None:
    if (platform.system(), platform.machine()) != ("Linux", "x86_64"):
        return "the stock C++ client is bundled for Linux x86_64 only"
    probe = subprocess.run(
        [sys.executable, "-c", "from rocketmq.client import Producer"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    return None if probe.returncode == 0 else "rocketmq-python-cvs is not installed"


async def run_driver(tmp: Path, address: str, secret: str, count: int) -> list[dict]:
    cfg = {
        "nameSrv": address,
        "topic": "Orders",
        "group": "PID_CPP_ACL",
        "accessKey": PRODUCER.access_key,
        "secretKey": secret,
        "count": count,
        "logDir": str(tmp),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(DRIVER),
        json.dumps(cfg),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    events = [json.loads(x) for x in out.decode().splitlines() if x.startswith("{")]
    assert events and events[-1]["event"] == "done", (out, err)
    return events


async def test_cpp_client_with_session_credentials(
    broker_factory: Callable[..., Awaitable[Broker]], tmp_path: Path
) -> None:
    if (reason := _skip_reason()) is not None:
        pytest.skip(f"stock C++ client with ACL not run: {reason}")
    path = tmp_path / "acl.yml"
    path.write_text(ACL_FILE)
    broker = await broker_factory(acl_file=path)
    admin = RemotingClient(broker.address, rpc_hook=AclRpcHook(ADMIN))
    try:
        r = await admin.invoke(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            CreateTopicRequestHeader(topic="Orders").to_ext_fields(),
            timeout=5.0,
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
    finally:
        admin.close()
    good = await run_driver(tmp_path / "good", broker.namesrv_address, PRODUCER.secret_key, 3)
    assert [e["status"] for e in good if e["event"] == "sent"] == ["OK"] * 3, good
    assert sum(broker.store.max_offset("Orders", q) for q in range(4)) == 3
    assert broker.acl.denied == {}
    bad = await run_driver(tmp_path / "bad", broker.namesrv_address, "wrong-secret", 1)
    assert [e["event"] for e in bad] == ["error", "done"], bad
    assert sum(broker.store.max_offset("Orders", q) for q in range(4)) == 3
    assert broker.acl.denied.get("signature", 0) >= 1
