"""``--namesrv`` and its companions: parsing, validation, the CLI, and what a broker with
external name servers shows (no embedded name server, the external addresses in status and
GET_BROKER_CONFIG); the embedded default is unchanged. No name server runs here."""

from __future__ import annotations

import argparse
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.server.broker import Broker
from kairosmq.server.cli import (
    NAMESRV_ACCESS_KEY_ENV,
    NAMESRV_SECRET_KEY_ENV,
    _broker_parser,
    build_config,
    main,
)
from kairosmq.server.cluster.registration import parse_namesrv_addr
from kairosmq.server.config import BrokerConfig

from tests.helpers import wait_until
from tests.integration.procs import free_port
from tests.wire import RawPeer

BrokerFactory = Callable[..., Awaitable[Broker]]


def test_parse_namesrv_addr() -> None:
    assert parse_namesrv_addr("10.0.0.1:9876; 10.0.0.2:9876;10.0.0.1:9876;") == [
        "10.0.0.1:9876",
        "10.0.0.2:9876",
    ]
    for bad, words in (
        ("", "names no name server"),
        (";", "names no name server"),
        ("host", "'host'"),
        ("a:1;b:x", "'b:x'"),
        ("h:0", "out of range"),
        ("h:70000", "out of range"),
    ):
        with pytest.raises(ValueError, match=words):
            parse_namesrv_addr(bad)


def test_config_checks(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="namesrv_addr entry 'nohost'"):
        BrokerConfig(data_dir=tmp_path, namesrv_addr="nohost")
    with pytest.raises(ValueError, match="broker_id must be 0"):
        BrokerConfig(data_dir=tmp_path, broker_id=1)
    with pytest.raises(ValueError, match="register_period"):
        BrokerConfig(data_dir=tmp_path, namesrv_addr="h:1", register_period=0)
    cfg = BrokerConfig(data_dir=tmp_path)
    assert (cfg.namesrv_addr, cfg.broker_id, cfg.register_period, cfg.register_timeout) == (
        None,
        0,
        30.0,
        6.0,
    )  # RocketMQ's defaults; embedded name server by default


def _args(*argv: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    _broker_parser(ap.add_subparsers())
    return ap.parse_args(["broker", *argv])


def test_namesrv_credentials_and_tls(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The account a broker signs registrations with: the access key from the option (or
    its variable), the secret from the environment only, never shown in the config."""
    monkeypatch.delenv(NAMESRV_ACCESS_KEY_ENV, raising=False)
    monkeypatch.setenv(NAMESRV_SECRET_KEY_ENV, "ns_secret_1")
    cfg = build_config(
        _args(
            "--namesrv", "h:1", "--namesrv-access-key", "ns_admin_1", "--namesrv-tls-ca", "ca.pem"
        )
    )
    assert (
        cfg.namesrv_access_key,
        cfg.namesrv_secret_key,
        cfg.namesrv_tls,
        cfg.namesrv_tls_ca,
    ) == ("ns_admin_1", "ns_secret_1", True, Path("ca.pem"))
    assert "ns_secret_1" not in repr(cfg)
    monkeypatch.setenv(NAMESRV_ACCESS_KEY_ENV, "ns_env_1")
    cfg = build_config(_args("--namesrv", "h:1", "--namesrv-tls"))
    assert (cfg.namesrv_access_key, cfg.namesrv_tls, cfg.namesrv_tls_ca) == ("ns_env_1", True, None)
    cfg = build_config(_args())  # the variable is ignored without --namesrv
    assert (cfg.namesrv_access_key, cfg.namesrv_secret_key) == (None, None)
    monkeypatch.delenv(NAMESRV_ACCESS_KEY_ENV)
    cfg = build_config(_args("--namesrv", "h:1"))  # no key: the secret is not taken
    assert (cfg.namesrv_access_key, cfg.namesrv_secret_key, cfg.namesrv_tls) == (None, None, False)
    with pytest.raises(ValueError, match="they need namesrv_addr"):
        build_config(_args("--namesrv-access-key", "ns_admin_1"))
    with pytest.raises(ValueError, match="go together"):
        BrokerConfig(data_dir=tmp_path, namesrv_addr="h:1", namesrv_access_key="ns_admin_1")
    monkeypatch.delenv(NAMESRV_SECRET_KEY_ENV)
    with pytest.raises(ValueError, match=f"its secret key in \\${NAMESRV_SECRET_KEY_ENV}"):
        build_config(_args("--namesrv", "h:1", "--namesrv-access-key", "ns_admin_1"))
    d = str(tmp_path / "d")
    assert (
        main(["broker", "--data-dir", d, "--namesrv", "h:1", "--namesrv-access-key", "ns_admin_1"])
        == 2
    )
    assert NAMESRV_SECRET_KEY_ENV in capsys.readouterr().err
    assert (
        main(
            [
                "broker",
                "--data-dir",
                d,
                "--namesrv",
                "h:1",
                "--namesrv-tls-ca",
                str(tmp_path / "missing.pem"),
            ]
        )
        == 2
    )
    assert "--namesrv-tls-ca" in capsys.readouterr().err


def test_cli_flags_reach_the_config() -> None:
    cfg = build_config(
        _args(
            "--namesrv",
            "10.1.1.1:9876;10.1.1.2:9876",
            "--broker-name",
            "broker-b",
            "--cluster",
            "Prod",
            "--broker-ip",
            "10.1.1.9",
            "--register-period",
            "10",
        )
    )
    assert (
        cfg.namesrv_addr,
        cfg.broker_name,
        cfg.cluster_name,
        cfg.advertised_host,
        cfg.register_period,
    ) == ("10.1.1.1:9876;10.1.1.2:9876", "broker-b", "Prod", "10.1.1.9", 10.0)
    default = build_config(_args())
    assert (default.namesrv_addr, default.broker_name, default.cluster_name) == (
        None,
        "broker-a",
        "DefaultCluster",
    )
    assert build_config(_args("--advertised-host", "h1")).advertised_host == "h1"


def test_cli_refuses_a_bad_namesrv_list(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        ["broker", "--namesrv", "127.0.0.1:9876;oops", "--data-dir", str(tmp_path), "--no-log-file"]
    )
    assert rc == 2
    assert "namesrv_addr entry 'oops'" in capsys.readouterr().err
    assert not (tmp_path / "store").exists()  # refused before starting anything


async def test_embedded_name_server_stays_the_default(broker: Broker) -> None:
    assert broker.registration is None and "registration" not in broker.status()
    assert broker.namesrv_port > 0
    peer = await RawPeer.connect(broker.namesrv_address)  # the embedded one answers
    try:
        r = await peer.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "TBW102"})
        assert r.code == ResponseCode.SUCCESS
    finally:
        await peer.close()


async def test_external_mode_embeds_no_name_server(broker_factory: BrokerFactory) -> None:
    ns_port, unused = free_port(), free_port()
    external = f"127.0.0.1:{ns_port};127.0.0.1:{free_port()}"  # nothing listens there
    broker = await broker_factory(
        namesrv_addr=external, namesrv_port=unused, broker_name="kairos-x", register_period=5.0
    )
    assert broker.namesrv_address == external and broker.namesrv_port == 0
    with socket.socket() as s:  # the configured embedded port stays closed
        assert s.connect_ex(("127.0.0.1", unused)) != 0
    reg = broker.registration
    assert reg is not None
    await wait_until(lambda: all(link.failures >= 1 for link in reg.links), timeout=5)
    status = broker.status()
    assert status["namesrvAddress"] == external and status["degraded"] == []
    servers = status["registration"]["nameServers"]
    assert [s["address"] for s in servers] == external.split(";")
    assert all(not s["registered"] and s["lastError"] for s in servers)
    peer = await RawPeer.connect(broker.address)
    try:  # mqadmin getBrokerConfig shows the external list
        r = await peer.call(RequestCode.GET_BROKER_CONFIG)
        assert r.code == ResponseCode.SUCCESS
        assert f"namesrvAddr={external}" in r.body.decode().splitlines()
    finally:
        await peer.close()
