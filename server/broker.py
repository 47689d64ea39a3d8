"""Broker: the composition root. Owns the store, scheduler, tables and listeners.

Owns: construction and wiring of ``MessageStore``, ``ScheduleService``,
``TopicConfigManager``, ``ConsumerOffsetManager``, ``ClientRegistry``, ``LockManager``,
``ArrivalNotifier``, ``PutPath`` (put/path.py: the one path every message takes into the
store), ``Endpoints`` (the bound ports) and the ``RemotingServer`` (broker port, optional
VIP port - 2, and the embedded name-server port, with the handler tables that
handlers/__init__.py builds from these services); background services (flush,
checkpoint, housekeeping, connection sweep, each delay level, metrics), each run by the
``Supervisor`` (restart with backoff, ``degraded`` in status); ``start``/``stop``. With
``namesrv_addr`` (``--namesrv``) there is no embedded name server: ``BrokerRegistration``
(cluster/registration.py) registers the broker with those name servers instead.

The open-file budget (fdbudget.py) is made first in ``start``: the soft limit raised to
the hard one, ``broker.fd_budget`` logged, and the open queue files and connection limit
lowered to fit before any store file or listener opens (``FdBudgetError`` if the limit
cannot hold a broker); ``status()`` shows it (``fds``).

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
import dataclasses
import socket
import threading
import time
from typing import Any  # Any: JSON status and checkpoint; optional AclGuard, sink listener

from kairosmq.protocol import native
from kairosmq.protocol.naming import is_system_topic

from .cluster.registration import BrokerRegistration
from .config import BrokerConfig, FlushMode
from .endpoints import Endpoints
from .fdbudget import (
    FdBudget,
    FdBudgetError,
    open_fds,
    plan,
    raise_open_file_limit,
    segments_on_disk,
)
from .ha.epoch import EpochFile
from .ha.master import HAService
from .ha.rejoin import rejoin
from .ha.role import SLAVE_REFUSAL, BrokerRole
from .ha.slave import HAClient
from .ha.sync import SlaveSynchronize, master_broker_address
from .handlers import broker_table, namesrv_table
from .handlers.admin.kv import KvConfig
from .handlers.reply import ensure_system_topics
from .observe.logs import MessageLog, get_logger
from .observe.logsink import add_health_listener, remove_health_listener
from .observe.metrics import MetricsEndpoint, MetricsSources
from .observe.stats import BrokerStats
from .observe.stats_items import BrokerStatsManager, counter_sources
from .put.path import PutPath
from .remoting.longpoll import ArrivalNotifier, PullHolds
from .remoting.transport import Connection, ConnectionLimits, RemotingServer
from .schedule.delay.service import ScheduleService
from .schedule.delivered import DeliveryLog
from .schedule.recalls import LevelRecalls
from .schedule.timer import TimerBuckets, TimerService
from .security.install import install_security
from .store import MessageStore
from .store.index import KeyIndex
from .store.replica import ReplicaAppender
from .supervise import ServiceState, Supervisor
from .tables.clients import ClientRegistry, LockManager
from .tables.offsets import ConsumerOffsetManager
from .tables.settings import BrokerSettings
from .tables.subscriptions import SubscriptionGroupManager
from .tables.topics import TopicConfigManager
from .transaction.service import TransactionService

STOP_STEP_TIMEOUT = 10.0  # seconds: a stop step that takes longer is abandoned (logged)
PROMOTE_DISCONNECT_WAIT = 2.0  # seconds a promotion waits for a killed master's connection to end


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
        self.endpoints = Endpoints(
            cfg.advertised_host or ("127.0.0.1" if cfg.host in ("0.0.0.0", "", "::") else cfg.host),
            cfg.port,
            0 if cfg.namesrv_addr else cfg.namesrv_port,
            cfg.namesrv_addr,
        )
        self.store = MessageStore(
            cfg.data_dir / "store",
            store_host=(_ipv4(self.endpoints.advertised_host), cfg.port),
            segment_size=cfg.commitlog_segment_size,
            units_per_file=cfg.consumequeue_units_per_file,
            max_message_size=cfg.max_message_size,
            disk_max_used_ratio=cfg.disk_max_used_ratio,
            disk_check_interval=cfg.disk_check_interval,
            max_open_queue_files=cfg.max_open_queue_files,
        )
        self.topics = TopicConfigManager(
            cfg.data_dir / "config",
            default_queue_nums=cfg.default_queue_nums,
            delay_levels=cfg.max_delay_level,
            max_topics=cfg.max_topics,
            log=get_logger("topics"),
        )
        self.offsets = ConsumerOffsetManager(
            cfg.data_dir / "config", max_offsets=cfg.max_consumer_offsets
        )
        self.clients = ClientRegistry(
            cfg.client_expire_seconds, log=get_logger("clients"), max_clients=cfg.max_clients
        )
        self.locks = LockManager(cfg.lock_expire_seconds)
        self.notifier = ArrivalNotifier()
        self.pull_holds = PullHolds(cfg.max_held_pulls_per_connection, cfg.max_held_pulls)
        self.stats = BrokerStats()
        self.supervisor = Supervisor(
            get_logger("supervisor"),
            self.stats.service_failures,
            base_delay=cfg.service_retry_base,
            max_delay=cfg.service_retry_max,
        )
        # scheduled delivery (server/schedule/), built in dependency order: the recall
        # marks (timer writes, levels read), the delivery log, the timer service (its
        # admission is what the put path asks), the put path, then the delay levels
        self.level_recalls = LevelRecalls()
        deliveries = DeliveryLog(self.store, self.stats, self.msglog, cfg)
        self.timer_buckets = TimerBuckets(self.store.data_dir / "timer")
        self.timer = TimerService(
            self.store,
            self.timer_buckets,
            on_fired=deliveries.timers_fired,
            level_recalls=self.level_recalls,
            batch=cfg.schedule_batch,
            clock_ms=self.store.clock_ms,
        )
        self.put_path = PutPath(
            self.store, self.stats, self.msglog, cfg, admit_timer=self.timer.admit
        )
        self.schedule = ScheduleService(
            self.store,
            self.notifier,
            cfg.delay_levels_ms,
            on_delivered=deliveries.delivered,
            recalled=self.level_recalls.pass_record,
            batch=cfg.schedule_batch,
            clock_ms=self.store.clock_ms,  # one clock
        )
        self.store.providers.append(self.schedule)
        # replication (server/ha/): a master streams its log to slaves (SYNC_MASTER: its
        # pulls wait for the slave's ack, so their arrival notifications go through the
        # confirm gate); a slave refuses every put and appends its master's bytes
        self.role = BrokerRole(cfg.broker_role)
        self.ha: HAService | None = None
        self.ha_client: HAClient | None = None  # a slave's, made once the store is open
        self.slave_sync: SlaveSynchronize | None = None
        self.epochs = EpochFile(self.store.data_dir / "epoch.json")  # promotions
        if self.role.is_master:
            self.ha = HAService(self.store, cfg, self.notifier, get_logger("ha"))
            self.store.dispatchers.append(self.ha.on_dispatch)
        else:
            self.store.guard.role_refusal = SLAVE_REFUSAL
        if self.ha is None or self.ha.gate is None:
            self.store.dispatchers.append(self.notifier.on_dispatch)
        self.store.dispatchers.append(self.schedule.on_dispatch)
        self.store.providers.append(self.timer)
        self.store.dispatchers.append(self.timer.on_dispatch)
        # transactional messages (server/transaction/): pending half messages, check-back
        self.transactions = TransactionService(
            self.store, cfg, self.clients, self.put_path.put, clock_ms=self.store.clock_ms
        )
        self.store.providers.append(self.transactions)
        self.store.dispatchers.append(self.transactions.on_dispatch)
        # msgId/key index for admin lookups (store/index.py); opened after the store
        self.index = KeyIndex(self.store.data_dir / "index", self.store)
        self.store.dispatchers.append(self.index.dispatch)
        self.kv_config = KvConfig(cfg.data_dir / "config" / "kvConfig.json")
        # MQADMIN: subscription groups, UPDATE_BROKER_CONFIG's overrides, per-minute stats
        self.subscriptions = SubscriptionGroupManager(
            cfg.data_dir / "config",
            cfg,
            max_groups=cfg.max_subscription_groups,
            log=get_logger("subscriptions"),
        )
        self.settings = BrokerSettings(cfg, cfg.data_dir / "config")
        self.settings.on_change.append(self._setting_changed)
        self.stats_manager = BrokerStatsManager(counter_sources(self.stats, cfg.cluster_name))
        self.server = RemotingServer(
            log=get_logger("transport"),
            before_write=self.store.write_out,
            ack_guard=self.store,
            replicated=self.ha.wait_replicated if self.ha is not None and self.ha.sync else None,
            on_connection_lost=self._connection_lost,
            max_frame=cfg.max_frame_length,
            limits=ConnectionLimits(
                cfg.max_connections,
                cfg.idle_timeout,
                cfg.partial_frame_timeout,
                cfg.max_header_bytes,
                cfg.partial_frame_budget,
            ),
        )
        self.acl: Any = None  # security/access.py AclGuard with --acl (security/install.py)
        self.metrics = MetricsEndpoint(
            MetricsSources(
                stats=self.stats,
                listeners=self.server,
                pull_holds=self.pull_holds,
                log_range=self.store.phy_range,
                clock_ms=self.store.clock_ms,
                timer_next_due=self.timer.next_due,
                schedule_backlog=self.schedule.backlog,
                services=self.supervisor.status,
                uptime_ms=lambda: self.uptime_ms,
                acl_denied=lambda: self.acl.denied if self.acl is not None else {},
                replication=self._replication_metrics,
            ),
            cfg.metrics_host,
            cfg.metrics_port,
        )
        self._sink_listener: Any = None
        self._persist_lock = threading.Lock()
        self._persisting: asyncio.Future[None] | None = None
        self._flush_waiters: list[tuple[int, asyncio.Future[bool]]] = []
        self._flush_event: asyncio.Event | None = None
        self._started_at = 0.0
        self.running = False
        self.recovery: dict[str, Any] = {}
        self.fd_budget: FdBudget | None = None  # made at start (server/fdbudget.py)
        # request code -> handler (handlers/__init__.py: the one place that reads the
        # broker's services to build the processors)
        self.broker_handlers = broker_table(self)
        self.namesrv_handlers = namesrv_table(self)
        # --namesrv: registration with external name servers (no embedded one then)
        self.registration = (
            BrokerRegistration(
                config=cfg,
                endpoints=self.endpoints,
                topics=self.topics,
                log=get_logger("registration"),
            )
            if cfg.namesrv_addr
            else None
        )

    # ------------------------------------------------------------------ addresses

    @property
    def port(self) -> int:
        """The broker port as bound (``endpoints``: the one place it lives)."""
        return self.endpoints.port

    @property
    def namesrv_port(self) -> int:
        return self.endpoints.namesrv_port

    @property
    def advertised_host(self) -> str:
        return self.endpoints.advertised_host

    @property
    def address(self) -> str:
        return self.endpoints.address

    @property
    def namesrv_address(self) -> str:
        return self.endpoints.namesrv_address

    def status(self) -> dict[str, Any]:
        """What KAIROS_GET_BROKER_STATUS answers (``kairosmq admin status``)."""
        log_min, log_max = self.store.phy_range()
        status: dict[str, Any] = {
            "running": self.running,
            "address": self.address,
            "namesrvAddress": self.namesrv_address,
            "brokerName": self.config.broker_name,
            "uptimeMs": round(self.uptime_ms),
            "connections": len(self.server.connections),
            "heldPulls": self.pull_holds.held,
            "commitLogMinOffset": log_min,
            "commitLogMaxOffset": log_max,
            "topics": len(self.topics.topics),
            "indexEndOffset": self.index.end_phy,
            "core": native.describe(),  # native or pure, and why (protocol/native.py)
            # supervised services (server/supervise.py): state, failures, last error
            "services": self.supervisor.status(),
            "degraded": self.supervisor.degraded,
        }
        if self.registration is not None:  # --namesrv: each name server's registration
            status["registration"] = self.registration.status()
        # replication (server/ha/): the role, the slaves and their acks, or the master
        if self.ha is not None:
            status["ha"] = {
                **self.ha.status(),
                "haAddress": self.endpoints.ha_address,
                "epoch": self.epochs.current,
                "epochs": self.epochs.entries,
            }
        elif self.ha_client is not None and self.slave_sync is not None:
            status["ha"] = {**self.ha_client.status(), **self.slave_sync.status()}
        if self.fd_budget is not None:  # descriptors: open now against the start's budget
            status["fds"] = {
                "open": open_fds(),
                "limit": self.fd_budget.limit,
                "budget": self.fd_budget.total,
                "queueFilesOpen": self.store.maps.open_count,
                "maxOpenQueueFiles": self.store.maps.capacity,
                "maxConnections": self.server.limits.max_connections,
            }
        return status

    @property
    def uptime_ms(self) -> float:
        return (time.monotonic() - self._started_at) * 1000 if self.running else 0.0

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._started_at = time.monotonic()
        self.fd_budget = self._plan_fds()
        self.topics.load()
        created = ensure_system_topics(self.topics, self.config)  # REPLY: reply/trace topics
        if created:
            self.log.info("topic.system_created", topics=",".join(created))
        self.offsets.load()
        self.subscriptions.load(seed=self.offsets.groups)
        skipped = self.settings.load()  # UPDATE_BROKER_CONFIG's values win over the CLI's
        if self.settings.overrides or skipped:
            self.log.info(
                "broker.config_loaded",
                path=str(self.settings.path),
                keys=",".join(sorted(self.settings.overrides)),
                skipped=",".join(skipped),
            )
        unreadable = self.epochs.load()
        if unreadable is not None:
            self.log.error("ha.epoch_unreadable", path=str(self.epochs.path), error=unreadable)
        if not self.role.is_master:  # a log running past the master's newest epoch is cut
            await rejoin(
                config=self.config,
                store_dir=self.store.data_dir,
                epochs=self.epochs,
                master=self._master_broker_address(),
                log=get_logger("ha"),
            )
        self.recovery = await asyncio.to_thread(self.store.open)
        self.log.info("store.recovered", **self.recovery)
        try:
            await self._start_serving()
        except BaseException:
            self.running = True  # stop() runs every step: closes what was opened
            await self.stop("start failed")
            raise

    def _plan_fds(self) -> FdBudget:
        """Raise the soft open-file limit to the hard one, make the fd budget and apply
        it (open queue files, connections) before any store file or listener opens;
        ``FdBudgetError`` if the limit cannot hold a broker (logged first)."""
        cfg = self.config
        before, limit = raise_open_file_limit()
        try:
            b = plan(
                cfg,
                limit=limit,
                raised_from=before,
                open_now=open_fds(),
                segments=segments_on_disk(cfg.data_dir),
            )
        except FdBudgetError as err:
            self.log.error(
                "broker.fd_budget", limit=limit, raised_from=before, fits=False, remark=str(err)
            )
            raise
        if b.fits:
            self.log.info("broker.fd_budget", **b.fields(), remark="")
        else:  # the configured values were lowered: say so, and what the limit should be
            self.log.warning("broker.fd_budget", **b.fields(), remark=b.remark(cfg))
        self.store.maps.capacity = b.queue_files
        if b.connections != self.server.limits.max_connections:
            self.server.limits = dataclasses.replace(
                self.server.limits, max_connections=b.connections
            )
        return b

    def rebudget_fds(self) -> None:
        """Commit-log segments beyond the budget's (those on disk at start plus a margin)
        hold descriptors the budget gave to open queue files: take them from there, down
        to FLOOR, and give them back when retention deletes segments (housekeeping)."""
        b = self.fd_budget
        if b is None:
            return
        segments = len(self.store.commitlog.segments)
        cap = b.queue_files_with(segments)
        if cap == self.store.maps.capacity:
            return
        lowered = cap < self.store.maps.capacity
        self.store.maps.capacity = cap
        remark = (
            f"{segments} commit-log segments, {b.segments} in the start's budget: "
            f"at most {cap} open queue files"
        )
        if lowered:
            self.log.warning(
                "broker.fd_budget",
                limit=b.limit,
                segments=segments,
                queue_files=cap,
                fits=False,
                remark=remark,
            )
        else:
            self.log.info(
                "broker.fd_budget",
                limit=b.limit,
                segments=segments,
                queue_files=cap,
                fits=cap == b.queue_files,
                remark=remark,
            )

    async def _start_serving(self) -> None:
        cfg = self.config
        await asyncio.to_thread(self.index.open)
        self.acl = install_security(  # ACL hook + TLS wrapper before any listener
            cfg,
            self.server,
            self.supervisor,
            read_record=self.store.read_record,
            half_topic=self.transactions.half_topic,
        )
        self.endpoints.port = await self.server.listen(
            cfg.host, cfg.port, self.broker_handlers, "broker"
        )
        self.store.store_host = (self.store.store_host[0], self.port)
        if cfg.vip_channel and self.port > 2:
            try:
                await self.server.listen(cfg.host, self.port - 2, self.broker_handlers, "vip")
            except OSError as err:
                self.log.warning("broker.vip_unavailable", port=self.port - 2, error=str(err))
        if self.registration is None:  # embedded name server (default)
            self.endpoints.namesrv_port = await self.server.listen(
                cfg.host, cfg.namesrv_port, self.namesrv_handlers, "namesrv"
            )
        await self._start_ha()
        sup = self.supervisor
        if self.role.is_master:  # a slave derives this state but fires nothing
            self._start_master_services()
        elif self.ha_client is not None:
            sup.spawn("ha-client", self.ha_client.run, reports_progress=True)
            assert self.slave_sync is not None
            sup.spawn("slave-sync", self.slave_sync.run, reports_progress=True)
        loop = asyncio.get_running_loop()
        self._flush_event = asyncio.Event()
        sup.spawn("flush", self._flush_service, reports_progress=True)
        sup.spawn("checkpoint", self._checkpoint_service, reports_progress=True)
        sup.spawn("housekeeping", self._housekeeping_service, reports_progress=True)
        sup.spawn("connections", self._sweep_service, reports_progress=True)
        if cfg.metrics_port is not None:
            self.metrics.start()  # the first bind fails start (the operator asked for it)
            sup.spawn("metrics", self.metrics.watch, reports_progress=True)

        def sink_health(name: str, error: str | None, retry_in: float) -> None:  # a thread
            with contextlib.suppress(RuntimeError):  # loop closed
                if error is None:
                    loop.call_soon_threadsafe(sup.external_recovered, name)
                else:
                    loop.call_soon_threadsafe(sup.external_failure, name, error, retry_in)

        self._sink_listener = sink_health
        add_health_listener(sink_health)
        self.running = True
        if self.registration is not None:  # serving: now tell the name servers
            self.registration.start(sup)
        self.log.info(
            "broker.started",
            host=cfg.host,
            port=self.port,
            namesrv_port=self.namesrv_port,
            data_dir=str(cfg.data_dir),
            delay_levels=cfg.delay_levels,
            flush_mode=cfg.flush_mode.value,
            namesrv=self.namesrv_address,
            broker_role=self.role.value,
            ha_port=self.endpoints.ha_port,
        )
        core = native.core()
        if core == "native" or native.DISABLED:
            self.log.info("broker.core", core=core, reason=native.reason())
        else:  # a twin not built or stale: nobody asked for the pure core
            self.log.warning("broker.core", core=core, reason=native.reason())

    def _start_master_services(self) -> None:
        """What only a master runs: the delay levels, the timers, the transaction check
        (a slave holds their state, derived from the log, dormant)."""
        sup = self.supervisor
        self.schedule.start(sup.spawn)
        self.timer.start(sup.spawn)
        sup.spawn("transaction-check", self.transactions.run, reports_progress=True)

    async def promote(self) -> dict[str, Any]:
        """A slave becomes an ASYNC_MASTER now (``kairosmq admin promote``): its HA client
        and table sync stop, a part of a record it was receiving is cut, a new epoch
        starts at its log's end, puts are taken, its HA listener opens, the delay levels,
        timers and transaction check start on the state it derived, and it registers as
        brokerId 0. ``ValueError`` on a master, and on a slave still connected to its
        master (``_refuse_promotion_while_replicating``). The start options are not rewritten: the
        next start needs ``--broker-role ASYNC_MASTER`` (or SYNC_MASTER) and brokerId 0."""
        if self.role.is_master or self.ha_client is None:
            raise ValueError(f"this broker is already a master ({self.role.value})")
        await self._refuse_promotion_while_replicating(self.ha_client)
        sup = self.supervisor
        await sup.stop_service("ha-client")
        await sup.stop_service("slave-sync")
        appender = self.ha_client.appender
        cut = self.store.commitlog.cut_to(appender.dispatched)  # a record half received
        created = self._topics_of_queues()
        self.store.replica_end = None
        start = self.store.commitlog.max_offset
        epoch = await asyncio.to_thread(self.epochs.begin, start)
        self.role = BrokerRole.ASYNC_MASTER
        self.store.guard.role_refusal = None
        self.ha = HAService(
            self.store, self.config, self.notifier, get_logger("ha"), role=self.role
        )
        self.store.dispatchers.append(self.ha.on_dispatch)
        self.ha_client = self.slave_sync = None
        await self._start_ha()
        self._start_master_services()
        if self.registration is not None:
            self.registration.promoted()
        self.log.warning(
            "ha.promoted",
            epoch=epoch["epoch"],
            start_offset=start,
            cut_bytes=cut,
            broker_role=self.role.value,
            topics_created=len(created),
        )
        return {
            "brokerRole": self.role.value,
            "epoch": epoch["epoch"],
            "startOffset": start,
            "cutBytes": cut,
            "topicsCreated": created,
            "haListenPort": self.endpoints.ha_port,
            "remark": "promoted; start it next time with --broker-role ASYNC_MASTER "
            "(or SYNC_MASTER) and --broker-id 0",
        }

    async def _refuse_promotion_while_replicating(self, client: HAClient) -> None:
        """``ValueError`` while the slave is still connected to its master: promoting it
        would make two masters, and lose whatever the master holds past this slave's
        offset. A master killed just now: its connection's end is awaited a moment
        (PROMOTE_DISCONNECT_WAIT) before refusing."""
        deadline = time.monotonic() + PROMOTE_DISCONNECT_WAIT
        while client.connected_to is not None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if client.connected_to is not None:
            raise ValueError(
                f"this slave is still connected to its master {client.connected_to} and "
                f"replicating (at offset {client.appender.max_offset}): promoting it would "
                "make two masters and lose what the master holds past that offset; stop "
                "the master first (a silent master's connection is closed after "
                f"{self.config.ha_housekeeping_interval:g} s)"
            )

    def _topics_of_queues(self) -> list[str]:
        """Topics the log holds messages for that the table lacks (created on the master
        after the last SlaveSynchronize round): created with the queues seen, at least
        the default count, so the new master serves them. System topics are the
        broker's own."""
        need: dict[str, int] = {}
        for topic, qid in list(self.store.queues):
            if topic not in self.topics.topics and not is_system_topic(topic):
                need[topic] = max(need.get(topic, 0), qid + 1)
        for topic, n in need.items():
            self.topics.create(topic, max(n, self.config.default_queue_nums), bounded=False)
        return sorted(need)

    async def _start_ha(self) -> None:
        """A master's HA listener (port + 1 unless --ha-listen-port; a failed bind of the
        default port is a warning for a lone ASYNC_MASTER, an error otherwise); a
        slave's appender and HAClient."""
        cfg = self.config
        if self.ha is not None:
            port = cfg.ha_listen_port
            if port is None:
                port = self.port + 1 if cfg.port != 0 else 0
            try:
                self.endpoints.ha_port = await self.ha.listen(cfg.host, port)
            except OSError as err:
                if cfg.ha_listen_port is not None or self.role is not BrokerRole.ASYNC_MASTER:
                    raise
                self.log.warning("ha.listen_failed", port=port, error=str(err))
            return
        notifier = self.notifier
        appender = ReplicaAppender(
            self.store, on_record=lambda req: notifier.notify(req.topic, req.queue_id)
        )
        self.ha_client = HAClient(appender, cfg, get_logger("ha"), self._ha_master_address)
        self.slave_sync = SlaveSynchronize(
            config=cfg,
            topics=self.topics,
            offsets=self.offsets,
            subscriptions=self.subscriptions,
            master_address=self._master_broker_address,
            log=get_logger("ha"),
        )

    def _replication_metrics(self) -> dict[str, int | None]:
        """What a scrape exports of replication: a master's only ({}: none)."""
        if self.ha is None:
            return {}
        return {
            "slaves": len(self.ha.connections),
            "ackOffset": self.ha.push_max,
            "lagBytes": self.ha.lag_bytes(),
            "lagMs": self.ha.lag_ms(),
        }

    def _ha_master_address(self) -> str | None:
        """A slave's master HA address: --ha-master-address, else the name servers'."""
        if self.config.ha_master_address is not None:
            return self.config.ha_master_address
        if self.registration is not None:
            return self.registration.ha_master_address
        return None

    def _master_broker_address(self) -> str | None:
        """A slave's master broker port (SlaveSynchronize): the name servers' masterAddr,
        else --ha-master-address's host and the port below it (RocketMQ's pairing)."""
        if self.registration is not None and self.registration.master_address is not None:
            return self.registration.master_address
        ha = self._ha_master_address()
        return master_broker_address(ha) if ha is not None else None

    async def stop(self, reason: str = "requested") -> None:
        if not self.running:
            return
        self.running = False
        self.log.info("broker.stopping", reason=reason)
        try:
            if self.registration is not None:  # RocketMQ: unregisterBrokerAll first
                await self._stop_step("unregister", self.registration.stop())
            self.notifier.close()
            if self.ha is not None:
                await self._stop_step("ha", self.ha.close())
            await self._stop_step("schedule", self.schedule.stop())
            await self._stop_step("timer", self.timer.stop())
            await self._stop_step("listeners", self.server.close())
            await self._stop_step("services", self.supervisor.stop())
            self.metrics.stop()
            if self._persisting is not None:  # an in-flight checkpoint finishes first
                await self._stop_step(
                    "checkpoint", asyncio.gather(self._persisting, return_exceptions=True)
                )
            await self._stop_step("flush", self._final_flush())
            # the topic and subscription-group tables' background writes (tables/table_file.py)
            await self._stop_step(
                "tables", asyncio.gather(self.topics.flushed(), self.subscriptions.flushed())
            )
            snap = self.store.checkpoint_snapshot()
            offsets = self.offsets.snapshot()
            timers = self.timer_buckets.take_dirty()
            await self._stop_step(
                "persist", asyncio.to_thread(self._persist, snap, offsets, timers)
            )
        except Exception as err:  # noqa: BLE001 - never skip closing the files
            self.log.error("broker.stop_failed", step="stop", error=f"{type(err).__name__}: {err}")
        finally:
            if self._sink_listener is not None:
                remove_health_listener(self._sink_listener)
            for name, close in (("store", self.store.close), ("index", self.index.close)):
                try:
                    close()
                except Exception as err:  # noqa: BLE001
                    self.log.error(
                        "broker.stop_failed",
                        step=f"close {name}",
                        error=f"{type(err).__name__}: {err}",
                    )
            self.log.info("broker.stopped", uptime_ms=(time.monotonic() - self._started_at) * 1000)

    async def _stop_step(self, step: str, aw: Any) -> None:
        try:
            await asyncio.wait_for(aw, STOP_STEP_TIMEOUT)
        except Exception as err:  # noqa: BLE001 - logged; stop goes on
            self.log.error("broker.stop_failed", step=step, error=f"{type(err).__name__}: {err}")

    async def _final_flush(self) -> None:
        self._resolve_flush_waiters(await asyncio.to_thread(self.store.fsync))

    def _persist(self, snap: dict[str, Any], offsets: Any, timers: dict[int, bytes]) -> None:
        # One writer at a time: stop() cancels the checkpoint task, but a persist already
        # running in its thread goes on and would race stop()'s on the same temp files.
        # Each part is tried even if one before it fails (a broken checkpoint file must
        # not stop consumer offsets from being saved); the first error is raised after.
        first: Exception | None = None
        with self._persist_lock:
            for part in (
                self.index.flush,
                lambda: self._persist_checkpoint(snap, timers),
                lambda: self.offsets.persist(offsets),
            ):
                try:
                    part()
                except Exception as err:  # noqa: BLE001
                    first = first or err
        if first is not None:
            raise first

    def _persist_checkpoint(self, snap: dict[str, Any], timers: dict[int, bytes]) -> None:
        """Timer bucket entries of records below the checkpoint first, then the checkpoint
        (if the buckets cannot be written, the checkpoint is not moved)."""
        self.timer_buckets.flush(timers)
        self.store.persist_checkpoint(snap)

    def _setting_changed(self, field: str, value: Any) -> None:
        """UPDATE_BROKER_CONFIG: carry a new value to a service that copied it at start."""
        if field == "disk_max_used_ratio":
            self.store.guard.max_used_ratio = value

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

    @property
    def metrics_address(self) -> str | None:
        return self.metrics.address

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
            offsets = await self.offsets.snapshot_async()  # encoded between requests
            snap = self.store.checkpoint_snapshot()
            timers = self.timer_buckets.take_dirty()
            # Shielded: cancelling this service must not abandon a write in its thread;
            # stop() waits for it before writing the final (newer) checkpoint.
            self._persisting = asyncio.ensure_future(
                asyncio.to_thread(self._persist, snap, offsets, timers)
            )
            await asyncio.shield(self._persisting)
            st.ok()

    async def _housekeeping_service(self, st: ServiceState) -> None:
        interval = min(self.config.retention_check_interval, 10.0)
        last_retention = time.monotonic()
        while True:
            await asyncio.sleep(interval)
            self.locks.release_clients(self.clients.expire())
            self.locks.expire()
            self.stats_manager.sample()  # VIEW_BROKER_STATS_DATA's minute/hour/day windows
            self.rebudget_fds()
            if time.monotonic() - last_retention >= self.config.retention_check_interval:
                last_retention = time.monotonic()
                gone = self.store.delete_expired(  # asks the timers only if a segment expired
                    self.config.file_reserved_hours * 3600, self.timer.retention_floor
                )
                if gone.segments:
                    self.log.info(
                        "store.files_deleted",
                        kind="commitlog",
                        count=gone.segments,
                        bytes=gone.segment_bytes,
                    )
                if gone.queue_files:
                    self.log.info(
                        "store.files_deleted",
                        kind="consumequeue",
                        count=gone.queue_files,
                        bytes=gone.queue_file_bytes,
                    )
            await self.timer.delete_fired_buckets()
            st.ok()
