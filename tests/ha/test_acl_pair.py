"""Replication between a master with ``--acl`` and its slave, real processes: the slave
signs its table sync and its rejoin check with ``--ha-access-key`` (secret in
``KAIROS_HA_SECRET_KEY``); without an account, or with a wrong secret, the master refuses
the table reads, the slave logs ``ha.sync_denied`` and keeps what it has while its log
keeps replicating (docs/replication.md, "ACL")."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from kairosmq.protocol.codes import RequestCode, ResponseCode

from tests.ha.pair import log_bytes, master, slave, wait_for
from tests.ha.test_promote import admin
from tests.helpers import send
from tests.security.acl_setup import ACL_FILE, ADMIN, PRODUCER, SignedPeer

pytestmark = pytest.mark.slow

ADMIN_ENV = {"KAIROS_HA_SECRET_KEY": ADMIN.secret_key}


async def _topics(peer: SignedPeer) -> set[str]:
    r = await peer.call(RequestCode.GET_ALL_TOPIC_CONFIG, {})
    assert r.code == ResponseCode.SUCCESS, r.remark
    return set(orjson.loads(r.body)["topicConfigTable"])


async def _send(peer: SignedPeer, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        r = await send(peer, "Orders", f"order-{i}".encode() * 10, queue_id=i % 4)
        assert r.code == ResponseCode.SUCCESS, r.remark


async def _same_log(tmp_path) -> None:  # type: ignore[no-untyped-def]
    async def same() -> bool:
        return log_bytes(tmp_path / "s") == log_bytes(tmp_path / "m")

    await wait_for(same, what="the slave's log equals the master's")


async def test_acl_master_syncs_tables_to_a_signed_slave_and_rejoin_promote_are_signed(
    tmp_path,
) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_FILE)
    m = master(tmp_path / "m", "--acl", str(acl))
    await m.start()
    s = slave(
        tmp_path / "s", m, "--acl", str(acl), "--ha-access-key", ADMIN.access_key, env=ADMIN_ENV
    )
    await s.start()
    mp = await SignedPeer.open(m.address, PRODUCER)
    try:
        await _send(mp, 40)
        await _same_log(tmp_path)
        sp = await SignedPeer.open(s.address, ADMIN)

        async def synced() -> bool:
            return "Orders" in await _topics(sp)

        await wait_for(synced, what="the slave copies the ACL master's topic table")
        await sp.close()

        async def logged() -> bool:  # log lines are flushed every 0.2 s
            return "topics" in {e["table"] for e in s.events("ha.synced")}  # type: ignore[attr-defined]

        await wait_for(logged, what="the slave logs ha.synced for the topic table")
        assert not s.events("ha.sync_denied"), s.events("ha.sync_denied")  # type: ignore[attr-defined]
        # the rejoin check at a restart reads the master's epochs, signed
        s.kill()
        await s.start()
        await asyncio.sleep(0.5)  # the start's log lines flushed (every 0.2 s)
        assert not s.events("ha.rejoin_unchecked"), s.events("ha.rejoin_unchecked")
        await _send(mp, 10, start=40)
        await _same_log(tmp_path)
        m.kill()
        # KAIROS_PROMOTE is an admin request: refused unsigned, done with the admin account
        refused = await asyncio.to_thread(admin, "--broker", s.address, "promote", "--json")
        assert refused.returncode != 0
        assert "AclException" in refused.stdout + refused.stderr
        done = await asyncio.to_thread(
            admin,
            "--broker",
            s.address,
            "--access-key",
            ADMIN.access_key,
            "--secret-key",
            ADMIN.secret_key,
            "promote",
            "--json",
        )
        assert done.returncode == 0, done.stdout + done.stderr
        sp = await SignedPeer.open(s.address, PRODUCER)
        r = await send(sp, "Orders", b"after the promotion")
        assert r.code == ResponseCode.SUCCESS, r.remark
        await sp.close()
    finally:
        await mp.close()
        s.terminate()
        if m.proc is not None and m.proc.poll() is None:
            m.terminate()


@pytest.mark.parametrize("account", ["none", "wrong_secret", "not_admin"])
async def test_acl_master_refuses_an_unsigned_or_missigned_slave_which_loses_nothing(
    tmp_path, account: str
) -> None:
    acl = tmp_path / "plain_acl.yml"
    acl.write_text(ACL_FILE)
    m = master(tmp_path / "m", "--acl", str(acl))
    await m.start()
    good = slave(tmp_path / "s", m, "--ha-access-key", ADMIN.access_key, env=ADMIN_ENV)
    await good.start()
    mp = await SignedPeer.open(m.address, PRODUCER)
    bad = None
    try:
        await _send(mp, 20)
        await _same_log(tmp_path)
        sp = await SignedPeer.open(good.address, ADMIN)

        async def synced() -> bool:
            return "Orders" in await _topics(sp)

        await wait_for(synced, what="the slave copies the topic table")
        await sp.close()
        good.terminate()
        # the same slave restarted with a bad account
        opts: tuple[str, ...] = ()
        env: dict[str, str] = {}
        if account == "wrong_secret":
            opts, env = ("--ha-access-key", ADMIN.access_key), {"KAIROS_HA_SECRET_KEY": "nope"}
        elif account == "not_admin":
            opts = ("--ha-access-key", PRODUCER.access_key)
            env = {"KAIROS_HA_SECRET_KEY": PRODUCER.secret_key}
        bad = slave(tmp_path / "s", m, *opts, env=env)
        bad.log_path = good.log_path  # type: ignore[attr-defined]
        before = len(bad.events("ha.sync_denied"))  # type: ignore[attr-defined]
        await bad.start()

        async def denied() -> bool:
            return len(bad.events("ha.sync_denied")) > before  # type: ignore[attr-defined]

        await wait_for(denied, what="the slave logs ha.sync_denied")
        ev = bad.events("ha.sync_denied")[-1]  # type: ignore[attr-defined]
        want_key = {"none": "", "wrong_secret": ADMIN.access_key, "not_admin": PRODUCER.access_key}
        assert ev["access_key"] == want_key[account]
        assert "AclException" in ev["error"] and "--ha-access-key" in ev["fix"]

        async def master_logged() -> bool:  # its log lines are flushed every 0.2 s
            return any(
                e["access_key"] == want_key[account]
                for e in m.events("acl.denied")  # type: ignore[attr-defined]
            )

        await wait_for(master_logged, what="the master logs acl.denied for the slave's account")
        # nothing lost: the log keeps replicating, the tables stay as last synced
        await _send(mp, 20, start=20)
        await _same_log(tmp_path)
        sp = await SignedPeer.open(bad.address, ADMIN)
        await asyncio.sleep(1.2)  # more than two sync rounds (0.5 s)
        assert "Orders" in await _topics(sp)
        await sp.close()
    finally:
        await mp.close()
        if bad is not None:
            bad.terminate()
        m.terminate()
