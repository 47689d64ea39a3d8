"""A slave without --ha-master-address learns its master from the name server (the
REGISTER_BROKER answer's haServerAddr and masterAddr, as RocketMQ's slave does) and is
registered as brokerId 1 next to the master."""

from __future__ import annotations

import orjson
import pytest
from kairosmq.protocol.codes import RequestCode, ResponseCode

from tests.ha.pair import log_bytes, pull_all, status, wait_for
from tests.helpers import send
from tests.integration.procs import BrokerProcess, free_port
from tests.namesrv.procs import NamesrvProcess
from tests.wire import RawPeer

pytestmark = pytest.mark.slow


async def test_slave_learns_its_master_from_the_name_server(tmp_path) -> None:
    ns = NamesrvProcess(tmp_path / "ns")
    await ns.start()
    common = ("--namesrv", ns.address, "--register-period", "1", "--broker-name", "bk")
    m = BrokerProcess(tmp_path / "m", *common, "--ha-listen-port", str(free_port()))
    s = BrokerProcess(
        tmp_path / "s", *common, "--broker-role", "SLAVE", "--slave-sync-interval", "0.5"
    )
    await m.start()
    await s.start()
    mp = await RawPeer.connect(m.address)
    sp = await RawPeer.connect(s.address)
    nsp = await RawPeer.connect(ns.address)
    try:
        keys = []
        for i in range(50):
            r = await send(mp, "Learnt", b"x" * 100, {"UNIQ_KEY": f"L{i}"}, queue_id=i % 4)
            assert r.code == ResponseCode.SUCCESS, r.remark
            keys.append(f"L{i}")

        async def same() -> bool:
            return log_bytes(tmp_path / "s") == log_bytes(tmp_path / "m")

        await wait_for(same, timeout=30, what="the slave found its master and replicated")

        async def served() -> bool:
            return sorted(x.msg_id for x in await pull_all(sp, "Learnt")) == sorted(keys)

        await wait_for(served, what="the slave synced the topic from the master's broker port")

        async def routed() -> bool:
            r = await nsp.call(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "Learnt"})
            if r.code != ResponseCode.SUCCESS:
                return False
            route = orjson.loads(r.body)
            addrs = {str(k): v for k, v in route["brokerDatas"][0]["brokerAddrs"].items()}
            return addrs == {"0": m.address, "1": s.address}

        await wait_for(routed, what="the route lists the master as 0 and the slave as 1")
        st = await status(sp)
        assert st["ha"]["masterBrokerAddress"] == m.address
        assert st["ha"]["masterAddress"].endswith(f":{(await status(mp))['ha']['haListenPort']}")
    finally:
        for p in (mp, sp, nsp):
            await p.close()
        s.terminate()
        m.terminate()
        ns.proc.terminate()
        ns.proc.wait(20)
