"""``kairosmq broker`` security options (server/cli.py, server/config.py): --acl, the
request policy flags (--acl-request-binding, --acl-request-window, --acl-admin-require-tls)
and the --tls-* flags reach BrokerConfig and the ACL guard, a bad ACL file, certificate or
policy stops the start with one line and exit code 2, and the Prometheus endpoint exports
the ACL denials."""

from __future__ import annotations

import argparse
import asyncio
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import structlog
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.server import cli
from kairosmq.server.broker import Broker
from kairosmq.server.config import BrokerConfig
from kairosmq.server.security.install import is_loopback

from tests.helpers import send_ext
from tests.security.acl_setup import ACL_FILE, PRODUCER, signed_client


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli._broker_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["broker", *argv])


def test_flags_reach_the_config(tmp_path: Path) -> None:
    cfg = cli.build_config(
        parse(
            "--acl",
            "/etc/kairosmq/plain_acl.yml",
            "--tls-mode",
            "permissive",
            "--tls-cert",
            "c.pem",
            "--tls-key",
            "k.pem",
            "--tls-ca",
            "ca.pem",
            "--data-dir",
            str(tmp_path),
        )
    )
    assert cfg.acl_file == Path("/etc/kairosmq/plain_acl.yml")
    assert (cfg.tls_mode, cfg.tls_cert, cfg.tls_key, cfg.tls_ca) == (
        "permissive",
        Path("c.pem"),
        Path("k.pem"),
        Path("ca.pem"),
    )
    off = cli.build_config(parse("--data-dir", str(tmp_path)))
    assert off.acl_file is None and off.tls_mode == "disabled"
    assert (off.acl_request_binding, off.acl_request_window, off.acl_admin_require_tls) == (
        "optional",
        300.0,
        False,
    )
    strict = cli.build_config(
        parse(
            "--acl",
            "a.yml",
            "--acl-request-binding",
            "admin",
            "--acl-request-window",
            "60",
            "--acl-admin-require-tls",
            "--tls-mode",
            "permissive",
            "--tls-cert",
            "c.pem",
            "--data-dir",
            str(tmp_path),
        )
    )
    assert (
        strict.acl_request_binding,
        strict.acl_request_window,
        strict.acl_admin_require_tls,
    ) == ("admin", 60.0, True)


async def test_the_policy_reaches_the_guard(
    broker_factory: Callable[..., Awaitable[Broker]], tmp_path: Path
) -> None:
    path = tmp_path / "acl.yml"
    path.write_text(ACL_FILE)
    with structlog.testing.capture_logs() as logs:
        broker = await broker_factory(
            acl_file=path, acl_request_binding="all", acl_request_window=30.0
        )
    assert broker.acl is not None
    policy = broker.acl.policy
    assert (policy.binding.value, policy.window_ms, policy.admin_require_tls) == (
        "all",
        30_000,
        False,
    )
    [loaded] = [e for e in logs if e["event"] == "acl.loaded"]
    assert (
        loaded["request_binding"],
        loaded["request_window_ms"],
        loaded["admin_require_tls"],
    ) == ("all", 30_000, False)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--acl-admin-require-tls"], "acl_admin_require_tls needs tls_mode"),
        (["--acl-request-window", "0.5"], "acl_request_window 0.5 must be between"),
    ],
)
def test_a_policy_that_cannot_work_stops_the_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    path = tmp_path / "acl.yml"
    path.write_text(ACL_FILE)
    code = cli.main(
        ["broker", "--acl", str(path), *argv, "--data-dir", str(tmp_path / "d"), "--no-log-file"]
    )
    assert code == 2 and needle in capsys.readouterr().err


def test_config_refuses_tls_without_a_certificate(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="tls_cert"):
        BrokerConfig(data_dir=tmp_path, tls_mode="enforcing")
    with pytest.raises(ValueError, match="tls_mode"):
        BrokerConfig(data_dir=tmp_path, tls_mode="on")


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (None, "No such file"),
        ("accounts: [{accessKey: short, secretKey: x}]", "accessKey"),
        ("accounts: [\n  - broken", "YAML"),
    ],
)
def test_bad_acl_file_stops_the_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, needle: str
) -> None:
    path = tmp_path / "acl.yml"
    if content is not None:
        path.write_text(content)
    code = cli.main(
        ["broker", "--acl", str(path), "--data-dir", str(tmp_path / "d"), "--no-log-file"]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kairosmq broker: --acl {path}: ") and needle in err


def test_bad_certificate_stops_the_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.pem").write_text("not a certificate")
    code = cli.main(
        [
            "broker",
            "--tls-mode",
            "enforcing",
            "--tls-cert",
            str(tmp_path / "c.pem"),
            "--data-dir",
            str(tmp_path / "d"),
            "--no-log-file",
        ]
    )
    assert code == 2 and "--tls-cert" in capsys.readouterr().err


def test_loopback_detection() -> None:
    assert all(map(is_loopback, ("127.0.0.1", "127.0.0.2", "::1", "localhost")))
    assert not any(map(is_loopback, ("0.0.0.0", "", "::", "10.0.0.5", "broker.example")))


async def test_prometheus_exports_acl_denials(
    broker_factory: Callable[..., Awaitable[Broker]], tmp_path: Path
) -> None:
    pytest.importorskip("prometheus_client")
    path = tmp_path / "acl.yml"
    path.write_text(ACL_FILE)
    broker = await broker_factory(acl_file=path, metrics_port=0)
    client = signed_client(broker.address, PRODUCER, secret="wrong-secret")
    try:
        for _ in range(2):
            await client.invoke(
                R.SEND_MESSAGE_V2, {k: str(v) for k, v in send_ext("Orders").items()}, timeout=5.0
            )
    finally:
        client.close()
    url = f"http://{broker.metrics_address}/metrics"
    text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read().decode())
    assert 'kairosmq_acl_denied_total{reason="signature"} 2.0' in text
