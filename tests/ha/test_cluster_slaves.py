"""``kairosmq cluster --slaves 1``: a SLAVE per broker (brokerId 1, ``<name>-s1`` on its
master's port + 5), planned and run for real."""

from __future__ import annotations

import argparse
from pathlib import Path

import orjson
import pytest
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.server.cluster.local import add_cluster_parser, plan_cluster

from tests.cluster.procs import ClusterProcess
from tests.ha.pair import pull_all, wait_for
from tests.helpers import send
from tests.wire import RawPeer


def _parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    add_cluster_parser(ap.add_subparsers())
    return ap.parse_args(["cluster", *argv])


def test_plan_adds_a_slave_after_each_master(tmp_path: Path) -> None:
    specs = plan_cluster(
        _parse(
            [
                "--brokers",
                "2",
                "--slaves",
                "1",
                "--broker-role",
                "SYNC_MASTER",
                "--data-dir",
                str(tmp_path),
            ]
        )
    )
    assert [(s.name, s.port, s.data_dir) for s in specs] == [
        ("namesrv", 9876, tmp_path / "namesrv"),
        ("broker-a", 10911, tmp_path / "broker-a"),
        ("broker-a-s1", 10916, tmp_path / "broker-a-s1"),
        ("broker-b", 10921, tmp_path / "broker-b"),
        ("broker-b-s1", 10926, tmp_path / "broker-b-s1"),
    ]
    m, s = specs[3].argv, specs[4].argv
    assert m[m.index("--broker-role") + 1] == "SYNC_MASTER"
    for opt, value in (
        ("--broker-role", "SLAVE"),
        ("--broker-id", "1"),
        ("--broker-name", "broker-b"),
        ("--ha-master-address", "127.0.0.1:10922"),
        ("--namesrv", "127.0.0.1:9876"),
    ):
        assert s[s.index(opt) + 1] == value, opt
    # without --slaves nothing changes
    plain = plan_cluster(_parse(["--data-dir", str(tmp_path)]))
    assert [p.name for p in plain] == ["namesrv", "broker-a", "broker-b"]
    assert "--broker-role" not in plain[1].argv


@pytest.mark.slow
async def test_cluster_with_slaves_replicates_under_sync_master(tmp_path: Path) -> None:
    c = ClusterProcess(tmp_path / "data", 1, "--slaves", "1", "--broker-role", "SYNC_MASTER")

    def running() -> bool:
        st = c.status()
        return len(st) == 3 and all(x["state"] == "running" for x in st.values())

    c.spawn()
    try:
        await c.wait(running, 120, "the name server, the master and its slave running")
        master_addr = c.broker_address(0)
        slave_addr = f"127.0.0.1:{c.base_port + 5}"
        mp = await RawPeer.connect(master_addr)
        sp = await RawPeer.connect(slave_addr)
        try:

            async def acked() -> bool:
                r = await send(mp, "Clustered", b"first", {"UNIQ_KEY": "C-FIRST"})
                return r.code == ResponseCode.SUCCESS

            await wait_for(acked, timeout=30, what="a send acked by the SYNC_MASTER's slave")

            async def on_slave() -> bool:
                got = {x.msg_id for x in await pull_all(sp, "Clustered")}
                return "C-FIRST" in got

            await wait_for(on_slave, timeout=30, what="the slave serves it")
            nsp = await RawPeer.connect(c.namesrv)
            try:

                async def routed() -> bool:
                    r = await nsp.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Clustered"})
                    if r.code != ResponseCode.SUCCESS:
                        return False
                    addrs = orjson.loads(r.body)["brokerDatas"][0]["brokerAddrs"]
                    return {str(k): v for k, v in addrs.items()} == {
                        "0": master_addr,
                        "1": slave_addr,
                    }

                await wait_for(routed, timeout=60, what="routed: brokerId 0 and 1")
            finally:
                await nsp.close()
        finally:
            await mp.close()
            await sp.close()
    finally:
        c.stop()


def test_acl_cluster_slaves_sign_their_master_requests(tmp_path: Path, monkeypatch) -> None:
    # `kairosmq cluster --acl --slaves 1`: each slave carries the ACL file's first admin
    # account for its name server, and signs its table sync with it (no --ha-access-key)
    from kairosmq.server.cli import _broker_parser, build_config
    from kairosmq.server.ha.sync import master_credentials

    from tests.security.acl_setup import ACL_FILE, ADMIN

    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_FILE)
    specs = plan_cluster(
        _parse(["--slaves", "1", "--acl", str(acl), "--data-dir", str(tmp_path / "d")])
    )
    spec = next(s for s in specs if s.name == "broker-a-s1")
    for k, v in spec.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("KAIROS_HA_ACCESS_KEY", raising=False)
    monkeypatch.delenv("KAIROS_HA_SECRET_KEY", raising=False)
    ap = argparse.ArgumentParser()
    _broker_parser(ap.add_subparsers())
    broker_argv = spec.argv[spec.argv.index("broker") :]
    creds = master_credentials(build_config(ap.parse_args(broker_argv)))
    assert creds is not None
    assert (creds.access_key, creds.secret_key) == (ADMIN.access_key, ADMIN.secret_key)
