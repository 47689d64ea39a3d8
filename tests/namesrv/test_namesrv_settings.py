"""UPDATE_NAMESRV_CONFIG (318) on kairosmq's name server, and the register rule a mixed
cluster needs (an Apache 4.9 broker's one-topic "increment" registration keeps its other
topics unless ``deleteTopicWithBrokerRegistration`` is on).

The 318 requests come raw (every refusal: code + remark, nothing changed) and from Apache
RocketMQ 4.9.8's own ``mqadmin updateNamesrvConfig`` / ``getNamesrvConfig`` (skipped when
the shared Apache build or java is absent).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import sys
from pathlib import Path

import pytest
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.registration import DataVersion, TopicConfigData, build_register_broker
from kairosmq.server.namesrv import NameServer

from tests.helpers import ROCKETMQ_HOME, mqadmin_argv, wait_until
from tests.namesrv.test_namesrv_server import _queues, register, route
from tests.wire import RawPeer

MQADMIN = ROCKETMQ_HOME / "mqadmin.sh"


async def _config(peer: RawPeer) -> dict[str, str]:
    r = await peer.call(R.GET_NAMESRV_CONFIG)
    assert r.code == ResponseCode.SUCCESS, r.remark
    return dict(line.split("=", 1) for line in r.body.decode().splitlines() if "=" in line)


@pytest.mark.slow  # waits out a 2 s expiry
async def test_update_namesrv_config_settable_subset(namesrv: NameServer) -> None:
    peer = await RawPeer.connect(namesrv.address)
    try:
        before = await _config(peer)
        assert before["orderMessageEnable"] == "false"
        assert before["deleteTopicWithBrokerRegistration"] == "false"
        r = await peer.call(
            R.UPDATE_NAMESRV_CONFIG,
            body=b"# comment\norderMessageEnable=true\n"
            b"scanNotActiveBrokerInterval=500\nbrokerChannelExpiredTime=2000\n",
        )
        assert r.code == ResponseCode.SUCCESS, r.remark
        after = await _config(peer)
        assert (
            after["orderMessageEnable"],
            after["scanNotActiveBrokerInterval"],
            after["brokerChannelExpiredTime"],
        ) == ("true", "500", "2000")
        assert namesrv.processor.order_message_enable  # routes now carry orderTopicConf
        assert namesrv.routes.broker_expiry_ms == 2000

        # the new interval and expiry are live: a silent broker goes within ~2.5 s
        p2, _ = await register(namesrv, "b1", "127.0.0.1:10911", [TopicConfigData("A", 4, 4)])
        await wait_until(
            lambda: "b1" not in namesrv.routes.broker_addr_table,
            6.0,
            what="expiry after brokerChannelExpiredTime=2000",
        )
        await p2.close()

        # refusals: code + remark, nothing applied (all or nothing)
        for body, code, remark in [
            (
                b"orderMessageEnable=false\nnoSuchKey=1",
                ResponseCode.SYSTEM_ERROR,
                "unknown name server setting 'noSuchKey'",
            ),
            (b"orderMessageEnable=maybe", ResponseCode.SYSTEM_ERROR, "must be true or false"),
            (b"scanNotActiveBrokerInterval=5", ResponseCode.SYSTEM_ERROR, "must be within"),
            (
                b"orderMessageEnable=false\nkvConfigPath=/tmp/x",
                ResponseCode.NO_PERMISSION,
                "Can not update config in black list.",
            ),
            (b"configStorePath=/tmp/x", ResponseCode.NO_PERMISSION, "black list"),
            (b"listenPort=1", ResponseCode.NO_PERMISSION, "listenPort is fixed at start"),
            (b"orderMessageEnable=\xff", ResponseCode.SYSTEM_ERROR, "string2Properties error"),
        ]:
            r = await peer.call(R.UPDATE_NAMESRV_CONFIG, body=body)
            assert (r.code, remark in (r.remark or "")) == (code, True), (body, r.remark)
        assert await _config(peer) == after
        # an empty body changes nothing and succeeds, as in RocketMQ
        r = await peer.call(R.UPDATE_NAMESRV_CONFIG)
        assert r.code == ResponseCode.SUCCESS and await _config(peer) == after
    finally:
        await peer.close()


async def test_incremental_registration_keeps_other_topics(namesrv: NameServer) -> None:
    """An Apache RocketMQ 4.9 broker registers a topic created by ``updateTopic`` alone under
    its new DataVersion (``registerIncrementBrokerData``): its other topics must stay, as in
    RocketMQ's name server. With deleteTopicWithBrokerRegistration (switched on at run time
    by UPDATE_NAMESRV_CONFIG) a registration's table is the broker's whole table."""
    peer, _ = await register(
        namesrv, "b1", "127.0.0.1:10911", [TopicConfigData("A", 4, 4), TopicConfigData("B", 2, 2)]
    )
    try:
        await register(
            namesrv,
            "b1",
            "127.0.0.1:10911",
            [TopicConfigData("C", 3, 3)],
            version=DataVersion(2, 2),
            peer=peer,
        )
        assert _queues(await route(peer, "A")) == {"b1": (4, 4, 6)}
        assert _queues(await route(peer, "B")) == {"b1": (2, 2, 6)}
        assert _queues(await route(peer, "C")) == {"b1": (3, 3, 6)}
        r = await peer.call(R.UPDATE_NAMESRV_CONFIG, body=b"deleteTopicWithBrokerRegistration=true")
        assert r.code == ResponseCode.SUCCESS, r.remark
        await register(
            namesrv,
            "b1",
            "127.0.0.1:10911",
            [TopicConfigData("A", 4, 4), TopicConfigData("C", 3, 3)],
            version=DataVersion(3, 3),
            peer=peer,
        )
        assert await route(peer, "B") is None  # missing from the whole table: gone
        assert _queues(await route(peer, "A")) == {"b1": (4, 4, 6)}
    finally:
        await peer.close()


@pytest.mark.slow
@pytest.mark.skipif(
    not MQADMIN.exists() or shutil.which("java") is None,
    reason=f"needs java and Apache RocketMQ's mqadmin ({MQADMIN})",
)
async def test_mqadmin_update_and_get_namesrv_config(namesrv: NameServer, tmp_path: Path) -> None:
    async def mqadmin(*args: str) -> tuple[int, str]:
        argv = await asyncio.to_thread(
            mqadmin_argv, *args, "-n", namesrv.address, user_home=tmp_path
        )
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=tmp_path,
            env={**os.environ, "STORE_DIR": str(tmp_path)},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 120)
        return proc.returncode or 0, out.decode(errors="replace")

    rc, out = await mqadmin("updateNamesrvConfig", "-k", "orderMessageEnable", "-v", "true")
    assert rc == 0 and "update name server config success!" in out, out
    assert namesrv.processor.order_message_enable
    rc, out = await mqadmin("getNamesrvConfig")
    assert rc == 0, out
    shown = {
        k.strip(): v.strip()
        for line in out.splitlines()
        if "=" in line
        for k, v in [line.split("=", 1)]
    }
    assert shown["orderMessageEnable"] == "true" and shown["listenPort"] == str(namesrv.port)
    # an unknown key: mqadmin reports the name server's refusal with its remark
    (_, unknown), (_, black) = await asyncio.gather(
        mqadmin("updateNamesrvConfig", "-k", "noSuchKey", "-v", "1"),
        mqadmin("updateNamesrvConfig", "-k", "kvConfigPath", "-v", "/tmp/x"),
    )
    assert "unknown name server setting 'noSuchKey'" in unknown, unknown
    assert "Can not update config in black list." in black, black
    assert namesrv.processor.order_message_enable  # unchanged by the refusals


@pytest.mark.slow
async def test_cli_flag_delete_topic_with_broker_registration(tmp_path: Path) -> None:
    """``kairosmq namesrv --delete-topic-with-broker-registration``: shown by
    GET_NAMESRV_CONFIG, and a master's registration drops its topics missing from the body."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kairosmq.server",
        "namesrv",
        "--port",
        "0",
        "--data-dir",
        str(tmp_path / "ns"),
        "--no-log-file",
        "--log-level",
        "warning",
        "--delete-topic-with-broker-registration",
        stderr=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
    )
    assert proc.stderr is not None
    try:
        line = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
        m = re.search(r"name server on 127\.0\.0\.1:(\d+)", line)
        assert m, line
        peer = await RawPeer.connect(f"127.0.0.1:{m.group(1)}")
        try:
            assert (await _config(peer))["deleteTopicWithBrokerRegistration"] == "true"
            for topics, version in ((["A", "B"], DataVersion(1, 1)), (["A"], DataVersion(2, 2))):
                reg = build_register_broker(
                    cluster_name="C",
                    broker_name="b1",
                    broker_addr="127.0.0.1:10911",
                    ha_server_addr="127.0.0.1:10912",
                    data_version=version,
                    topic_configs=[TopicConfigData(t, 4, 4) for t in topics],
                )
                assert (await peer.call(reg.code, reg.ext_fields, reg.body)).code == 0
            assert await route(peer, "B") is None
            assert _queues(await route(peer, "A")) == {"b1": (4, 4, 6)}
        finally:
            await peer.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
