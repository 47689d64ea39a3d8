"""The lifecycle Producer and PushConsumer share: state, start/shutdown, heartbeats.

Owns: ``ServiceState`` (RocketMQ's CREATE_JUST, RUNNING, SHUTDOWN_ALREADY, START_FAILED)
and ``ClientLifecycle``, the base of both clients: the client id, the remoting pool, the
route cache, the periodic timers, background tasks, HEART_BEAT to every broker of a known
route, UNREGISTER_CLIENT on shutdown, and ``async with``.

Invariants:
* ``start()`` runs once: only from CREATE_JUST. The state is RUNNING while the subclass's
  ``_start`` runs (so its requests are allowed); if ``_start`` raises, the state becomes
  START_FAILED, connections are closed and the error propagates. Timers start only after
  a successful ``_start``.
* ``shutdown()`` sets SHUTDOWN_ALREADY first (so rebalances and sends see it at once),
  stops the timers, runs the subclass's ``_shutdown`` (drain, persist, unlock), then
  unregisters from every broker (best effort, 1 s each) and closes connections; a second
  call, or a call on a client never started, only marks it SHUTDOWN_ALREADY.
* A heartbeat failure is logged, never raised: the next round (or the next route) retries.
* Several brokers: heartbeats go to every master of every known route; after each route
  refresh ``_sync_brokers`` closes connections to brokers no route lists and heartbeats
  new ones, and a reconnect to a known broker (it may have restarted) heartbeats it at
  once. ``shutdown()`` unregisters from every broker of every route.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from enum import Enum
from typing import Any, ClassVar, Self

from kairosmq.protocol.bodies import HeartbeatData
from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.headers import UnregisterClientRequestHeader

from .common import Periodic, make_client_id
from .credentials import client_ssl_context, credentials_from, rpc_hook_for
from .errors import ClientError, ClientStateError
from .options import ClientConfig
from .remoting import RemotingPool, RequestHandler, local_ip
from .route import RouteCache

log = logging.getLogger("kairosmq.client")


class ServiceState(Enum):
    """RocketMQ's ServiceState of a client."""

    CREATE_JUST = "CREATE_JUST"
    RUNNING = "RUNNING"
    SHUTDOWN_ALREADY = "SHUTDOWN_ALREADY"
    START_FAILED = "START_FAILED"


class ClientLifecycle:
    """Base of Producer and PushConsumer (see the module docstring)."""

    kind: ClassVar[str] = "client"

    def __init__(
        self,
        options: ClientConfig,
        on_request: RequestHandler | None = None,
        route_timeout: float | None = None,
    ) -> None:
        self.client_ip = options.client_ip or local_ip()
        self.client_id = make_client_id(self.client_ip, options.instance_name)
        self.request_timeout = options.mq_client_api_timeout
        self._pool = RemotingPool(
            on_request=on_request,
            serialize_type=options.serialize_type,
            rpc_hook=rpc_hook_for(credentials_from(options.access_key, options.secret_key)),
            ssl=client_ssl_context(options.tls),
            on_reconnect=self._on_reconnect,
        )
        self._routes = RouteCache(
            self._pool, options.namesrv_addr, route_timeout or options.mq_client_api_timeout
        )
        self._heartbeated: set[str] = set()
        self._bg: set[asyncio.Task[Any]] = set()
        self._timers: list[Periodic] = []
        self._state = ServiceState.CREATE_JUST

    @property
    def state(self) -> ServiceState:
        return self._state

    @property
    def running(self) -> bool:
        return self._state is ServiceState.RUNNING

    def _check_running(self) -> None:
        if self._state is not ServiceState.RUNNING:
            raise ClientStateError(f"{self.kind} is {self._state.value}; call start() first")

    # ------------------------------------------------------------ subclass hooks

    def _heartbeat_data(self) -> HeartbeatData:
        raise NotImplementedError

    def _unregister_header(self) -> UnregisterClientRequestHeader:
        raise NotImplementedError

    def _check_startable(self) -> None:
        """Raise ClientStateError if the subclass is not ready to start."""

    async def _start(self) -> None:
        """Subclass work of ``start()`` (state RUNNING; raising makes it START_FAILED)."""

    async def _shutdown(self) -> None:
        """Subclass work of ``shutdown()``, before unregistering and closing."""

    def _close(self) -> None:
        """Release local resources (after the pool is closed; also after a failed start)."""

    # ------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        if self._state is not ServiceState.CREATE_JUST:
            raise ClientStateError(f"{self.kind} is {self._state.value}; start() runs once")
        self._check_startable()
        self._state = ServiceState.RUNNING
        try:
            await self._start()
        except BaseException:
            self._state = ServiceState.START_FAILED
            self._pool.close()
            self._close()
            raise
        for t in self._timers:
            t.start()

    async def shutdown(self) -> None:
        if self._state is not ServiceState.RUNNING:
            if self._state is ServiceState.CREATE_JUST:
                self._state = ServiceState.SHUTDOWN_ALREADY
            return
        self._state = ServiceState.SHUTDOWN_ALREADY
        for t in self._timers:
            await t.stop()
        await self._shutdown()
        ext = self._unregister_header().to_ext_fields()
        for addr in self._broker_addrs():
            try:
                await self._pool.invoke(addr, RequestCode.UNREGISTER_CLIENT, ext, timeout=1.0)
            except ClientError as err:
                log.info("unregister from %s failed: %s", addr, err)
        self._pool.close()
        self._close()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    # ------------------------------------------------------------ heartbeats and tasks

    def _broker_addrs(self) -> set[str]:
        """The brokers this client heartbeats: every master of a known route (a
        consumer adds the slaves, as RocketMQ's does)."""
        return self._routes.broker_addrs()

    async def _heartbeat_all(self) -> None:
        """HEART_BEAT to every broker of a known route."""
        body = self._heartbeat_data().to_json()
        for addr in self._broker_addrs():
            await self._heartbeat(addr, body)

    async def _heartbeat_new(self, addrs: Any) -> None:
        """HEART_BEAT to the brokers among ``addrs`` not told about this client yet."""
        new = set(addrs) - self._heartbeated
        if new:
            self._heartbeated |= new
            body = self._heartbeat_data().to_json()
            for addr in sorted(new):
                await self._heartbeat(addr, body)

    async def _heartbeat(self, addr: str, body: bytes) -> None:
        self._heartbeated.add(addr)
        try:
            resp = await self._pool.invoke(
                addr, RequestCode.HEART_BEAT, None, body, timeout=self.request_timeout
            )
            if resp.code != ResponseCode.SUCCESS:
                log.warning("heartbeat to %s answered %d %s", addr, resp.code, resp.remark)
        except ClientError as err:
            log.warning("heartbeat to %s failed: %s", addr, err)

    def _on_reconnect(self, addr: str) -> None:
        """A connection to ``addr`` opened again: a broker we had told about this client
        may have restarted and forgotten it, so heartbeat it now, not in up to 30 s."""
        if self.running and addr in self._heartbeated:
            self._spawn(self._heartbeat(addr, self._heartbeat_data().to_json()))

    async def _sync_brokers(self) -> None:
        """After a route refresh: forget brokers no route lists any more (close their
        connection; a broker that comes back is heartbeated as new) and heartbeat the new
        ones (RocketMQ's cleanOfflineBroker + sendHeartbeatToAllBroker)."""
        live = self._broker_addrs()
        for addr in sorted(self._heartbeated - live):
            self._heartbeated.discard(addr)
            self._pool.drop(addr)
            log.info("broker %s is in no route any more: connection closed", addr)
        await self._heartbeat_new(live)

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` in a task owned by this client (failures are logged)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._bg.add(task)
        task.add_done_callback(_reap(self._bg))
        return task


def _reap(tasks: set[asyncio.Task[Any]]) -> Callable[[asyncio.Task[Any]], None]:
    def done(task: asyncio.Task[Any]) -> None:
        tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            if isinstance(exc, ClientError):
                log.warning("background task failed: %s", exc)
            else:
                log.error("background task failed", exc_info=exc)

    return done
