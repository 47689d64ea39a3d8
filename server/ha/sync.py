"""SlaveSynchronize: what a slave copies from its master that is not in the commit log.

Owns: every ``slave_sync_interval`` (RocketMQ: 10 s), from the master's broker port:
the topic table (GET_ALL_TOPIC_CONFIG 21), consumer offsets (GET_ALL_CONSUMER_OFFSET
43), the scheduler's progress (GET_ALL_DELAY_OFFSET 45) and subscription groups
(GET_ALL_SUBSCRIPTIONGROUP_CONFIG 201), as RocketMQ 4.9.8's SlaveSynchronize does.
The master's broker address is the name servers' masterAddr, else the
``--ha-master-address`` host with the port below its HA port (RocketMQ's default pair:
10911 and 10912).

Invariants:
* Topics and subscription groups become the master's tables (clear, putAll); consumer
  offsets are merged (putAll: the master's entries win).
* The delay offsets are kept for ``status`` only: a kairosmq slave derives the
  scheduler's progress from the replicated log (the truth), so the master's numbers
  are shown next to its own, never written over them.
* A failed request is logged (``ha.sync_failed``) and retried next round; nothing the
  master answers can stop the slave (a bad row is skipped). A master with ``--acl``
  that refuses the slave's account (none, unknown, wrong secret, not an admin) is logged
  as ``ha.sync_denied`` (error, naming the account and what to give) and changes nothing:
  the slave keeps the tables it has and its log keeps replicating (the HA port carries no
  ACL, as in RocketMQ).
* Every request to the master is signed with ``master_credentials`` (``--ha-access-key``,
  else the ``--namesrv-access-key`` account; RocketMQ's AclClientRPCHook), the rejoin
  check's too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import (
    TYPE_CHECKING,
    Any,
)  # Any: JSON tables read from the master, checked field by field; structlog's logger

from kairosmq.client.credentials import SessionCredentials, rpc_hook_for
from kairosmq.client.errors import ClientError
from kairosmq.client.remoting import RemotingClient
from kairosmq.protocol.bodies import java_json_object
from kairosmq.protocol.codes import RequestCode, ResponseCode

from ..cluster.registration import namesrv_credentials
from ..security.access import ACL_EXCEPTION
from ..tables.subscriptions import SubscriptionGroupConfig
from ..tables.topics import TopicConfig
from .role import parse_host_port

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from ..supervise import ServiceState
    from ..tables.offsets import ConsumerOffsetManager
    from ..tables.subscriptions import SubscriptionGroupManager
    from ..tables.topics import TopicConfigManager

REQUEST_TIMEOUT = 10.0


class SyncRefused(ValueError):
    """The master's ACL refused a request (its remark is RocketMQ's AclException)."""


def master_credentials(config: BrokerConfig) -> SessionCredentials | None:
    """The account a slave signs its master requests with (None: unsigned)."""
    if config.ha_access_key is not None and config.ha_secret_key is not None:
        return SessionCredentials(config.ha_access_key, config.ha_secret_key)
    return namesrv_credentials(config)


def master_client(config: BrokerConfig, address: str) -> RemotingClient:
    """A connection to the master's broker port whose requests are signed."""
    return RemotingClient(
        address,
        backoff_base=0.1,
        backoff_max=2.0,
        rpc_hook=rpc_hook_for(master_credentials(config)),
    )


def refusal(code: int, remark: str | None) -> ValueError:
    """A non-SUCCESS answer as an error: ``SyncRefused`` when the master's ACL said no."""
    text = f"code {code}: {remark}"
    return SyncRefused(text) if (remark or "").startswith(ACL_EXCEPTION) else ValueError(text)


def master_broker_address(ha_master_address: str) -> str:
    """The broker port by RocketMQ's default pairing (haListenPort = listenPort + 1)."""
    host, port = parse_host_port(ha_master_address, "ha_master_address")
    return f"{host}:{port - 1}"


def _pick(row: dict[str, Any], camel: str, snake: str, default: Any) -> Any:
    return row.get(camel, row.get(snake, default))


def topic_configs(body: bytes) -> list[TopicConfig]:
    """GET_ALL_TOPIC_CONFIG's table, as Apache (camelCase) or kairosmq writes it."""
    table = java_json_object(body).get("topicConfigTable")
    if not isinstance(table, dict):
        raise ValueError("topicConfigTable is missing or not an object")
    out = []
    for name, row in table.items():
        if not isinstance(row, dict):
            continue
        try:
            out.append(
                TopicConfig(
                    str(_pick(row, "topicName", "topic_name", name)),
                    int(_pick(row, "readQueueNums", "read_queue_nums", 4)),
                    int(_pick(row, "writeQueueNums", "write_queue_nums", 4)),
                    int(row.get("perm", 6)),
                    int(_pick(row, "topicSysFlag", "topic_sys_flag", 0)),
                    bool(row.get("order", False)),
                )
            )
        except (TypeError, ValueError):
            continue
    return out


class SlaveSynchronize:
    def __init__(
        self,
        *,
        config: BrokerConfig,
        topics: TopicConfigManager,
        offsets: ConsumerOffsetManager,
        subscriptions: SubscriptionGroupManager,
        master_address: Callable[[], str | None],
        log: Any,
    ) -> None:
        self.config = config
        self.topics = topics
        self.offsets = offsets
        self.subscriptions = subscriptions
        self.master_address = master_address
        self.log = log
        self.client: RemotingClient | None = None
        self.rounds = 0
        self.master_delay_offsets: dict[str, int] = {}

    def status(self) -> dict[str, Any]:
        creds = master_credentials(self.config)
        return {
            "masterBrokerAddress": self.master_address(),
            "accessKey": None if creds is None else creds.access_key,
            "syncRounds": self.rounds,
            "masterDelayOffsets": self.master_delay_offsets,
        }

    async def run(self, st: ServiceState) -> None:
        try:
            while True:
                addr = self.master_address()
                if addr is not None:
                    await self.sync_all(addr)
                st.ok()
                await asyncio.sleep(self.config.slave_sync_interval)
        finally:
            if self.client is not None:
                self.client.close()

    async def sync_all(self, addr: str) -> None:
        if self.client is None or self.client.address != addr:
            if self.client is not None:
                self.client.close()
            self.client = master_client(self.config, addr)
        for what, code, apply in (
            ("topics", RequestCode.GET_ALL_TOPIC_CONFIG, self._topics),
            ("consumer_offsets", RequestCode.GET_ALL_CONSUMER_OFFSET, self._offsets),
            ("delay_offsets", RequestCode.GET_ALL_DELAY_OFFSET, self._delay_offsets),
            ("subscription_groups", RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, self._groups),
        ):
            try:
                resp = await self.client.invoke(code, {}, b"", timeout=REQUEST_TIMEOUT)
                if resp.code != ResponseCode.SUCCESS:
                    raise refusal(resp.code, resp.remark)
                changed = apply(resp.body)
            except SyncRefused as err:
                creds = master_credentials(self.config)
                self.log.error(
                    "ha.sync_denied",
                    master=addr,
                    table=what,
                    access_key="" if creds is None else creds.access_key,
                    error=str(err),
                    fix="give the slave an admin account of the master's ACL file: "
                    "--ha-access-key KEY with its secret in $KAIROS_HA_SECRET_KEY",
                )
                continue
            except (ClientError, OSError, ValueError) as err:
                self.log.warning(
                    "ha.sync_failed", master=addr, table=what, error=f"{type(err).__name__}: {err}"
                )
                continue
            if changed:
                self.log.info("ha.synced", master=addr, table=what, count=changed)
        self.rounds += 1

    def _topics(self, body: bytes) -> int:
        return self.topics.replace_all(topic_configs(body))

    def _offsets(self, body: bytes) -> int:
        table = java_json_object(body).get("offsetTable")
        if not isinstance(table, dict):
            raise ValueError("offsetTable is missing or not an object")
        changed = 0
        for key, queues in table.items():
            topic, sep, group = str(key).partition("@")
            if not sep or not isinstance(queues, dict):
                continue
            for qid, offset in queues.items():
                try:
                    q = int(qid)
                except (TypeError, ValueError):
                    continue
                if not isinstance(offset, int) or isinstance(offset, bool):
                    continue
                if self.offsets.query(group, topic, q) != offset and self.offsets.commit(
                    group, topic, q, offset
                ):
                    changed += 1
        return changed

    def _delay_offsets(self, body: bytes) -> int:
        table = java_json_object(body).get("offsetTable")
        if not isinstance(table, dict):
            raise ValueError("offsetTable is missing or not an object")
        self.master_delay_offsets = {
            str(k): v for k, v in table.items() if isinstance(v, int) and not isinstance(v, bool)
        }
        return 0

    def _groups(self, body: bytes) -> int:
        table = java_json_object(body).get("subscriptionGroupTable")
        if not isinstance(table, dict):
            raise ValueError("subscriptionGroupTable is missing or not an object")
        configs = []
        for raw in table.values():
            try:
                configs.append(SubscriptionGroupConfig.from_json(raw, self.subscriptions.defaults))
            except ValueError:
                continue
        return self.subscriptions.replace_all(configs)
