"""The Prometheus endpoint (server/observe/metrics.py) scraped over HTTP from a live broker."""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
import urllib.request

from kairosmq.protocol.codes import PULL_SUSPEND, ResponseCode
from kairosmq.server.observe.metrics import start_metrics
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import FAST_LEVELS, pull, send, wait_until
from tests.wire import RawPeer


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def test_metrics_endpoint_reads_live_state(broker_factory) -> None:
    # the last level is 60 s so the "far" message stays pending however slow the box is
    broker = await broker_factory(delay_levels=FAST_LEVELS.rsplit(" ", 1)[0] + " 60s")
    server = start_metrics(broker.metrics.sources, 0, addr="127.0.0.1")
    try:
        port = server.server_port
        peer = await RawPeer.connect(broker.address)
        for i in range(3):
            assert (await send(peer, "Metered", f"m{i}".encode())).code == 0
        assert (await send(peer, "Metered", b"d", {"DELAY": "1"})).code == 0
        assert (await send(peer, "Metered", b"far", {"DELAY": "18"})).code == 0
        assert (await send(peer, "Metered", b"t", {"TIMER_DELAY_MS": "20"})).code == 0
        assert (await send(peer, "Metered", b"tfar", {"TIMER_DELAY_SEC": "50"})).code == 0
        assert (await pull(peer, "Metered")).code == ResponseCode.SUCCESS
        await wait_until(
            lambda: broker.stats.delivered["Metered"] >= 1, 10, what="the level-1 message delivered"
        )
        await wait_until(lambda: broker.stats.timers_fired >= 1, 10, what="the timer fired")
        held = asyncio.ensure_future(
            pull(peer, "Metered", queue_id=3, sys_flag=PULL_SUSPEND, suspend_ms=30_000, timeout=40)
        )
        # event-driven: scrape until the endpoint shows the held pull (generous deadline)
        m = await asyncio.to_thread(_scrape, port)
        deadline = time.monotonic() + 10
        while m.get(("kairosmq_pull_held", ())) != 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            m = await asyncio.to_thread(_scrape, port)
        assert m[("kairosmq_up", ())] == 1
        assert m[("kairosmq_messages_stored_total", (("topic", "Metered"),))] == 3
        assert m[("kairosmq_messages_delivered_total", (("topic", "Metered"),))] == 1
        assert m[("kairosmq_messages_consumed_total", (("topic", "Metered"),))] >= 3
        assert m[("kairosmq_messages_scheduled_total", (("level", "18"),))] == 1
        assert m[("kairosmq_delayed_pending", (("level", "18"),))] == 1
        assert m[("kairosmq_delayed_pending", (("level", "1"),))] == 0
        assert 0 < m[("kairosmq_delayed_next_due_seconds", (("level", "18"),))] <= 60
        assert m[("kairosmq_delivery_lateness_seconds_count", (("level", "1"),))] == 1
        assert (
            m[("kairosmq_delivery_lateness_seconds_bucket", (("le", "+Inf"), ("level", "1")))] == 1
        )
        assert m[("kairosmq_pull_held", ())] == 1
        assert m[("kairosmq_timers_scheduled_total", ())] == 2
        assert m[("kairosmq_timers_fired_total", ())] == 1
        assert m[("kairosmq_timer_lateness_seconds_count", ())] == 1
        assert 40 < m[("kairosmq_timer_next_due_seconds", ())] <= 50
        assert m[("kairosmq_connections", ())] >= 1
        assert m[("kairosmq_commitlog_size_bytes", ())] == broker.store.commitlog.max_offset
        await send(peer, "Metered", b"wake", queue_id=3)
        assert (await held).code == ResponseCode.SUCCESS
        await peer.close()
    finally:
        server.shutdown()


async def test_busy_loop_reports_down(broker_factory) -> None:
    # no checkpoint during the blocked loop: a checkpoint thread still running when stop()
    # writes its own checkpoint races on the same temp file (reported to the lead)
    broker = await broker_factory(checkpoint_interval=60)
    server = start_metrics(broker.metrics.sources, 0, addr="127.0.0.1")
    try:
        from kairosmq.server.observe import metrics

        old, metrics.SNAPSHOT_TIMEOUT = metrics.SNAPSHOT_TIMEOUT, 0.2
        try:
            # block the loop for the whole scrape (no race with a fixed sleep): the scrape
            # must time out on its snapshot instead of reading state from another thread
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                m = pool.submit(_scrape, server.server_port).result(timeout=30)
        finally:
            metrics.SNAPSHOT_TIMEOUT = old
        assert m[("kairosmq_up", ())] == 0
        assert ("kairosmq_connections", ()) not in m
    finally:
        server.shutdown()
