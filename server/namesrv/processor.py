"""The standalone name server's request processor: RocketMQ 4.9's namesrv
``DefaultRequestProcessor`` over ``routes.RouteInfoManager``.

Owns: the handlers of REGISTER_BROKER (103), UNREGISTER_BROKER (104), QUERY_DATA_VERSION
(322), GET_ROUTEINFO_BY_TOPIC (105), GET_BROKER_CLUSTER_INFO (106),
GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206), GET_TOPICS_BY_CLUSTER (224),
GET_SYSTEM_TOPIC_LIST_FROM_NS (304), DELETE_TOPIC_IN_NAMESRV (216),
WIPE_WRITE_PERM_OF_BROKER (205), ADD_WRITE_PERM_OF_BROKER (327), GET_NAMESRV_CONFIG (319) and
UPDATE_NAMESRV_CONFIG (318; body = properties text, the subset in ``settings.py``);
``namesrv_handlers`` builds the guarded table (the KV requests come from
``handlers/admin/kv.py``'s ``KvConfigProcessor``).

Invariants:
* Bounded: at most ``max_brokers`` live broker addresses (4096); a register body is bounded
  by the frame limit (and, compressed, by ``registration.MAX_INFLATED``).
* A bad request never changes a table: header fields are decoded and checked (names by
  ``naming.validate_registered_name``, ``brokerAddr`` ``host:port``, ``brokerId`` >= 0),
  ``bodyCrc32`` is verified when non-zero (RocketMQ: SYSTEM_ERROR "crc32 not match") and the
  body decoded (JSON, or RocketMQ's compressed form when ``compressed=true``) before the
  route tables are touched; every refusal is a ``Rejected`` (code + remark, logged by
  ``ingress.guarded``).
* Answers are RocketMQ's: REGISTER_BROKER answers haServerAddr/masterAddr (for slaves) and
  the ORDER_TOPIC_CONFIG KV table as body (none when the namespace is empty); an unknown
  topic answers TOPIC_NOT_EXIST (17); route bodies are standard JSON with quoted keys.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any  # Any: JSON values; structlog's logger; NamesrvStats

import orjson
from kairosmq.protocol.bodies import encode_kv_table, properties_to_string, string_to_properties
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.errors import shown
from kairosmq.protocol.headers import GetRouteInfoRequestHeader
from kairosmq.protocol.naming import validate_registered_name
from kairosmq.protocol.registration import (
    ORDER_TOPIC_CONFIG,
    AddWritePermOfBrokerResponseHeader,
    DataVersion,
    DeleteTopicFromNamesrvRequestHeader,
    GetTopicsByClusterRequestHeader,
    QueryDataVersionRequestHeader,
    QueryDataVersionResponseHeader,
    RegisterBrokerBody,
    RegisterBrokerRequestHeader,
    RegisterBrokerResponseHeader,
    UnRegisterBrokerRequestHeader,
    WipeWritePermOfBrokerRequestHeader,
    WipeWritePermOfBrokerResponseHeader,
    body_crc32,
    encode_topic_list,
)

from ..handlers.admin.kv import KvConfig, KvConfigProcessor
from ..remoting.ingress import Rejected, guarded
from .routes import RouteInfoManager

if TYPE_CHECKING:
    from ..remoting.transport import Connection, Handler

_ADDR = re.compile(r"[^\s:]{1,253}:(\d{1,5})|\[[0-9A-Fa-f:.]{2,45}\]:(\d{1,5})")


def check_name(value: str, field: str) -> None:
    bad = validate_registered_name(value, field)
    if bad is not None:
        raise Rejected(ResponseCode.SYSTEM_ERROR, bad)


def check_addr(value: str, field: str) -> None:
    m = _ADDR.fullmatch(value)
    port = int(m.group(1) or m.group(2)) if m else 0
    if not 0 < port < 65536:
        raise Rejected(
            ResponseCode.SYSTEM_ERROR,
            f"{field} {shown(value, 80)} is not host:port with a port in 1..65535",
        )


def check_broker_id(value: int) -> None:
    if value < 0:
        raise Rejected(ResponseCode.SYSTEM_ERROR, f"brokerId must be >= 0, got {value}")


class NamesrvRequestProcessor:
    """Route registration and lookup requests of the standalone name server."""

    def __init__(
        self,
        *,
        routes: RouteInfoManager,
        kv: KvConfig,
        log: Any,
        clock_ms: Callable[[], float],
        config: Callable[[], dict[str, str]],
        order_message_enable: bool = False,
        max_brokers: int = 4096,
        update_config: Callable[[dict[str, str]], dict[str, str]] | None = None,
    ) -> None:
        self.routes = routes
        self.max_brokers = max_brokers
        self.kv = kv
        self.log = log
        self.clock_ms = clock_ms
        self.config = config
        self.order_message_enable = order_message_enable
        self.update_config = update_config

    # ------------------------------------------------------------ broker registration

    def handle_register(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = RegisterBrokerRequestHeader.from_ext_fields(cmd.ext_fields)
        check_name(h.cluster_name, "clusterName")
        check_name(h.broker_name, "brokerName")
        check_addr(h.broker_addr, "brokerAddr")
        check_broker_id(h.broker_id)
        live = self.routes.broker_live_table
        if h.broker_addr not in live and len(live) >= self.max_brokers:
            raise Rejected(
                ResponseCode.SYSTEM_ERROR,
                f"the name server holds {len(live)} "
                f"broker addresses already (max_brokers {self.max_brokers})",
            )
        if h.body_crc32 != 0 and body_crc32(cmd.body) != h.body_crc32:
            raise Rejected(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        body = None
        if cmd.body:
            try:
                body = RegisterBrokerBody.decode(cmd.body, h.compressed)
            except ValueError as err:
                form = "compressed" if h.compressed else "JSON"
                raise Rejected(
                    ResponseCode.SYSTEM_ERROR,
                    f"Failed to decode RegisterBrokerBody ({form}): {err}",
                ) from err
            for topic in body.topic_config_wrapper.topic_config_table:
                check_name(topic, "topicName")
            for server in body.filter_server_list:
                check_addr(server, "filterServerList item")
        done = self.routes.register_broker(
            cluster_name=h.cluster_name,
            broker_addr=h.broker_addr,
            broker_name=h.broker_name,
            broker_id=h.broker_id,
            ha_server_addr=h.ha_server_addr,
            wrapper=body.topic_config_wrapper if body is not None else None,
            filter_servers=body.filter_server_list if body is not None else None,
            conn=conn,
            now_ms=self.clock_ms(),
        )
        if done.first or done.topics_changed:
            topics = len(body.topic_config_wrapper.topic_config_table) if body else 0
            self.log.info(
                "namesrv.broker_registered",
                cluster=h.cluster_name,
                broker_name=h.broker_name,
                broker_addr=h.broker_addr,
                broker_id=h.broker_id,
                topic_count=topics,
                first=done.first,
                peer=conn.peer,
            )
        res = done.result
        order = self.kv.table.get(ORDER_TOPIC_CONFIG)
        return cmd.response(
            ext_fields=RegisterBrokerResponseHeader(
                res.ha_server_addr, res.master_addr
            ).to_ext_fields(),
            body=encode_kv_table(order) if order else b"",
        )

    def handle_unregister(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = UnRegisterBrokerRequestHeader.from_ext_fields(cmd.ext_fields)
        if self.routes.unregister_broker(
            cluster_name=h.cluster_name,
            broker_addr=h.broker_addr,
            broker_name=h.broker_name,
            broker_id=h.broker_id,
        ):
            self.log.info(
                "namesrv.broker_unregistered",
                cluster=h.cluster_name,
                broker_name=h.broker_name,
                broker_addr=h.broker_addr,
                broker_id=h.broker_id,
                peer=conn.peer,
            )
        return cmd.response()

    def handle_query_data_version(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryDataVersionRequestHeader.from_ext_fields(cmd.ext_fields)
        try:
            version = DataVersion.from_json(cmd.body)
        except ValueError as err:
            raise Rejected(
                ResponseCode.SYSTEM_ERROR, f"QUERY_DATA_VERSION body is not a DataVersion: {err}"
            ) from err
        changed = self.routes.is_broker_topic_config_changed(h.broker_addr, version)
        if not changed:
            self.routes.touch(h.broker_addr, self.clock_ms())
        mine = self.routes.query_broker_topic_config(h.broker_addr)
        return cmd.response(
            ext_fields=QueryDataVersionResponseHeader(changed).to_ext_fields(),
            body=mine.to_json() if mine is not None else b"",
        )

    # ------------------------------------------------------------ lookups

    def handle_route(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetRouteInfoRequestHeader.from_ext_fields(cmd.ext_fields)
        found = self.routes.pickup_topic_route(h.topic)
        if found is None:
            return cmd.error(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {h.topic}",
            )
        queues, brokers, filters = found
        out: dict[str, Any] = {
            "brokerDatas": [b.to_dict() for b in brokers],
            "filterServerTable": filters,
            "queueDatas": [q.to_dict() for q in queues],
        }
        if self.order_message_enable:
            conf = self.kv.table.get(ORDER_TOPIC_CONFIG, {}).get(h.topic)
            if conf is not None:
                out["orderTopicConf"] = conf
        return cmd.response(body=orjson.dumps(out))

    def handle_cluster_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=self.routes.cluster_info().to_json())

    def handle_topic_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=encode_topic_list(self.routes.all_topics()))

    def handle_topics_by_cluster(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetTopicsByClusterRequestHeader.from_ext_fields(cmd.ext_fields)
        return cmd.response(body=encode_topic_list(self.routes.topics_by_cluster(h.cluster)))

    def handle_system_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topics, addr = self.routes.system_topics()
        return cmd.response(body=encode_topic_list(topics, addr))

    def handle_namesrv_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(body=properties_to_string(self.config()).encode())

    # ------------------------------------------------------------ admin writes

    def handle_update_namesrv_config(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        if self.update_config is None:
            raise Rejected(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                "this name server's settings cannot be changed at run time",
            )
        try:
            applied = self.update_config(string_to_properties(cmd.body.decode()))
        except UnicodeDecodeError as err:
            raise Rejected(ResponseCode.SYSTEM_ERROR, f"string2Properties error: {err}") from None
        except PermissionError as err:
            raise Rejected(ResponseCode.NO_PERMISSION, str(err)) from None
        except ValueError as err:
            raise Rejected(ResponseCode.SYSTEM_ERROR, f"Can not update config: {err}") from None
        if applied:
            self.log.info(
                "namesrv.config_updated",
                peer=conn.peer,
                keys=",".join(f"{k}={v}" for k, v in sorted(applied.items())),
            )
        return cmd.response()

    def handle_delete_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = DeleteTopicFromNamesrvRequestHeader.from_ext_fields(cmd.ext_fields)
        check_name(h.topic, "topic")
        cluster = h.cluster_name or None
        brokers = self.routes.delete_topic(h.topic, cluster)
        if brokers:
            self.log.info(
                "namesrv.topic_deleted", topic=h.topic, cluster=cluster or "", brokers=brokers
            )
        return cmd.response()

    def handle_write_perm(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = WipeWritePermOfBrokerRequestHeader.from_ext_fields(cmd.ext_fields)
        wipe = cmd.code == R.WIPE_WRITE_PERM_OF_BROKER
        count = self.routes.change_write_perm(h.broker_name, wipe)
        self.log.info(
            "namesrv.write_perm_changed",
            broker_name=h.broker_name,
            action="wipe" if wipe else "add",
            topic_count=count,
            peer=conn.peer,
        )
        header = (
            WipeWritePermOfBrokerResponseHeader(count)
            if wipe
            else AddWritePermOfBrokerResponseHeader(count)
        )
        return cmd.response(ext_fields=header.to_ext_fields())


def namesrv_handlers(
    proc: NamesrvRequestProcessor, kv: KvConfigProcessor, stats: Any, log: Any
) -> dict[int, Handler]:
    """The standalone name server's table, every handler wrapped by ``ingress.guarded``."""
    table: dict[int, Handler] = {
        R.REGISTER_BROKER: proc.handle_register,
        R.UNREGISTER_BROKER: proc.handle_unregister,
        R.QUERY_DATA_VERSION: proc.handle_query_data_version,
        R.GET_ROUTEINFO_BY_TOPIC: proc.handle_route,
        R.GET_BROKER_CLUSTER_INFO: proc.handle_cluster_info,
        R.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: proc.handle_topic_list,
        R.GET_TOPICS_BY_CLUSTER: proc.handle_topics_by_cluster,
        R.GET_SYSTEM_TOPIC_LIST_FROM_NS: proc.handle_system_topics,
        R.GET_NAMESRV_CONFIG: proc.handle_namesrv_config,
        R.UPDATE_NAMESRV_CONFIG: proc.handle_update_namesrv_config,
        R.DELETE_TOPIC_IN_NAMESRV: proc.handle_delete_topic,
        R.WIPE_WRITE_PERM_OF_BROKER: proc.handle_write_perm,
        R.ADD_WRITE_PERM_OF_BROKER: proc.handle_write_perm,
        R.PUT_KV_CONFIG: kv.handle_kv,
        R.GET_KV_CONFIG: kv.handle_kv,
        R.DELETE_KV_CONFIG: kv.handle_kv,
        R.GET_KVLIST_BY_NAMESPACE: kv.handle_kv_list,
    }
    return {code: guarded(h, stats, log) for code, h in table.items()}
