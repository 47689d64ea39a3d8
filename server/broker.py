"""Broker: the composition root. Owns the store, scheduler, tables and listeners.

Owns: construction and wiring of ``MessageStore``, ``ScheduleService``,
``TopicConfigManager``, ``ConsumerOffsetManager``, ``ClientRegistry``, ``LockManager``,
``ArrivalNotifier`` and the ``RemotingServer`` (broker port, optional VIP port - 2, and
the embedded name-server port); ``put_message`` (the one path every message takes into
the store, applying the delay transform and logging); background services (flush,
checkpoint, housekeeping, connection sweep, each delay level, metrics), each run by the
``Supervisor`` (restart with backoff, ``degraded`` in status); ``start``/``stop``.

Invariants:
* Everything runs on one event loop; blocking disk work (fsync, checkpoint writes) runs
  in a thread with data snapshotted on the loop first.
* ``stop`` is graceful: stop accepting, answer held pulls, stop the scheduler, flush,
  write a final checkpoint and offsets, close files. Each step is bounded in time and
  a failing step is logged (``broker.stop_failed``) without skipping the rest: the
  store and index are always closed (``finally``).
* A connection's close releases all it held: its clients' registrations (consumer
  groups are told NOTIFY_CONSUMER_IDS_CHANGED) and the queue locks of client ids left
  with no registration.
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
from .logsink import add_health_listener, remove_health_listener
from .longpoll import ArrivalNotifier, PullHolds
from .offsets import ConsumerOffsetManager
from .schedule import ScheduleService, transform_delayed
from .stats import BrokerStats
from .store import SCHEDULE_TOPIC, DispatchRequest, MessageInner, MessageStore, PutResult, PutStatus
from .store.index import KeyIndex
from .supervise import ServiceState, Supervisor
from .topics import TopicConfigManager
from .transport import Connection, ConnectionLimits, RemotingServer

STOP_STEP_TIMEOUT = 10.0  # seconds: a stop step that takes longer is abandoned (logged)


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
            max_message_size=cfg.max_message_size,
            disk_max_used_ratio=cfg.disk_max_used_ratio,
            disk_check_interval=cfg.disk_check_interval,
        )
        self.topics = TopicConfigManager(cfg.data_dir / "config",
                                         default_queue_nums=cfg.default_queue_nums,
                                         delay_levels=cfg.max_delay_level)
        self.offsets = ConsumerOffsetManager(cfg.data_dir / "config")
        self.clients = ClientRegistry(cfg.client_expire_seconds, log=get_logger("clients"),
                                      max_clients=cfg.max_clients)
        self.locks = LockManager(cfg.lock_expire_seconds)
        self.notifier = ArrivalNotifier()
        self.pull_holds = PullHolds(cfg.max_held_pulls_per_connection, cfg.max_held_pulls)
        self.stats = BrokerStats()
        self.supervisor = Supervisor(get_logger("supervisor"), self.stats.service_failures,
                                     base_delay=cfg.service_retry_base,
                                     max_delay=cfg.service_retry_max)
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
            ack_guard=self.store,
            on_connection_lost=self._connection_lost, max_frame=cfg.max_frame_length,
            limits=ConnectionLimits(cfg.max_connections, cfg.idle_timeout,
                                    cfg.partial_frame_timeout, cfg.max_header_bytes),
        )
        self.metrics_server: Any = None
        self.metrics_port: int | None = None
        self._sink_listener: Any = None
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
        self._started_at = time.monotonic()
        self.topics.load()
        self.offsets.load()
        self.recovery = await asyncio.to_thread(self.store.open)
        self.log.info("store.recovered", **self.recovery)
        try:
            await self._start_serving()
        except BaseException:
            self.running = True  # stop() runs every step: closes what was opened
            await self.stop("start failed")
            raise

    async def _start_serving(self) -> None:
        cfg = self.config
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
        sup = self.supervisor
        self.schedule.start(sup.spawn)
        loop = asyncio.get_running_loop()
        self._flush_event = asyncio.Event()
        sup.spawn("flush", self._flush_service, reports_progress=True)
        sup.spawn("checkpoint", self._checkpoint_service, reports_progress=True)
        sup.spawn("housekeeping", self._housekeeping_service, reports_progress=True)
        sup.spawn("connections", self._sweep_service, reports_progress=True)
        if cfg.metrics_port is not None:
            self._start_metrics()  # the first bind fails start (the operator asked for it)
            sup.spawn("metrics", self._metrics_service, reports_progress=True)

        def sink_health(name: str, error: str | None, retry_in: float) -> None:  # a thread
            with contextlib.suppress(RuntimeError):  # loop closed
                if error is None:
                    loop.call_soon_threadsafe(sup.external_recovered, name)
                else:
                    loop.call_soon_threadsafe(sup.external_failure, name, error, retry_in)

        self._sink_listener = sink_health
        add_health_listener(sink_health)
        self.running = True
        self.log.info("broker.started", host=cfg.host, port=self.port,
                      namesrv_port=self.namesrv_port, data_dir=str(cfg.data_dir),
                      delay_levels=cfg.delay_levels, flush_mode=cfg.flush_mode.value)

    async def stop(self, reason: str = "requested") -> None:
        if not self.running:
            return
        self.running = False
        self.log.info("broker.stopping", reason=reason)
        try:
            self.notifier.close()
            await self._stop_step("schedule", self.schedule.stop())
            await self._stop_step("listeners", self.server.close())
            await self._stop_step("services", self.supervisor.stop())
            self._stop_metrics()
            if self._persisting is not None:  # an in-flight checkpoint finishes first
                await self._stop_step("checkpoint", asyncio.gather(self._persisting,
                                                                   return_exceptions=True))
            await self._stop_step("flush", self._final_flush())
            snap = self.store.checkpoint_snapshot()
            offsets = self.offsets.snapshot()
            await self._stop_step("persist", asyncio.to_thread(self._persist, snap, offsets))
        except Exception as err:  # noqa: BLE001 - never skip closing the files
            self.log.error("broker.stop_failed", step="stop", error=f"{type(err).__name__}: "
                           f"{err}")
        finally:
            if self._sink_listener is not None:
                remove_health_listener(self._sink_listener)
            for name, close in (("store", self.store.close), ("index", self.index.close)):
                try:
                    close()
                except Exception as err:  # noqa: BLE001
                    self.log.error("broker.stop_failed", step=f"close {name}",
                                   error=f"{type(err).__name__}: {err}")
            self.log.info("broker.stopped",
                          uptime_ms=(time.monotonic() - self._started_at) * 1000)

    async def _stop_step(self, step: str, aw: Any) -> None:
        try:
            await asyncio.wait_for(aw, STOP_STEP_TIMEOUT)
        except Exception as err:  # noqa: BLE001 - logged; stop goes on
            self.log.error("broker.stop_failed", step=step, error=f"{type(err).__name__}: {err}")

    async def _final_flush(self) -> None:
        self._resolve_flush_waiters(await asyncio.to_thread(self.store.fsync))

    def _persist(self, snap: dict[str, Any], offsets: Any) -> None:
        # One writer at a time: stop() cancels the checkpoint task, but a persist already
        # running in its thread goes on and would race stop()'s on the same temp files.
        # Each part is tried even if one before it fails (a broken checkpoint file must
        # not stop consumer offsets from being saved); the first error is raised after.
        first: Exception | None = None
        with self._persist_lock:
            for part in (self.index.flush, lambda: self.store.persist_checkpoint(snap),
                         lambda: self.offsets.persist(offsets)):
                try:
                    part()
                except Exception as err:  # noqa: BLE001
                    first = first or err
        if first is not None:
            raise first

    # ------------------------------------------------------------------ connections

    def _connection_lost(self, conn: Connection) -> None:
        """Release what the connection's clients held (registrations, then locks)."""
        gone = self.clients.connection_closed(conn)
        self.locks.release_clients(gone)

    async def _sweep_service(self, st: ServiceState) -> None:
        interval = self.server.limits.sweep_interval
        while True:
            await asyncio.sleep(interval)
            self.server.sweep()
            st.ok()

    # ------------------------------------------------------------------ metrics

    def _start_metrics(self) -> None:
        from .metrics import serve_metrics

        cfg = self.config
        host = cfg.metrics_host or cfg.host
        port = self.metrics_port if self.metrics_port is not None else cfg.metrics_port
        assert port is not None
        self.metrics_server = serve_metrics(self, port, host)
        self.metrics_port = int(self.metrics_server[0].server_address[1])

    def _stop_metrics(self) -> None:
        if self.metrics_server is not None:
            httpd, _thread = self.metrics_server
            self.metrics_server = None
            httpd.shutdown()
            httpd.server_close()

    @property
    def metrics_address(self) -> str | None:
        if self.metrics_server is None:
            return None
        host, port = self.metrics_server[0].server_address[:2]
        return f"{host}:{port}"

    async def _metrics_service(self, st: ServiceState) -> None:
        """Watch the metrics HTTP thread; restart the endpoint if it died."""
        while True:
            if self.metrics_server is None:
                self._start_metrics()
            st.ok()
            await asyncio.sleep(1.0)
            if not self.metrics_server[1].is_alive():
                self._stop_metrics()
                raise RuntimeError("the metrics HTTP thread stopped")

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
                                          self.store.clock_ms(), round_up_ms=1)
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

    async def _flush_service(self, st: ServiceState) -> None:
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
            st.ok()

    async def _checkpoint_service(self, st: ServiceState) -> None:
        while True:
            await asyncio.sleep(self.config.checkpoint_interval)
            snap = self.store.checkpoint_snapshot()
            offsets = self.offsets.snapshot()
            # Shielded: cancelling this service must not abandon a write in its thread;
            # stop() waits for it before writing the final (newer) checkpoint.
            self._persisting = asyncio.ensure_future(
                asyncio.to_thread(self._persist, snap, offsets))
            await asyncio.shield(self._persisting)
            st.ok()

    async def _housekeeping_service(self, st: ServiceState) -> None:
        interval = min(self.config.retention_check_interval, 10.0)
        last_retention = time.monotonic()
        while True:
            await asyncio.sleep(interval)
            self.locks.release_clients(self.clients.expire())
            self.locks.expire()
            if time.monotonic() - last_retention >= self.config.retention_check_interval:
                last_retention = time.monotonic()
                gone = self.store.delete_expired(self.config.file_reserved_hours * 3600)
                if gone.segments:
                    self.log.info("store.files_deleted", kind="commitlog", count=gone.segments,
                                  bytes=gone.segment_bytes)
                if gone.queue_files:
                    self.log.info("store.files_deleted", kind="consumequeue",
                                  count=gone.queue_files, bytes=gone.queue_file_bytes)
            st.ok()
