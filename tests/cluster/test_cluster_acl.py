"""``kairosmq cluster --acl FILE`` and its TLS options: the name server and every broker get
them, and the brokers sign their registrations with the file's admin account (its secret in
the child's environment, never in an argv) and register over TLS, pinned to the cluster's
certificate. The plan is checked without processes; then a real cluster runs with ACL and
TLS enforcing, refuses what the audit sent, serves stock-ish clients, and stops cleanly.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from kairosmq.client import Message, Producer
from kairosmq.client.remoting import RemotingClient
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode as C
from kairosmq.server.cli import NAMESRV_SECRET_KEY_ENV
from kairosmq.server.cli import main as cli_main
from kairosmq.server.cluster.local import add_cluster_parser, plan_cluster
from kairosmq.server.security.access import ACL_EXCEPTION

from tests.cluster.procs import ClusterProcess
from tests.namesrv.acl_calls import (
    NO_KEY,
    audit_requests,
    call,
    cluster_info,
    create_topic,
    refused_every_way,
    req,
    wait_route,
)
from tests.security.acl_setup import ACL_FILE, ADMIN, PRODUCER
from tests.security.certs import Certs, make_certs, openssl_missing
from tests.wire import RawPeer


def _parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    add_cluster_parser(ap.add_subparsers(dest="command"))
    return ap.parse_args(["cluster", *argv])


def _opt(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_plan_passes_acl_and_tls_and_the_admin_account(tmp_path: Path) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_FILE)
    cert, key, ca = tmp_path / "c.pem", tmp_path / "k.pem", tmp_path / "ca.pem"
    base = [
        "--brokers",
        "2",
        "--data-dir",
        str(tmp_path / "d"),
        "--acl",
        str(acl),
        "--tls-mode",
        "enforcing",
        "--tls-cert",
        str(cert),
        "--tls-key",
        str(key),
    ]
    ns, a, b = plan_cluster(_parse(base))
    for spec in (ns, a, b):
        assert (
            _opt(spec.argv, "--acl"),
            _opt(spec.argv, "--tls-mode"),
            _opt(spec.argv, "--tls-cert"),
            _opt(spec.argv, "--tls-key"),
        ) == (str(acl), "enforcing", str(cert), str(key)), spec.name
        assert ADMIN.secret_key not in spec.argv
    assert ns.env == {} and "--namesrv-access-key" not in ns.argv
    for spec in (a, b):  # the first admin account of the file; the cluster's cert pinned
        assert _opt(spec.argv, "--namesrv-access-key") == ADMIN.access_key
        assert spec.env == {NAMESRV_SECRET_KEY_ENV: ADMIN.secret_key}
        assert "--namesrv-tls" in spec.argv and _opt(spec.argv, "--namesrv-tls-ca") == str(cert)
    # mutual TLS: the brokers verify the name server against --tls-ca
    _, a, _ = plan_cluster(_parse([*base, "--tls-ca", str(ca)]))
    assert _opt(a.argv, "--namesrv-tls-ca") == str(ca) and _opt(a.argv, "--tls-ca") == str(ca)
    # external name servers: their credentials are the operator's (the environment)
    (a,) = plan_cluster(_parse(["--brokers", "1", "--acl", str(acl), "--namesrv", "ns:9876"]))
    assert _opt(a.argv, "--acl") == str(acl) and a.env == {}
    assert "--namesrv-access-key" not in a.argv and "--namesrv-tls" not in a.argv
    # without --acl / TLS nothing changes
    ns, a = plan_cluster(_parse(["--brokers", "1"]))
    assert a.env == {} and not {
        "--acl",
        "--tls-mode",
        "--namesrv-access-key",
        "--namesrv-tls",
    } & set(ns.argv + a.argv)


def test_bad_security_options_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    no_admin = tmp_path / "no_admin.yml"
    no_admin.write_text(ACL_FILE.replace("admin: true", "admin: false"))
    d = str(tmp_path / "d")
    assert cli_main(["cluster", "--data-dir", d, "--acl", str(no_admin)]) == 2
    assert "has no account with admin: true" in capsys.readouterr().err
    assert cli_main(["cluster", "--data-dir", d, "--acl", str(tmp_path / "missing.yml")]) == 2
    assert "--acl" in capsys.readouterr().err
    assert cli_main(["cluster", "--data-dir", d, "--tls-mode", "enforcing"]) == 2
    assert "needs --tls-cert" in capsys.readouterr().err


def _proc_files(pid: int) -> tuple[bytes, bytes]:
    """A child's argv and environment as the kernel shows them (``ps`` reads the first)."""
    return (Path(f"/proc/{pid}/cmdline").read_bytes(), Path(f"/proc/{pid}/environ").read_bytes())


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    if (missing := openssl_missing()) is not None:
        pytest.skip(f"TLS tests: {missing}")
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.mark.slow
async def test_cluster_with_acl_and_tls_enforcing(tmp_path: Path, certs: Certs) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_FILE)
    c = ClusterProcess(
        tmp_path / "data",
        1,
        "--acl",
        str(acl),
        "--tls-mode",
        "enforcing",
        "--tls-cert",
        str(certs.server_cert),
        "--tls-key",
        str(certs.server_key),
        "--broker-args",
        "--register-period 1",
    )
    tls = certs.client_context()
    try:
        await c.start()
        # the secret reached the broker through its environment only
        argv, environ = _proc_files(c.pid("broker-a"))
        assert ADMIN.secret_key.encode() not in argv
        assert f"{NAMESRV_SECRET_KEY_ENV}={ADMIN.secret_key}".encode() in environ.split(b"\0")
        broker = c.broker_address(0)
        await create_topic(broker, "Orders", tls=tls)
        before = await wait_route(c.namesrv, "Orders", broker, tls=tls, timeout=60.0)
        # what the audit sent, over TLS: refused; plain connections: closed
        await refused_every_way(
            c.namesrv, audit_requests("DefaultCluster", "broker-a", broker), tls=tls
        )
        plain = await RawPeer.connect(c.namesrv)
        with pytest.raises((ConnectionError, TimeoutError)):
            await plain.call(R.GET_BROKER_CLUSTER_INFO, timeout=5.0)
        assert (
            await call(c.namesrv, req(R.GET_ROUTEINFO_BY_TOPIC, {"topic": "Orders"}), tls=tls)
        ).remark == NO_KEY[1]
        assert await wait_route(c.namesrv, "Orders", broker, tls=tls) == before
        async with Producer(
            "ClusterAclPG",
            c.namesrv,
            access_key=PRODUCER.access_key,
            secret_key=PRODUCER.secret_key,
            tls=tls,
        ) as producer:
            assert (
                await producer.send(Message("Orders", b"x"))
            ).message_queue.broker_name == "broker-a"
        info = await cluster_info(c.namesrv, tls=tls)  # still serving
        assert info.broker_addr_table["broker-a"].broker_addrs == {0: broker}
        unsigned = RemotingClient(c.namesrv, ssl=tls)
        try:
            r = await unsigned.invoke(R.GET_BROKER_CLUSTER_INFO, {}, timeout=5.0)
        finally:
            unsigned.close()
        assert (r.code, r.remark) == (C.SYSTEM_ERROR, ACL_EXCEPTION + "No accessKey is configured")
        assert c.stop() == 0, c.output()
    finally:
        c.stop()
