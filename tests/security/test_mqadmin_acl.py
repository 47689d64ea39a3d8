"""Apache RocketMQ 4.9.8's own ``mqadmin`` (Java, its AclClientRPCHook fed from
``$ROCKETMQ_HOME/conf/tools.yml``) against a broker started with ``--acl``: a stock Java
client's signatures verify on the broker and name-server ports, and a non-admin account's
topic creation is refused with the remark naming the rule; under the request policy options
(``--acl-request-binding admin``, ``--acl-admin-require-tls``) its admin signature is
refused, and taken over TLS. Skipped without ``java`` or the RocketMQ jars."""

from __future__ import annotations

import asyncio
import re
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from kairosmq.server.broker import Broker

from tests.helpers import ROCKETMQ_HOME, mqadmin_argv
from tests.security.acl_setup import ACL_FILE, ADMIN, CONSUMER
from tests.security.certs import make_certs, openssl_missing
from tests.security.java_acl import java_missing

pytestmark = [
    pytest.mark.skipif(
        java_missing() is not None, reason=f"stock mqadmin with ACL: {java_missing()}"
    ),
    pytest.mark.slow,  # JVMs: the stock mqadmin
]


def _home(tmp: Path, access_key: str, secret_key: str) -> Path:
    home = tmp / f"home-{access_key}"
    (home / "conf").mkdir(parents=True)
    (home / "conf" / "tools.yml").write_text(f"accessKey: {access_key}\nsecretKey: {secret_key}\n")
    logback = ROCKETMQ_HOME / "conf" / "logback_tools.xml"
    if logback.exists():
        shutil.copy(logback, home / "conf" / "logback_tools.xml")
    return home


async def mqadmin(home: Path, *args: str, tls: bool = False) -> tuple[int, str]:
    cmd = await asyncio.to_thread(
        mqadmin_argv, *args, user_home=home, rocketmq_home=home, log_root=home / "logs"
    )
    if tls:  # RocketMQ's client switch (ClientConfig.useTLS); tls.test.mode trusts any cert
        cmd.insert(1, "-Dtls.enable=true")
    proc = await asyncio.create_subprocess_exec(
        *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    return int(proc.returncode or 0), out.decode(errors="replace")


async def test_stock_mqadmin_signs_and_is_held_to_the_rules(
    broker_factory: Callable[..., Awaitable[Broker]], tmp_path: Path
) -> None:
    path = tmp_path / "acl.yml"
    path.write_text(ACL_FILE)
    broker = await broker_factory(acl_file=path)
    admin_home = _home(tmp_path, ADMIN.access_key, ADMIN.secret_key)
    consumer_home = _home(tmp_path, CONSUMER.access_key, CONSUMER.secret_key)
    (_, made), (_, refused) = await asyncio.gather(
        mqadmin(
            admin_home, "updateTopic", "-b", broker.address, "-t", "JavaMade", "-r", "2", "-w", "2"
        ),
        mqadmin(consumer_home, "updateTopic", "-b", broker.address, "-t", "JavaRefused"),
    )
    _, listed = await mqadmin(consumer_home, "topicList", "-n", broker.namesrv_address)
    assert "create topic to" in made and "success" in made, made
    assert broker.topics.get("JavaMade") is not None
    assert broker.topics.get("JavaRefused") is None
    assert (
        "Need admin permission for request code=17, but accessKey=consumer_ak is not" in refused
    ), refused
    assert "JavaMade" in listed, listed
    # the Java clients' signatures all verified: only the one permission refusal
    assert broker.acl.denied == {"admin": 1}


@pytest.mark.skipif(openssl_missing() is not None, reason=f"{openssl_missing()}")
async def test_stock_mqadmin_under_the_request_policy_options(
    broker_factory: Callable[..., Awaitable[Broker]], tmp_path: Path
) -> None:
    """Issue 29, row 6, with the real mqadmin: ``--acl-request-binding admin`` refuses its
    admin signature (it cannot carry the binding) while a non-admin account's reads go on;
    ``--acl-admin-require-tls`` refuses it on a plain connection and takes it over TLS
    (``-Dtls.enable=true``)."""
    certs = make_certs(tmp_path / "certs")
    path = tmp_path / "acl.yml"
    path.write_text(ACL_FILE)
    strict = await broker_factory(
        acl_file=path, acl_request_binding="admin", data_dir=tmp_path / "strict"
    )
    tls_only = await broker_factory(
        acl_file=path,
        acl_admin_require_tls=True,
        tls_mode="permissive",
        tls_cert=certs.server_cert,
        tls_key=certs.server_key,
        data_dir=tmp_path / "tls",
    )
    admin_home = _home(tmp_path, ADMIN.access_key, ADMIN.secret_key)
    consumer_home = _home(tmp_path, CONSUMER.access_key, CONSUMER.secret_key)
    (_, unbound), (_, listed), (_, plain), (_, over_tls) = await asyncio.gather(
        mqadmin(admin_home, "updateTopic", "-b", strict.address, "-t", "StrictMade"),
        mqadmin(consumer_home, "topicList", "-n", strict.namesrv_address),
        mqadmin(admin_home, "updateTopic", "-b", tls_only.address, "-t", "PlainMade"),
        mqadmin(admin_home, "updateTopic", "-b", tls_only.address, "-t", "TlsMade", tls=True),
    )
    assert (
        "aclRequestBinding=admin requires an admin account's requests to carry the "
        "KairosBinding field" in unbound
    ), unbound
    assert strict.topics.get("StrictMade") is None
    assert "TBW102" in listed, listed
    assert "with aclAdminRequireTls its requests are taken over TLS only" in plain, plain
    assert tls_only.topics.get("PlainMade") is None
    assert "create topic to" in over_tls and "success" in over_tls, over_tls
    assert tls_only.topics.get("TlsMade") is not None


@pytest.mark.slow
async def test_stock_mqadmin_against_the_standalone_name_server(tmp_path: Path) -> None:
    """``kairosmq namesrv --acl`` (a real process): mqadmin's ``updateNamesrvConfig`` as a
    non-admin is refused (the audit's brokerChannelExpiredTime=1000), as the admin taken;
    its signed reads verify (clusterList as the consumer; getNamesrvConfig needs admin)."""
    from tests.namesrv.procs import NamesrvProcess

    path = tmp_path / "acl.yml"
    path.write_text(ACL_FILE)
    ns = NamesrvProcess(tmp_path / "ns", "--acl", str(path))
    await ns.start()
    try:
        admin_home = _home(tmp_path, ADMIN.access_key, ADMIN.secret_key)
        consumer_home = _home(tmp_path, CONSUMER.access_key, CONSUMER.secret_key)
        _, refused = await mqadmin(
            consumer_home,
            "updateNamesrvConfig",
            "-n",
            ns.address,
            "-k",
            "brokerChannelExpiredTime",
            "-v",
            "1000",
        )
        assert (
            "Need admin permission for request code=318, but accessKey=consumer_ak "
            "is not" in refused
        ), refused
        _, taken = await mqadmin(
            admin_home,
            "updateNamesrvConfig",
            "-n",
            ns.address,
            "-k",
            "brokerChannelExpiredTime",
            "-v",
            "60000",
        )
        _, shown = await mqadmin(admin_home, "getNamesrvConfig", "-n", ns.address)
        assert re.search(r"brokerChannelExpiredTime\s+=\s+60000\n", shown), (taken, shown)
        code, listed = await mqadmin(consumer_home, "clusterList", "-n", ns.address)
        assert code == 0 and "#Cluster Name" in listed, listed
        assert [(e["request_code"], e["reason"]) for e in ns.events("acl.denied")] == [
            (318, "admin")
        ]
    finally:
        assert ns.terminate() == 0
