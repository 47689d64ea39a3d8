"""Registration with external name servers (``--namesrv``): RocketMQ's ``BrokerOuterAPI``
and the broker's ``registerBrokerAll`` task.

Owns: ``parse_namesrv_addr`` (the one parser of ``host:port;host:port``),
``BrokerRegistration`` (REGISTER_BROKER 103 to every name server at start, every
``register_period`` seconds and on every change of the topic table; UNREGISTER_BROKER 104
on stop), its ``DataVersion``, the per-name-server state ``status()`` shows and, for a
slave, the master the answers name (``ha_master_address``, ``master_address``). The wire
forms are ``kairosmq.protocol.registration``'s; requests go over the client package's
``RemotingClient`` (one lazily reconnecting connection per name server), signed with
``--namesrv-access-key`` and the secret from ``KAIROS_NAMESRV_SECRET_KEY`` when given
(RocketMQ's ``AclClientRPCHook``, client/credentials.py: a name server with ``--acl`` takes
registrations from an admin account only) and over TLS with ``--namesrv-tls``
(``namesrv_ssl_context``).

Invariants:
* One task per name server: a dead, slow or refusing name server never delays another's
  registration. A failed registration is logged (``broker.register_failed``) and retried
  sooner than the period (0.5 s doubling up to ``register_period``; RocketMQ waits for the
  next period), so a name server that comes up late knows the broker within a second or so.
* Every REGISTER_BROKER carries the whole topic table (RocketMQ ``forceRegister``) with
  the current ``DataVersion``, built in parts between other requests and deflated in a
  thread (``register_request_async``): no registration stalls the event loop. The
  version moves (counter + 1, new timestamp) on every change
  of the table (``TopicConfigManager.on_change``): RocketMQ's name server rereads a broker's
  topics only when the version differs from the one it holds. A change wakes every task;
  changes made while a registration is in flight go out in the next one (coalesced).
* The connection to each name server stays open between registrations: RocketMQ's name
  server drops a broker whose channel closes; the next registration brings it back.
* ``stop`` cancels the tasks first (so no registration can follow the unregister), then
  sends UNREGISTER_BROKER to every name server at once, each bounded by
  ``register_timeout``; failures are logged (``broker.unregister_failed``), never raised.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any  # Any: JSON values of a status; structlog's logger

from kairosmq.client.credentials import SessionCredentials, rpc_hook_for
from kairosmq.client.errors import ClientError
from kairosmq.client.remoting import RemotingClient, split_address
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.registration import (
    REGISTER_PART_TOPICS,
    DataVersion,
    TopicConfigData,
    body_crc32,
    build_register_broker,
    build_unregister_broker,
    decode_register_response,
    register_body_parts,
    register_broker_request,
)

from ..clock import wall_ms

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from ..endpoints import Endpoints
    from ..supervise import ServiceState, Supervisor
    from ..tables.topics import TopicConfig, TopicConfigManager

RETRY_BASE = 0.5  # seconds: first retry after a failed registration (doubles, capped)


def _finish_body(parts: list[bytes], compressed: bool) -> tuple[bytes, int]:
    """The body from its parts, deflated when ``compressed``, and its ``bodyCrc32`` (in a
    thread: zlib releases the GIL on large buffers)."""
    body = b"".join(parts)
    if compressed:
        body = zlib.compress(body, 9)
    return body, body_crc32(body)


def parse_namesrv_addr(text: str) -> list[str]:
    """``"host:port;host:port"`` -> the addresses, in order, without duplicates.

    Raises ``ValueError`` naming the bad entry (a clear start-up error)."""
    out: list[str] = []
    for part in text.split(";"):
        addr = part.strip()
        if not addr:
            continue
        try:
            _, port = split_address(addr)
        except ValueError as err:
            raise ValueError(f"namesrv_addr entry {addr!r}: {err}") from None
        if not 0 < port < 65536:
            raise ValueError(f"namesrv_addr entry {addr!r}: port out of range")
        if addr not in out:
            out.append(addr)
    if not out:
        raise ValueError(f"namesrv_addr {text!r} names no name server (host:port;host:port)")
    return out


def namesrv_ssl_context(config: BrokerConfig) -> ssl.SSLContext | None:
    """The TLS context toward name servers (None without ``namesrv_tls``): their
    certificate is verified, host name included, against ``namesrv_tls_ca`` (a CA, or the
    name server's own certificate: partial chains are accepted) or the system CAs; the
    broker's ``tls_cert``/``tls_key``, when set, is its client certificate (for a name
    server started with ``--tls-ca``). ``OSError``/``ssl.SSLError`` if a file is unusable."""
    if not config.namesrv_tls:
        return None
    ca = config.namesrv_tls_ca
    ctx = ssl.create_default_context(
        ssl.Purpose.SERVER_AUTH, cafile=None if ca is None else str(ca)
    )
    if ca is not None:
        ctx.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    if config.tls_cert is not None:
        ctx.load_cert_chain(
            str(config.tls_cert), None if config.tls_key is None else str(config.tls_key)
        )
    return ctx


def namesrv_credentials(config: BrokerConfig) -> SessionCredentials | None:
    if config.namesrv_access_key is None or config.namesrv_secret_key is None:
        return None
    return SessionCredentials(config.namesrv_access_key, config.namesrv_secret_key)


@dataclass(slots=True)
class NameServerLink:
    """One name server: its connection and what the last registrations did."""

    address: str
    client: RemotingClient
    registered: bool = False  # the last REGISTER_BROKER succeeded
    registrations: int = 0  # successful ones since start
    last_registered_ms: int = 0
    failures: int = 0  # consecutive
    last_error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "registered": self.registered,
            "registrations": self.registrations,
            "lastRegisteredTs": self.last_registered_ms or None,
            "failures": self.failures,
            "lastError": self.last_error,
        }


class BrokerRegistration:
    """Keeps this broker registered with every name server of ``config.namesrv_addr``."""

    def __init__(
        self,
        *,
        config: BrokerConfig,
        endpoints: Endpoints,
        topics: TopicConfigManager,
        log: Any,
        clock_ms: Callable[[], int] = wall_ms,
    ) -> None:
        assert config.namesrv_addr is not None
        self.config = config
        self.endpoints = endpoints
        self.topics = topics
        self.log = log
        self.clock_ms = clock_ms
        self.data_version = DataVersion(clock_ms(), 0)
        self.broker_id = config.broker_id  # 0 once a slave is promoted (server/ha/)
        # a slave's master, as the name servers answered (haServerAddr, masterAddr)
        self.ha_master_address: str | None = None
        self.master_address: str | None = None
        hook = rpc_hook_for(namesrv_credentials(config))
        tls = namesrv_ssl_context(config)
        self.links = [
            NameServerLink(
                a, RemotingClient(a, backoff_base=0.1, backoff_max=2.0, rpc_hook=hook, ssl=tls)
            )
            for a in parse_namesrv_addr(config.namesrv_addr)
        ]
        self._wake: dict[str, asyncio.Event] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        topics.on_change.append(self.topic_changed)

    # ------------------------------------------------------------------ what is sent

    def promoted(self) -> None:
        """A promoted slave registers as the master (brokerId 0) at once."""
        self.broker_id = 0
        self.ha_master_address = self.master_address = None
        self.topic_changed("")

    def topic_changed(self, topic: str) -> None:  # noqa: ARG002 - every change is alike
        """A topic was created, updated or deleted: a new version, registered at once."""
        self.data_version = self.data_version.next(
            max(self.clock_ms(), self.data_version.timestamp)
        )
        for ev in self._wake.values():
            ev.set()

    @staticmethod
    def _topic_config(t: TopicConfig) -> TopicConfigData:
        return t.to_data()

    def register_request(self) -> RemotingCommand:
        """REGISTER_BROKER as ``BrokerOuterAPI.registerBrokerAll`` builds it: the whole
        topic table, no filter servers, the broker's brokerId, haServerAddr its HA listener
        (RocketMQ's form: advertised host, HA port; port + 1 without a listener).
        Built in one go (tests); the registration task uses ``register_request_async``."""
        ep, cfg = self.endpoints, self.config
        return build_register_broker(
            cluster_name=cfg.cluster_name,
            broker_name=cfg.broker_name,
            broker_addr=ep.address,
            ha_server_addr=ep.ha_address,
            topic_configs=[self._topic_config(t) for t in self.topics.topics.values()],
            data_version=self.data_version,
            broker_id=self.broker_id,
            compressed=cfg.compressed_register,
        )

    async def register_request_async(self) -> RemotingCommand:
        """``register_request``'s command, built without stalling the event loop: the
        topic list is copied in one step, converted and encoded in parts of
        ``REGISTER_PART_TOPICS`` between other requests, deflated and checksummed in a
        thread (100k topics: ~0.8 s of work that was one block on the loop)."""
        ep, cfg = self.endpoints, self.config
        version = self.data_version
        rows = list(self.topics.topics.values())
        configs: list[TopicConfigData] = []
        for i in range(0, len(rows), REGISTER_PART_TOPICS):
            configs += [self._topic_config(t) for t in rows[i : i + REGISTER_PART_TOPICS]]
            await asyncio.sleep(0)
        parts: list[bytes] = []
        for part in register_body_parts(configs, version, [], cfg.compressed_register):
            parts.append(part)
            await asyncio.sleep(0)
        body, crc = await asyncio.to_thread(_finish_body, parts, cfg.compressed_register)
        return register_broker_request(
            body,
            cluster_name=cfg.cluster_name,
            broker_name=cfg.broker_name,
            broker_addr=ep.address,
            ha_server_addr=ep.ha_address,
            broker_id=self.broker_id,
            compressed=cfg.compressed_register,
            crc32=crc,
        )

    # ------------------------------------------------------------------ lifecycle

    def start(self, supervisor: Supervisor) -> None:
        """One supervised task per name server; the first registration starts at once."""
        for link in self.links:
            self._wake[link.address] = asyncio.Event()
            self._tasks.append(
                supervisor.spawn(
                    f"register {link.address}",
                    # a lambda with a default-bound argument: mypy cannot infer its type
                    lambda st, lk=link: self._run(lk, st),  # type: ignore[misc]
                    reports_progress=True,
                )
            )

    async def _run(self, link: NameServerLink, st: ServiceState) -> None:
        wake = self._wake[link.address]
        while not self._stopping:
            wake.clear()
            ok = await self.register(link)
            st.ok()  # the loop itself is healthy; a name server's failure is its state
            if ok:
                wait = self.config.register_period
            else:
                wait = min(
                    self.config.register_period, RETRY_BASE * 2 ** min(link.failures - 1, 16)
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), wait)

    async def register(self, link: NameServerLink) -> bool:
        """One REGISTER_BROKER to ``link``'s name server; True when it answered SUCCESS."""
        version = self.data_version
        cmd = await self.register_request_async()
        started = time.monotonic()
        try:
            resp = await link.client.invoke(
                cmd.code, cmd.ext_fields, cmd.body, timeout=self.config.register_timeout
            )
            result = decode_register_response(resp)  # ValueError unless SUCCESS
        except (ClientError, ValueError, OSError) as err:
            link.registered = False
            link.failures += 1
            link.last_error = f"{type(err).__name__}: {err}"
            retry = min(self.config.register_period, RETRY_BASE * 2 ** min(link.failures - 1, 16))
            self.log.warning(
                "broker.register_failed",
                namesrv=link.address,
                error=link.last_error,
                failures=link.failures,
                retry_in_ms=round(retry * 1000, 3),
            )
            return False
        # a slave learns its master from the answer (RocketMQ's registerBrokerAll result:
        # haServerAddr -> the HA client, masterAddr -> SlaveSynchronize)
        if result.ha_server_addr:
            self.ha_master_address = result.ha_server_addr
        if result.master_addr:
            self.master_address = result.master_addr
        link.registered = True
        link.registrations += 1
        link.last_registered_ms = self.clock_ms()
        link.failures = 0
        link.last_error = None
        # every 30 s per name server (RocketMQ logs each "register broker ... OK" too)
        self.log.info(
            "broker.registered",
            namesrv=link.address,
            broker_addr=self.endpoints.address,
            topic_count=len(self.topics.topics),
            data_version=version.counter,
            duration_ms=round((time.monotonic() - started) * 1000, 3),
        )
        return True

    async def stop(self) -> None:
        """Cancel the tasks, then UNREGISTER_BROKER everywhere at once; close the links."""
        self._stopping = True
        started, tasks, self._tasks = bool(self._tasks), self._tasks, []
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=self.config.register_timeout)
        try:
            if started:  # a start that failed before serving registered nowhere
                await asyncio.gather(*(self._unregister(link) for link in self.links))
        finally:
            for link in self.links:
                link.client.close()

    async def _unregister(self, link: NameServerLink) -> None:
        cfg = self.config
        cmd = build_unregister_broker(
            cluster_name=cfg.cluster_name,
            broker_name=cfg.broker_name,
            broker_addr=self.endpoints.address,
            broker_id=self.broker_id,
        )
        try:
            resp = await link.client.invoke(
                cmd.code, cmd.ext_fields, cmd.body, timeout=min(cfg.register_timeout, 3.0)
            )
            if resp.code != ResponseCode.SUCCESS:
                raise ValueError(f"UNREGISTER_BROKER refused: code {resp.code}: {resp.remark}")
        except (ClientError, ValueError, OSError) as err:
            self.log.warning(
                "broker.unregister_failed",
                namesrv=link.address,
                error=f"{type(err).__name__}: {err}",
            )
            return
        link.registered = False
        self.log.info(
            "broker.unregistered", namesrv=link.address, broker_addr=self.endpoints.address
        )

    # ------------------------------------------------------------------ queries

    @property
    def registered_everywhere(self) -> bool:
        return all(link.registered for link in self.links)

    def status(self) -> dict[str, Any]:
        """What ``kairosmq admin status`` shows under ``registration``."""
        return {
            "dataVersion": self.data_version.to_dict(),
            "periodMs": round(self.config.register_period * 1000),
            "accessKey": self.config.namesrv_access_key,
            "tls": self.config.namesrv_tls,
            "nameServers": [link.as_dict() for link in self.links],
        }
