"""Broker configuration: one frozen dataclass with RocketMQ's names and defaults.

Owns: ``BrokerConfig`` (``delay_levels`` is parsed by ``delay/levels.py``'s
``parse_delay_levels``). Every knob has an embedded default so ``kairosmq broker`` runs with
no config file.

Invariants: ``delay_levels_ms`` is derived from ``delay_levels`` at construction and a
bad string raises ``ValueError`` naming the bad token (a clear start-up error). Its fields
are slots (the native twins read them by offset): nothing but a field is ever set on it
(``object.__setattr__`` only in ``__post_init__`` and ``tables/settings.py``'s live update).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from .ha.role import BrokerRole, parse_host_port
from .schedule.delay.levels import parse_delay_levels

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"


class FlushMode(StrEnum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    SYNC_FLUSH = "SYNC_FLUSH"


def request_policy_problem(
    binding: str, window_s: float, admin_require_tls: bool, tls_mode: str
) -> str | None:
    """What is wrong with an ACL request policy (a broker's or a name server's), or None."""
    if binding not in ("optional", "admin", "all"):
        return f"acl_request_binding {binding!r} must be optional, admin or all"
    if not 1.0 <= window_s <= 86400.0:
        return f"acl_request_window {window_s} must be between 1 and 86400 seconds"
    if admin_require_tls and tls_mode == "disabled":
        return (
            "acl_admin_require_tls needs tls_mode permissive or enforcing "
            "(else no admin request could ever be taken)"
        )
    return None


@dataclass(frozen=True, slots=True)
class BrokerConfig:
    data_dir: Path = Path("./data")
    host: str = "127.0.0.1"
    port: int = 10911
    namesrv_port: int = 9876
    # Listen on port-2 as RocketMQ's "VIP channel" (Java clients 4.0-4.5 use it).
    vip_channel: bool = True
    advertised_host: str | None = None
    broker_name: str = "broker-a"
    cluster_name: str = "DefaultCluster"
    # External name servers (RocketMQ namesrvAddr, "host:port;host:port"): the broker
    # registers with them (server/cluster/registration.py) and embeds no name server. None: the
    # embedded name server on namesrv_port (one process, the default).
    namesrv_addr: str | None = None
    broker_id: int = 0  # RocketMQ brokerId: 0 = master, >= 1 = slave
    # replication (server/ha/, docs/replication.md): RocketMQ brokerRole, haListenPort
    # (None: port + 1, RocketMQ's default 10912), haMasterAddress (a slave; None: learnt
    # from the name server's REGISTER_BROKER answer), haSendHeartbeatInterval,
    # haHousekeepingInterval, haTransferBatchSize, haSlaveFallbehindMax; the slave's
    # SlaveSynchronize period (RocketMQ: 10 s)
    broker_role: str = "ASYNC_MASTER"
    ha_listen_port: int | None = None
    ha_master_address: str | None = None
    ha_send_heartbeat_interval: float = 5.0
    ha_housekeeping_interval: float = 20.0
    ha_transfer_batch_size: int = 32 * 1024
    ha_slave_fallbehind_max: int = 256 * 1024 * 1024
    # RocketMQ slaveReadEnable: pull answers suggest the group's whichBrokerWhenConsumeSlowly
    # (a slave) when the pull is further behind the log's end than
    # accessMessageInMemoryMaxRatio % of the physical memory, else the group's brokerId;
    # off: always 0, the master
    slave_read_enable: bool = False
    access_message_in_memory_max_ratio: int = 40
    slave_sync_interval: float = 10.0
    # A slave's account of its master's plain_acl.yml (an admin): signs SlaveSynchronize's
    # table reads and the rejoin check's status read (RocketMQ's AclClientRPCHook); None:
    # the namesrv account below when given, else unsigned (a master with --acl refuses)
    ha_access_key: str | None = None
    ha_secret_key: str | None = field(default=None, repr=False)
    register_period: float = 30.0  # RocketMQ registerNameServerPeriod (seconds)
    register_timeout: float = 6.0  # RocketMQ registerBrokerTimeoutMills (seconds)
    compressed_register: bool = False  # RocketMQ compressedRegister (deflated body)
    # How the broker reaches name servers that run ACL/TLS (docs/cluster.md): an account
    # of their plain_acl.yml that signs REGISTER_BROKER/UNREGISTER_BROKER (an admin; the
    # access/secret key pair of RocketMQ's AclClientRPCHook), and TLS, verified against
    # namesrv_tls_ca (a CA or the name server's own certificate; None: the system CAs).
    # The broker's own tls_cert/tls_key are its client certificate there.
    namesrv_access_key: str | None = None
    namesrv_secret_key: str | None = field(default=None, repr=False)
    namesrv_tls: bool = False
    namesrv_tls_ca: Path | None = None
    # store
    commitlog_segment_size: int = 1024 * 1024 * 1024
    consumequeue_units_per_file: int = 300_000
    flush_mode: FlushMode = FlushMode.ASYNC_FLUSH
    flush_interval: float = 0.5
    sync_flush_timeout: float = 5.0
    checkpoint_interval: float = 5.0
    file_reserved_hours: float = 72.0
    retention_check_interval: float = 60.0
    # messages and topics
    max_message_size: int = 4 * 1024 * 1024
    auto_create_topic: bool = True
    default_queue_nums: int = 4
    max_frame_length: int = 16 * 1024 * 1024
    # delay / retry
    delay_levels: str = DEFAULT_DELAY_LEVELS
    max_reconsume_times: int = 16
    # timer messages (RocketMQ 5's timerMaxDelaySec; RocketMQ: 3 days, kairosmq: 40 days)
    timer_max_delay_sec: int = 40 * 86_400
    # transactional messages (RocketMQ transactionTimeOut 6 s, transactionCheckInterval
    # 60 s, transactionCheckMax 15): first check-back after the timeout, then every interval
    transaction_timeout: float = 6.0
    transaction_check_interval: float = 60.0
    transaction_check_max: int = 15
    retry_queue_nums: int = 1
    # RocketMQ autoCreateSubscriptionGroup: a heartbeat or pull of an unknown consumer group
    # creates its subscription group (server/tables/subscriptions.py); off: such pulls are refused
    auto_create_subscription_group: bool = True
    schedule_batch: int = 256
    # pull
    long_polling: bool = True
    max_pull_hold_ms: int = 20_000
    pull_max_bytes: int = 4 * 1024 * 1024
    # RocketMQ enablePropertyFilter (SQL92 subscriptions); on here, off in RocketMQ 4.9:
    # why in server/property_filter.py
    enable_property_filter: bool = True
    # request-reply and message trace (server/handlers/reply.py, docs/request-reply.md):
    # store replies too (RocketMQ storeReplyMessageEnable, default true); RocketMQ's
    # traceTopicEnable (default false there) creates RMQ_SYS_TRACE_TOPIC and accepts sends
    # to it. On here: a client with enableMsgTrace otherwise loses its traces silently
    # (a stock RocketMQ broker lets them auto-create the topic instead).
    store_reply_message_enable: bool = True
    trace_topic_enable: bool = True
    # clients
    client_expire_seconds: float = 120.0
    lock_expire_seconds: float = 60.0
    # limits (docs/reliability.md lists each with its reason)
    # None: what the open-file limit leaves after the rest (server/fdbudget.py), as RocketMQ
    max_connections: int | None = None
    idle_timeout: float = 120.0  # RocketMQ serverChannelMaxIdleTimeSeconds
    partial_frame_timeout: float = 30.0
    # bytes of unfinished frames held across all connections (server/remoting/transport.py)
    partial_frame_budget: int = 256 * 1024 * 1024
    # RocketMQ: none below the 16 MiB frame; a stock Java client's send with 32,767 bytes
    # of properties is up to ~197 KB of JSON header (fastjson escapes control characters)
    max_header_bytes: int = 1024 * 1024
    max_held_pulls_per_connection: int = 16384
    max_held_pulls: int = 65536
    # None: no count limit, as RocketMQ (a heartbeat is bounded by its bytes, the frame;
    # a big one is registered over several loop turns: handlers/client.py)
    max_groups_per_heartbeat: int | None = None
    max_subscriptions_per_heartbeat: int | None = None
    max_clients: int = 262144  # ~400 bytes each: ~100 MB at the limit (RocketMQ: none)
    # consume-queue files kept mapped at once (each holds a file descriptor; the least
    # recently used is closed first: store/mapped.py). No RocketMQ equivalent (RocketMQ
    # maps every file); lowered at start if the open-file limit cannot hold it with
    # max_connections (server/fdbudget.py)
    max_open_queue_files: int = 1024
    # table sizes (RocketMQ has none): topics (an Apache 4.9.8 broker cannot
    # register more than ~129k with a name server: one 16 MiB frame), subscription groups
    # (each has a %RETRY% topic in RocketMQ), stored consumer offsets ((group, topic,
    # queue) entries)
    max_topics: int = 150_000
    max_subscription_groups: int = 150_000
    max_consumer_offsets: int = 1_000_000
    # disk: refuse writes above this fraction of the data disk used
    # (RocketMQ diskSpaceWarningLevelRatio); pulls continue
    disk_max_used_ratio: float = 0.90
    disk_check_interval: float = 1.0
    # metrics endpoint (None: off; 0: any free port). It has no authentication (the ACL
    # covers the remoting ports only), so it binds loopback unless asked otherwise
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    # supervised background services: restart backoff base, doubling up to the max
    service_retry_base: float = 0.1
    service_retry_max: float = 30.0
    # logging
    log_dir: Path | None = None
    log_messages: bool = True
    # security (docs/security.md): plain ACL file (RocketMQ plain_acl.yml; None: off),
    # polled for changes every acl_reload_interval seconds; TLS on every port
    acl_file: Path | None = None
    acl_reload_interval: float = 1.0
    # kairosmq's checks beyond RocketMQ's signature (server/security/access.py RequestPolicy): which
    # signed requests must carry the request binding (optional | admin | all), how far a
    # binding's time may be from the broker's clock (seconds), admin accounts over TLS only
    acl_request_binding: str = "optional"
    acl_request_window: float = 300.0
    acl_admin_require_tls: bool = False
    tls_mode: str = "disabled"  # disabled | permissive | enforcing (server/security/tls.py)
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_ca: Path | None = None  # client certificates must be signed by this CA
    delay_levels_ms: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_dir", Path(self.data_dir))
        if self.log_dir is not None:
            object.__setattr__(self, "log_dir", Path(self.log_dir))
        object.__setattr__(self, "flush_mode", FlushMode(self.flush_mode))
        for name in ("acl_file", "tls_cert", "tls_key", "tls_ca", "namesrv_tls_ca"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, Path(getattr(self, name)))
        if self.tls_mode not in ("disabled", "permissive", "enforcing"):
            raise ValueError(
                f"tls_mode {self.tls_mode!r} must be disabled, permissive or enforcing"
            )
        if self.tls_mode != "disabled" and self.tls_cert is None:
            raise ValueError(f"tls_mode {self.tls_mode} needs tls_cert (and tls_key)")
        if (
            problem := request_policy_problem(
                self.acl_request_binding,
                self.acl_request_window,
                self.acl_admin_require_tls,
                self.tls_mode,
            )
        ) is not None:
            raise ValueError(problem)
        object.__setattr__(self, "delay_levels_ms", parse_delay_levels(self.delay_levels))
        if self.commitlog_segment_size < 4096:
            raise ValueError("commitlog_segment_size must be at least 4096 bytes")
        if self.max_message_size + 4096 > self.commitlog_segment_size:
            raise ValueError("max_message_size must fit in one commit-log segment")
        if self.namesrv_addr is not None:
            from .cluster.registration import parse_namesrv_addr  # the one parser of the list

            parse_namesrv_addr(self.namesrv_addr)
        if (self.namesrv_access_key is None) != (self.namesrv_secret_key is None):
            raise ValueError(
                "namesrv_access_key and namesrv_secret_key go together: give both, or neither"
            )
        if self.namesrv_access_key == "" or self.namesrv_secret_key == "":
            raise ValueError("namesrv_access_key and namesrv_secret_key must not be empty")
        if (self.ha_access_key is None) != (self.ha_secret_key is None):
            raise ValueError("ha_access_key and ha_secret_key go together: give both, or neither")
        if self.ha_access_key == "" or self.ha_secret_key == "":
            raise ValueError("ha_access_key and ha_secret_key must not be empty")
        uses_namesrv = (
            self.namesrv_access_key is not None
            or self.namesrv_tls
            or self.namesrv_tls_ca is not None
        )
        if uses_namesrv and self.namesrv_addr is None:
            raise ValueError(
                "namesrv credentials and TLS are for external name servers: "
                "they need namesrv_addr (--namesrv)"
            )
        if self.namesrv_tls_ca is not None and not self.namesrv_tls:
            raise ValueError("namesrv_tls_ca needs namesrv_tls")
        try:
            role = BrokerRole(self.broker_role)
        except ValueError:
            raise ValueError(
                f"broker_role {self.broker_role!r} must be ASYNC_MASTER, SYNC_MASTER or SLAVE"
            ) from None
        object.__setattr__(self, "broker_role", role)
        if role.is_master and self.broker_id != 0:
            raise ValueError(f"broker_id must be 0 for a master ({role}), got {self.broker_id}")
        if not role.is_master and self.broker_id < 1:
            raise ValueError(f"broker_id must be >= 1 for a SLAVE, got {self.broker_id}")
        if self.ha_master_address is not None:
            if role.is_master:
                raise ValueError("ha_master_address is a SLAVE's option (its master's HA port)")
            parse_host_port(self.ha_master_address, "ha_master_address")
        if role is BrokerRole.SLAVE and self.ha_master_address is None and not self.namesrv_addr:
            raise ValueError(
                "a SLAVE needs ha_master_address (--ha-master-address) or name servers "
                "(--namesrv) to learn its master's HA address from"
            )
        if self.ha_listen_port is not None and not 0 <= self.ha_listen_port < 65536:
            raise ValueError(f"ha_listen_port {self.ha_listen_port} must be 0..65535")
        if self.commitlog_segment_size > (1 << 31) - 1:
            raise ValueError(
                "commitlog_segment_size must fit RocketMQ's int mappedFileSizeCommitLog (< 2 GiB)"
            )
        if self.slave_sync_interval <= 0:
            raise ValueError("slave_sync_interval must be positive")
        if not 1024 <= self.ha_transfer_batch_size <= 4 * 1024 * 1024 - 12:
            raise ValueError("ha_transfer_batch_size must be 1 KiB .. 4 MiB - 12")
        if self.register_period <= 0 or self.register_timeout <= 0:
            raise ValueError("register_period and register_timeout must be positive")

    @property
    def max_delay_level(self) -> int:
        return len(self.delay_levels_ms)
