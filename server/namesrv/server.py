"""``NameServer``: the standalone name server process (RocketMQ's ``NamesrvController``).

Owns: the remoting listener (``transport.RemotingServer`` on host/port; port 0 picks a free
one, ``port`` holds the bound one after ``start``), the ``RouteInfoManager``, the KV config
(``<data_dir>/kvConfig.json``), the housekeeping loop (every ``scan_interval_s``: drop brokers
silent for ``broker_expiry_s``, RocketMQ's ``scanNotActiveBroker`` every 10 s with a 120 s
expiry; plus the idle-connection sweep) and the connection-loss hook (a broker whose
registration connection closes is dropped, RocketMQ's ``BrokerHousekeepingService``) and
``update_config`` (UPDATE_NAMESRV_CONFIG: ``settings.py``'s subset, applied in memory; the
housekeeping loop re-reads the scan interval on every turn), and the ACL and TLS of its port
(``acl_file`` / ``tls``: installed by ``security/install.py``'s ``secure_server``, the broker's
own installer, before the port opens; the ACL file's reload runs under this name server's
``Supervisor``). With ACL, registrations and writes need an admin account's signature
(``access.ADMIN_CODES``), lookups a valid one, as on a broker's ports; white-listed
addresses pass unsigned.

Invariants: ``start`` then ``stop`` (idempotent); after ``stop`` no task of this name server
runs and the port is closed. Every request goes through the guarded handler table
(``processor.namesrv_handlers``): a bad request gets a RocketMQ code and remark, the server
keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any  # Any: the transport Connection that closed (opaque here)

from ..handlers.admin.kv import KvConfig, KvConfigProcessor
from ..observe.logs import get_logger
from ..remoting.transport import Connection, ConnectionLimits, RemotingServer
from ..security.access import AclGuard, RequestPolicy
from ..security.install import secure_server
from ..security.tls import TlsSettings
from ..supervise import Supervisor
from .processor import NamesrvRequestProcessor, namesrv_handlers
from .routes import RouteInfoManager
from .settings import check_settings

DEFAULT_PORT = 9876
SCAN_INTERVAL_S = 10.0  # RocketMQ scanNotActiveBroker period
BROKER_EXPIRY_S = 120.0  # RocketMQ BROKER_CHANNEL_EXPIRED_TIME
MAX_FRAME = 16 * 1024 * 1024  # RocketMQ's default frame limit


class NamesrvStats:
    """What ``ingress.guarded`` counts."""

    def __init__(self) -> None:
        self.rejected = 0


def _wall_ms() -> float:
    return time.time() * 1000.0


class NameServer:
    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        data_dir: str | Path = "namesrv",
        scan_interval_s: float = SCAN_INTERVAL_S,
        broker_expiry_s: float = BROKER_EXPIRY_S,
        order_message_enable: bool = False,
        delete_topic_with_broker_registration: bool = False,
        idle_timeout_s: float = 120.0,
        max_connections: int = 4096,
        max_brokers: int = 4096,
        acl_file: str | Path | None = None,
        acl_reload_interval: float = 1.0,
        tls: TlsSettings | None = None,
        policy: RequestPolicy | None = None,
        clock_ms: Callable[[], float] = _wall_ms,
    ) -> None:
        if scan_interval_s <= 0 or broker_expiry_s <= 0:
            raise ValueError("scan_interval_s and broker_expiry_s must be > 0")
        self.host = host
        self.port = port
        self.data_dir = Path(data_dir)
        self.scan_interval_s = scan_interval_s
        self.broker_expiry_s = broker_expiry_s
        self.clock_ms = clock_ms
        self.log = get_logger("namesrv")
        self.stats = NamesrvStats()
        self.routes = RouteInfoManager(
            broker_expiry_s * 1000.0, delete_topic_with_broker_registration
        )
        self.kv = KvConfig(self.data_dir / "kvConfig.json")
        self.processor = NamesrvRequestProcessor(
            routes=self.routes,
            kv=self.kv,
            log=self.log,
            clock_ms=clock_ms,
            config=self.config_properties,
            order_message_enable=order_message_enable,
            max_brokers=max_brokers,
            update_config=self.update_config,
        )
        self.server = RemotingServer(
            log=get_logger("transport"),
            before_write=lambda: None,
            on_connection_lost=self._connection_lost,
            max_frame=MAX_FRAME,
            limits=ConnectionLimits(max_connections, idle_timeout_s),
        )
        self.handlers = namesrv_handlers(
            self.processor, KvConfigProcessor(kv=self.kv, log=self.log), self.stats, self.log
        )
        self.order_message_enable = order_message_enable
        self.acl_file = None if acl_file is None else Path(acl_file)
        self.acl_reload_interval = acl_reload_interval
        self.tls = tls or TlsSettings()
        self.policy = policy  # what --acl asks beyond the signature (None: RocketMQ's rules)
        self.acl: AclGuard | None = None
        self.supervisor = Supervisor(get_logger("supervisor"))
        self._task: asyncio.Task[None] | None = None
        self._started_at = 0.0
        self.running = False

    @property
    def address(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "", "::") else self.host
        return f"{host}:{self.port}"

    def config_properties(self) -> dict[str, str]:
        """GET_NAMESRV_CONFIG: NamesrvConfig / NettyServerConfig names."""
        return {
            "listenPort": str(self.port),
            "rocketmqHome": str(self.data_dir.resolve()),
            "kvConfigPath": str((self.data_dir / "kvConfig.json").resolve()),
            "clusterTest": "false",
            "orderMessageEnable": str(self.order_message_enable).lower(),
            "productEnvName": "center",
            "scanNotActiveBrokerInterval": f"{self.scan_interval_s * 1000:.0f}",
            "brokerChannelExpiredTime": f"{self.broker_expiry_s * 1000:.0f}",
            "deleteTopicWithBrokerRegistration": str(
                self.routes.delete_topic_with_broker_registration
            ).lower(),
            "serverChannelMaxIdleTimeSeconds": f"{self.server.limits.idle_timeout:g}",
        }

    def update_config(self, props: dict[str, str]) -> dict[str, str]:
        """UPDATE_NAMESRV_CONFIG: check every key (``settings.check``), then apply them all
        in memory; returns the applied values in RocketMQ's text form."""
        values = check_settings(props, set(self.config_properties()))
        for key, value in values.items():
            if key == "orderMessageEnable":
                self.order_message_enable = self.processor.order_message_enable = value
            elif key == "deleteTopicWithBrokerRegistration":
                self.routes.delete_topic_with_broker_registration = value
            elif key == "scanNotActiveBrokerInterval":
                self.scan_interval_s = value / 1000.0
            elif key == "brokerChannelExpiredTime":
                self.broker_expiry_s = value / 1000.0
                self.routes.broker_expiry_ms = float(value)
        shown = self.config_properties()
        return {key: shown[key] for key in values}

    async def start(self) -> None:
        if self.running:
            return
        await asyncio.to_thread(self.data_dir.mkdir, parents=True, exist_ok=True)
        await self.kv.ready()
        try:  # the ACL hook and TLS wrapper before the port opens (bad files fail the start)
            self.acl = secure_server(
                self.server,
                self.supervisor,
                acl_file=self.acl_file,
                acl_reload_interval=self.acl_reload_interval,
                tls=self.tls,
                host=self.host,
                role="name server",
                policy=self.policy,
            )
            self.port = await self.server.listen(self.host, self.port, self.handlers, "namesrv")
        except BaseException:
            await self.supervisor.stop()
            raise
        self._started_at = time.monotonic()
        self.running = True
        self._task = asyncio.get_running_loop().create_task(self._housekeeping())
        self.log.info(
            "namesrv.started",
            host=self.host,
            port=self.port,
            data_dir=str(self.data_dir.resolve()),
            broker_expiry_ms=self.broker_expiry_s * 1000.0,
            scan_interval_ms=self.scan_interval_s * 1000.0,
            acl=self.acl is not None,
            tls_mode=self.tls.mode.value,
        )

    async def stop(self) -> None:
        if not self.running:
            return
        self.running = False
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.supervisor.stop()
        await self.server.close(grace=1.0)
        self.log.info(
            "namesrv.stopped",
            uptime_ms=(time.monotonic() - self._started_at) * 1e3,
            brokers=len(self.routes.broker_live_table),
        )

    async def __aenter__(self) -> NameServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------ housekeeping

    def scan_not_active_brokers(self) -> int:
        """One expiry scan (the loop runs it every ``scan_interval_s``)."""
        now = self.clock_ms()
        removed = self.routes.scan_not_active_broker(now)
        for r in removed:
            live = r.live
            self.log.warning(
                "namesrv.broker_expired",
                broker_name=r.broker_name,
                broker_addr=r.broker_addr,
                silent_ms=now - live.last_update_ms if live else 0.0,
            )
            if live is not None and isinstance(live.conn, Connection):
                live.conn.abort("broker expired")  # RocketMQ closes the channel too
        return len(removed)

    async def _housekeeping(self) -> None:
        loop = asyncio.get_running_loop()
        next_scan = loop.time() + self.scan_interval_s
        while True:
            # re-read: UPDATE_NAMESRV_CONFIG may change scanNotActiveBrokerInterval
            step = min(self.scan_interval_s, self.server.limits.sweep_interval)
            next_scan = min(next_scan, loop.time() + self.scan_interval_s)
            await asyncio.sleep(step)
            try:
                self.server.sweep()
                if loop.time() >= next_scan:
                    next_scan = loop.time() + self.scan_interval_s
                    self.scan_not_active_brokers()
            except Exception as err:  # noqa: BLE001 - housekeeping must survive
                self.log.error(
                    "service.failed",
                    service="namesrv.housekeeping",
                    error=f"{type(err).__name__}: {err}",
                    failures=1,
                    retry_in_ms=step * 1000.0,
                )

    def _connection_lost(self, conn: Any) -> None:
        removed = self.routes.on_connection_lost(conn)
        if removed is not None:
            self.log.info(
                "namesrv.broker_disconnected",
                broker_name=removed.broker_name,
                broker_addr=removed.broker_addr,
                peer=conn.peer,
            )
