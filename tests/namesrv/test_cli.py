"""``kairosmq namesrv`` as a real process: binds (port 0 allowed, the bound port printed),
answers, logs JSON lines to <data-dir>/logs, stops cleanly on SIGTERM; bad options exit 2."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from pathlib import Path

import orjson
import pytest
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.events import CATALOGUE, COMMON
from kairosmq.protocol.registration import (
    ClusterInfo,
    DataVersion,
    TopicConfigData,
    build_register_broker,
    build_unregister_broker,
)

from tests.wire import RawPeer

pytestmark = pytest.mark.slow


async def test_namesrv_subcommand_serves_and_stops(tmp_path: Path) -> None:
    data = tmp_path / "ns"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kairosmq.server",
        "namesrv",
        "--port",
        "0",
        "--data-dir",
        str(data),
        "--scan-not-active-ms",
        "500",
        "--broker-expiry-ms",
        "2000",
        stderr=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
    )
    assert proc.stderr is not None
    try:
        line = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
        m = re.search(r"name server on 127\.0\.0\.1:(\d+)", line)
        assert m, line
        peer = await RawPeer.connect(f"127.0.0.1:{m.group(1)}")
        r = await peer.call(R.GET_BROKER_CLUSTER_INFO)
        assert r.code == 0 and ClusterInfo.from_json(r.body) == ClusterInfo()
        r = await peer.call(R.GET_NAMESRV_CONFIG)
        assert b"scanNotActiveBrokerInterval=500" in r.body
        # events for the live catalogue check below: register, unregister, a refusal, a
        # broker that disconnects, one that expires
        reg = build_register_broker(
            cluster_name="C",
            broker_name="b1",
            broker_addr="127.0.0.1:10911",
            ha_server_addr="h:1",
            topic_configs=[TopicConfigData("A", 4, 4)],
            data_version=DataVersion(1, 1),
        )
        for name, port in (("b1", 10911), ("b2", 10912)):
            ext = {**reg.ext_fields, "brokerName": name, "brokerAddr": f"127.0.0.1:{port}"}
            assert (await peer.call(reg.code, ext, reg.body)).code == 0
        un = build_unregister_broker(
            cluster_name="C", broker_name="b1", broker_addr="127.0.0.1:10911"
        )
        assert (await peer.call(un.code, un.ext_fields)).code == 0
        assert (await peer.call(R.GET_ROUTEINFO_BY_TOPIC)).code != 0
        assert (await peer.call(R.WIPE_WRITE_PERM_OF_BROKER, {"brokerName": "b2"})).code == 0
        assert (await peer.call(R.DELETE_TOPIC_IN_NAMESRV, {"topic": "A"})).code == 0
        other = await RawPeer.connect(f"127.0.0.1:{m.group(1)}")
        ext = {**reg.ext_fields, "brokerName": "b3", "brokerAddr": "127.0.0.1:10921"}
        assert (await other.call(reg.code, ext, reg.body)).code == 0
        await other.close()  # b3: broker_disconnected
        await asyncio.sleep(3.0)  # b2 (on `peer`) silent > 2 s: broker_expired, closed
        assert await peer.closed(3.0)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    lines = [orjson.loads(x) for x in (data / "logs" / "broker.jsonl").read_bytes().splitlines()]
    events = [x["event"] for x in lines]
    assert events[0] == "namesrv.started" and events[-1] == "namesrv.stopped"
    for name in (
        "namesrv.broker_registered",
        "namesrv.broker_unregistered",
        "namesrv.broker_disconnected",
        "namesrv.broker_expired",
        "request.rejected",
        "namesrv.write_perm_changed",
        "namesrv.topic_deleted",
    ):
        assert name in events, (name, events)
    for line in lines:  # every line is catalogued, its keys within the event's fields
        assert line["event"] in CATALOGUE, line
        extra = set(line) - set(CATALOGUE[line["event"]]) - set(COMMON)
        assert not extra, (line["event"], extra)


async def test_bad_options_exit_2(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kairosmq.server",
        "namesrv",
        "--port",
        "0",
        "--data-dir",
        str(tmp_path),
        "--broker-expiry-ms",
        "0",
        stderr=asyncio.subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2 and b"must be > 0" in err


def test_bad_security_options_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--acl`` and the TLS options are checked before anything starts, as the broker's."""
    from kairosmq.server.cli import main

    bad_yaml = tmp_path / "bad.yml"
    bad_yaml.write_text("accounts:\n  - accessKey: short\n    secretKey: s\n")
    not_pem = tmp_path / "cert.pem"
    not_pem.write_text("not a certificate\n")
    base = ["namesrv", "--port", "0", "--data-dir", str(tmp_path / "ns"), "--no-log-file"]
    for extra, words in (
        (["--acl", str(tmp_path / "missing.yml")], "--acl "),
        (["--acl", str(bad_yaml)], "--acl "),
        (["--tls-mode", "enforcing"], "needs --tls-cert"),
        (["--tls-mode", "permissive", "--tls-cert", str(not_pem)], "--tls-cert/--tls-key/--tls-ca"),
    ):
        assert main([*base, *extra]) == 2, extra
        err = capsys.readouterr().err
        assert err.startswith("kairosmq namesrv: ") and words in err, (extra, err)
    assert not (tmp_path / "ns").exists()  # refused before anything was created
