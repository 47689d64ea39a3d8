"""Broker: the composition root. Owns the store, scheduler, tables and listeners.

Owns: construction and wiring of ``MessageStore``, ``ScheduleService``,
``TopicConfigManager``, ``ConsumerOffsetManager``, ``ClientRegistry``, ``LockManager``,
``ArrivalNotifier`` and the ``RemotingServer`` (broker port, optional VIP port - 2, and
the embedded name-server port); ``put_message`` (the one path every message takes into
the store, applying the delay transform and logging); background services (flush,
checkpoint, retention, client expiry); ``start``/``stop``.

Invariants:
* Everything runs on one event loop; blocking disk work (fsync, checkpoint writes) runs
  in a thread with data snapshotted on the loop first.
* ``stop`` is graceful: stop accepting, answer held pulls, stop the scheduler, flush,
  write a final checkpoint and offsets, close files.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from typing import Any

from kairosmq.protocol.ids import create_offset_msg_id
from kairosmq.protocol.properties import (
    DELAY,
    DELIVER_TIME,
    KEYS,
    REAL_QID,
    REAL_TOPIC,
    TAGS,
    UNIQ_KEY,
)

from .clients import ClientRegistry, LockManager
from .config import BrokerConfig, FlushMode
from .handlers import BROKER_HANDLERS, NAMESRV_HANDLERS
from .logs import MessageLog, get_logger
from .longpoll import ArrivalNotifier
from .offsets import ConsumerOffsetManager
from .schedule import ScheduleService, transform_delayed
from .stats import BrokerStats
from .store import SCHEDULE_TOPIC, DispatchRequest, MessageInner, MessageStore, PutResult, PutStatus
from .store.index import KeyIndex
from .topics import TopicConfigManager
from .transport import RemotingServer


def _ipv4(host: str) -> bytes:
    try:
        return socket.inet_aton(socket.gethostbyname(host))
    except OSError:
        return b"\x7f\x00\x00\x01"


class Broker:
    def __init__(self, config: BrokerConfig | None = None) -> None:
        self.config = config or BrokerConfig()
        cfg = self.config
        self.log = get_logger("broker")
        self.msglog = MessageLog("broker")
        self.port = cfg.port
        self.namesrv_port = cfg.namesrv_port
        self.advertised_host = cfg.advertised_host or (
            "127.0.0.1" if cfg.host in ("0.0.0.0", "", "::") else cfg.host
        )
        self.store = MessageStore(
            cfg.data_dir / "store",
            store_host=(_ipv4(self.advertised_host), cfg.port),
            segment_size=cfg.commitlog_segment_size,
            units_per_file=cfg.consumequeue_units_per_file,
        )
        self.topics = TopicConfigManager(cfg.data_dir / "config",
                                         default_queue_nums=cfg.default_queue_nums,
                                         delay_levels=cfg.max_delay_level)
        self.offsets = ConsumerOffsetManager(cfg.data_dir / "config")
        self.clients = ClientRegistry(cfg.client_expire_seconds, log=get_logger("clients"))
        self.locks = LockManager(cfg.lock_expire_seconds)
        self.notifier = ArrivalNotifier()
        self.stats = BrokerStats()
        self.schedule = ScheduleService(
            self.store, self.notifier, cfg.delay_levels_ms, put=self.put_message,
            on_delivered=self._log_delivered, batch=cfg.schedule_batch,
        )
        self.store.providers.append(self.schedule)
        self.store.dispatchers.append(self._on_dispatch)
        self.store.dispatchers.append(self.schedule.on_dispatch)
        # msgId/key index for admin lookups (store/index.py); opened after the store
        self.index = KeyIndex(self.store.data_dir / "index", self.store)
        self.store.dispatchers.append(self.index.dispatch)
        self.server = RemotingServer(
            self, log=get_logger("transport"), before_write=self.store.write_out,
            on_connection_lost=self.clients.connection_closed, max_frame=cfg.max_frame_length,
        )
        self._services: list[asyncio.Task[None]] = []
        self._persist_lock = threading.Lock()
        self._persisting: asyncio.Future[None] | None = None
        self._flush_waiters: list[tuple[int, asyncio.Future[bool]]] = []
        self._flush_event: asyncio.Event | None = None
        self._started_at = 0.0
        self.running = False
        self.recovery: dict[str, Any] = {}

    # ------------------------------------------------------------------ addresses

    @property
    def address(self) -> str:
        return f"{self.advertised_host}:{self.port}"

    @property
    def namesrv_address(self) -> str:
        return f"{self.advertised_host}:{self.namesrv_port}"

    @property
    def uptime_ms(self) -> float:
        return (time.monotonic() - self._started_at) * 1000 if self.running else 0.0

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        cfg = self.config
        self._started_at = time.monotonic()
        self.topics.load()
        self.offsets.load()
        self.recovery = await asyncio.to_thread(self.store.open)
        self.log.info("store.recovered", **self.recovery)
        await asyncio.to_thread(self.index.open)
        self.port = await self.server.listen(cfg.host, cfg.port, BROKER_HANDLERS, "broker")
        self.store.store_host = (self.store.store_host[0], self.port)
        if cfg.vip_channel and self.port > 2:
            try:
                await self.server.listen(cfg.host, self.port - 2, BROKER_HANDLERS, "vip")
            except OSError as err:
                self.log.warning("broker.vip_unavailable", port=self.port - 2, error=str(err))
        self.namesrv_port = await self.server.listen(cfg.host, cfg.namesrv_port,
                                                     NAMESRV_HANDLERS, "namesrv")
        self.schedule.start()
        loop = asyncio.get_running_loop()
        self._flush_event = asyncio.Event()
        for coro in (self._flush_service(), self._checkpoint_service(),
                     self._housekeeping_service()):
            self._services.append(loop.create_task(coro))
        self.running = True
        self.log.info("broker.started", host=cfg.host, port=self.port,
                      namesrv_port=self.namesrv_port, data_dir=str(cfg.data_dir),
                      delay_levels=cfg.delay_levels, flush_mode=cfg.flush_mode.value)

    async def stop(self, reason: str = "requested") -> None:
        if not self.running:
            return
        self.running = False
        self.log.info("broker.stopping", reason=reason)
        self.notifier.close()
        await self.schedule.stop()
        await self.server.close()
        for t in self._services:
            t.cancel()
        await asyncio.gather(*self._services, return_exceptions=True)
        self._services.clear()
        if self._persisting is not None:  # an in-flight checkpoint finishes first
            await asyncio.gather(self._persisting, return_exceptions=True)
        self._resolve_flush_waiters(self.store.fsync())
        snap = self.store.checkpoint_snapshot()
        offsets = self.offsets.snapshot()
        await asyncio.to_thread(self._persist, snap, offsets)
        self.store.close()
        self.index.close()
        self.log.info("broker.stopped", uptime_ms=(time.monotonic() - self._started_at) * 1000)

    def _persist(self, snap: dict[str, Any], offsets: Any) -> None:
        # One writer at a time: stop() cancels the checkpoint task, but a persist already
        # running in its thread goes on and would race stop()'s on the same temp files.
        with self._persist_lock:
            self.index.flush()
            self.store.persist_checkpoint(snap)
            self.offsets.persist(offsets)

    # ------------------------------------------------------------------ put path

    def put_message(self, msg: MessageInner) -> PutResult:
        """Store a message (diverting delayed ones into the schedule) and log it."""
        props = msg.properties
        level_s = props.get(DELAY)
        level = 0
        if level_s is not None and msg.topic != SCHEDULE_TOPIC:
            level = int(level_s)
            if level > 0:
                level = transform_delayed(msg, level, self.config.delay_levels_ms,
                                          self.store.clock_ms())
            else:
                props.pop(DELAY, None)
        result = self.store.put(msg)
        if result.status is not PutStatus.PUT_OK:
            return result
        if level > 0:
            self.stats.scheduled[level] += 1
        elif DELIVER_TIME not in props:
            self.stats.stored[msg.topic] += 1
        if self.config.log_messages:
            offset_id = result.offset_msg_id = self.store_offset_msg_id(result.phy_offset)
            if level > 0:
                self.msglog.info(
                    "message.scheduled", msg_id=props.get(UNIQ_KEY) or offset_id,
                    offset_msg_id=offset_id, real_topic=props[REAL_TOPIC],
                    real_queue_id=int(props[REAL_QID]), delay_level=level,
                    queue_offset=result.queue_offset, phy_offset=result.phy_offset,
                    store_ts=result.store_timestamp, deliver_ts=int(props[DELIVER_TIME]),
                    reconsume_times=msg.reconsume_times, tags=props.get(TAGS),
                )
            elif DELIVER_TIME not in props:
                self.msglog.info(
                    "message.stored", msg_id=props.get(UNIQ_KEY) or offset_id,
                    offset_msg_id=offset_id, topic=msg.topic, queue_id=msg.queue_id,
                    queue_offset=result.queue_offset, phy_offset=result.phy_offset,
                    size=result.size, store_ts=result.store_timestamp,
                    born_ts=msg.born_timestamp, tags=props.get(TAGS), keys=props.get(KEYS),
                    reconsume_times=msg.reconsume_times,
                )
        return result

    def store_offset_msg_id(self, phy_offset: int) -> str:
        ip, port = self.store.store_host
        return create_offset_msg_id(ip, port, phy_offset)

    def _on_dispatch(self, req: DispatchRequest) -> None:
        if not req.replay:
            self.notifier.notify(req.topic, req.queue_id)

    def _log_delivered(self, msg: MessageInner, result: PutResult, level: int,
                       deliver_ts: int, woke_ms: int) -> None:
        # sub-millisecond lateness from the wall clock right after the re-put (store
        # timestamps are whole milliseconds)
        lateness = round(time.time() * 1000 - deliver_ts, 3)
        self.stats.delivered[msg.topic] += 1
        self.stats.lateness[level].observe(lateness)
        if not self.config.log_messages:
            return
        msg_id = msg.properties.get(UNIQ_KEY) or self.store_offset_msg_id(result.phy_offset)
        self.msglog.debug("message.due", msg_id=msg_id, delay_level=level,
                      queue_offset=int(msg.properties.get("KAIROS_SCHEDULE_ORIGIN", "0:0")
                                       .split(":")[1]),
                      deliver_ts=deliver_ts, wake_lag_ms=float(woke_ms - deliver_ts))
        self.msglog.info("message.delivered", msg_id=msg_id, topic=msg.topic,
                      queue_id=msg.queue_id, queue_offset=result.queue_offset,
                      phy_offset=result.phy_offset, delay_level=level, deliver_ts=deliver_ts,
                      lateness_ms=lateness,
                      reconsume_times=msg.reconsume_times)

    # ------------------------------------------------------------------ flushing

    async def wait_flushed(self, offset: int) -> bool:
        """SYNC_FLUSH: wait until the commit log is fsynced past ``offset`` (group commit)."""
        if self.store.commitlog.flushed_offset >= offset:
            return True
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._flush_waiters.append((offset, fut))
        assert self._flush_event is not None
        self._flush_event.set()
        try:
            return await asyncio.wait_for(fut, self.config.sync_flush_timeout)
        except TimeoutError:
            return False

    def _resolve_flush_waiters(self, flushed: int) -> None:
        keep = []
        for off, fut in self._flush_waiters:
            if off <= flushed:
                if not fut.done():
                    fut.set_result(True)
            else:
                keep.append((off, fut))
        self._flush_waiters = keep

    async def _flush_service(self) -> None:
        assert self._flush_event is not None
        sync = self.config.flush_mode is FlushMode.SYNC_FLUSH
        while True:
            if sync:
                await self._flush_event.wait()
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._flush_event.wait(), self.config.flush_interval)
            self._flush_event.clear()
            self.store.write_out()
            flushed = await asyncio.to_thread(self.store.fsync)
            self._resolve_flush_waiters(flushed)

    async def _checkpoint_service(self) -> None:
        while True:
            await asyncio.sleep(self.config.checkpoint_interval)
            snap = self.store.checkpoint_snapshot()
            offsets = self.offsets.snapshot()
            # Shielded: cancelling this service must not abandon a write in its thread;
            # stop() waits for it before writing the final (newer) checkpoint.
            self._persisting = asyncio.ensure_future(
                asyncio.to_thread(self._persist, snap, offsets))
            await asyncio.shield(self._persisting)

    async def _housekeeping_service(self) -> None:
        interval = min(self.config.retention_check_interval, 10.0)
        last_retention = time.monotonic()
        while True:
            await asyncio.sleep(interval)
            self.clients.expire()
            if time.monotonic() - last_retention >= self.config.retention_check_interval:
                last_retention = time.monotonic()
                segs, files = self.store.delete_expired(self.config.file_reserved_hours * 3600)
                if segs:
                    self.log.info("store.files_deleted", kind="commitlog", count=segs, bytes=0)
                if files:
                    self.log.info("store.files_deleted", kind="consumequeue", count=files,
                                  bytes=0)
