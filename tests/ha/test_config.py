"""The replication options: RocketMQ's names, defaults and rules (config.py, cli.py)."""

from __future__ import annotations

import argparse

import pytest
from kairosmq.server.cli import _broker_parser, build_config
from kairosmq.server.config import BrokerConfig
from kairosmq.server.ha.role import BrokerRole


def test_default_is_a_lone_async_master(tmp_path) -> None:
    cfg = BrokerConfig(data_dir=tmp_path)
    assert (cfg.broker_role, cfg.broker_id, cfg.ha_listen_port) == (
        BrokerRole.ASYNC_MASTER,
        0,
        None,
    )
    assert cfg.ha_slave_fallbehind_max == 256 * 1024 * 1024
    assert cfg.ha_transfer_batch_size == 32 * 1024


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"broker_role": "MASTER"}, "must be ASYNC_MASTER, SYNC_MASTER or SLAVE"),
        ({"broker_id": 1}, "broker_id must be 0 for a master"),
        ({"broker_role": "SLAVE", "broker_id": 0, "ha_master_address": "h:1"}, ">= 1"),
        ({"broker_role": "SLAVE", "broker_id": 1}, "needs ha_master_address"),
        ({"broker_role": "SLAVE", "broker_id": 1, "ha_master_address": "nohost"}, "host:port"),
        ({"ha_master_address": "h:10912"}, "a SLAVE's option"),
        ({"ha_listen_port": 70000}, "0..65535"),
    ],
)
def test_bad_combinations_are_refused_with_the_reason(tmp_path, kwargs, says) -> None:
    with pytest.raises(ValueError, match=says):
        BrokerConfig(data_dir=tmp_path, **kwargs)


def _args(*argv: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    _broker_parser(ap.add_subparsers())
    return ap.parse_args(["broker", *argv])


def test_cli_slave_gets_broker_id_1_and_its_options(tmp_path) -> None:
    args = _args(
        "--data-dir",
        str(tmp_path),
        "--broker-role",
        "SLAVE",
        "--ha-master-address",
        "10.0.0.1:10912",
        "--slave-sync-interval",
        "2",
    )
    cfg = build_config(args)
    assert (cfg.broker_role, cfg.broker_id, cfg.ha_master_address) == (
        BrokerRole.SLAVE,
        1,
        "10.0.0.1:10912",
    )
    assert cfg.slave_sync_interval == 2.0
    args = _args(
        "--data-dir",
        str(tmp_path),
        "--broker-role",
        "SYNC_MASTER",
        "--ha-listen-port",
        "20912",
        "--ha-slave-fallbehind-max-mb",
        "1",
    )
    cfg = build_config(args)
    assert (cfg.broker_role, cfg.broker_id, cfg.ha_listen_port) == (
        BrokerRole.SYNC_MASTER,
        0,
        20912,
    )
    assert cfg.ha_slave_fallbehind_max == 1 << 20


def test_cli_ha_account_secret_from_the_environment_only(tmp_path, monkeypatch) -> None:
    from kairosmq.server.ha.sync import master_credentials

    monkeypatch.delenv("KAIROS_HA_SECRET_KEY", raising=False)
    monkeypatch.delenv("KAIROS_HA_ACCESS_KEY", raising=False)
    slave = ("--data-dir", str(tmp_path), "--broker-role", "SLAVE")
    slave += ("--ha-master-address", "10.0.0.1:10912")
    with pytest.raises(ValueError, match="needs its secret key in \\$KAIROS_HA_SECRET_KEY"):
        build_config(_args(*slave, "--ha-access-key", "admin_ak"))
    assert master_credentials(build_config(_args(*slave))) is None
    monkeypatch.setenv("KAIROS_HA_SECRET_KEY", "admin_sk")
    cfg = build_config(_args(*slave, "--ha-access-key", "admin_ak"))
    creds = master_credentials(cfg)
    assert creds is not None and (creds.access_key, creds.secret_key) == ("admin_ak", "admin_sk")
    assert "admin_sk" not in repr(cfg)
    monkeypatch.setenv("KAIROS_HA_ACCESS_KEY", "env_ak")
    creds = master_credentials(build_config(_args(*slave)))
    assert creds is not None and creds.access_key == "env_ak"
    with pytest.raises(ValueError, match="go together"):
        BrokerConfig(data_dir=tmp_path, ha_access_key="k")


def test_cli_slave_read_enable_rocketmq_defaults(tmp_path) -> None:
    cfg = build_config(_args("--data-dir", str(tmp_path)))
    assert (cfg.slave_read_enable, cfg.access_message_in_memory_max_ratio) == (False, 40)
    cfg = build_config(
        _args(
            "--data-dir",
            str(tmp_path),
            "--slave-read-enable",
            "--access-message-in-memory-max-ratio",
            "10",
        )
    )
    assert (cfg.slave_read_enable, cfg.access_message_in_memory_max_ratio) == (True, 10)
