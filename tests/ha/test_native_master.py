"""The native HA dispatch listener (server/ha/_master.pyx's ``on_dispatch``) against the
reference (``master.reference.on_dispatch``).

Two real ``HAService``s (ASYNC_MASTER and SYNC_MASTER, over real stores) hear the same
records, one through the reference, one through the twin: the same data event state
(set, and a writer waiting on it woken), the same records held by the confirm gate,
replays passed over alike.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import ModuleType

import pytest
import structlog
from kairosmq.protocol import native
from kairosmq.protocol.naming import SCHEDULE_TOPIC
from kairosmq.server.config import BrokerConfig
from kairosmq.server.ha import master
from kairosmq.server.ha.master import HAService
from kairosmq.server.remoting.longpoll import ArrivalNotifier
from kairosmq.server.store.message_store import MessageStore
from kairosmq.server.store.types import DispatchRequest

from tests.twins import twin

ref = master.reference


@pytest.fixture(scope="module")
def nat() -> ModuleType:
    return twin("server.ha.master")


def _req(i: int, topic: str = "T", replay: bool = False) -> DispatchRequest:
    return DispatchRequest(topic, i % 3, i * 100, 100, 0, i, 0, {}, replay=replay)


def _records() -> list[DispatchRequest]:
    return [_req(0), _req(1), _req(2, SCHEDULE_TOPIC), _req(3, replay=True), _req(4), _req(5)]


@pytest.mark.parametrize("role", ["ASYNC_MASTER", "SYNC_MASTER"])
async def test_records_are_heard_alike(nat: ModuleType, tmp_path: Path, role: str) -> None:
    states = []
    for name, on_dispatch in (("ref", ref.on_dispatch), ("nat", nat.on_dispatch)):
        store = MessageStore(tmp_path / name, store_host=(b"\x7f\x00\x00\x01", 10911))
        store.open()
        try:
            cfg = BrokerConfig(data_dir=tmp_path / name, broker_role=role)
            svc = HAService(store, cfg, ArrivalNotifier(), structlog.get_logger("ha"))
            seen = []
            for req in _records():
                waiter = asyncio.ensure_future(svc.wait_data(5.0))  # a writer waiting
                await asyncio.sleep(0)
                on_dispatch(svc, req)
                await asyncio.wait_for(waiter, 1.0)  # woken, not timed out
                on_dispatch(svc, req)  # the event already set: nothing more to do
                seen.append(svc._data.is_set())
            pending = None if svc.gate is None else dict(svc.gate.pending)
            states.append((seen, pending))
        finally:
            store.close()
    assert states[0] == states[1]
    if role == "SYNC_MASTER":
        assert states[0][1]  # the gate holds the live records, not the replay


def test_the_service_hears_through_the_chosen_core(nat: ModuleType) -> None:
    chosen = ref.on_dispatch if native.DISABLED else nat.on_dispatch
    assert HAService.on_dispatch is chosen
