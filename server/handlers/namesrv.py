"""The embedded name server: GET_ROUTEINFO_BY_TOPIC (105), GET_BROKER_CLUSTER_INFO (106),
GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206), GET_NAMESRV_CONFIG (319) and
DELETE_TOPIC_IN_NAMESRV (216, second half of ``mqadmin deleteTopic``).

Owns: ``DefaultRequestProcessor`` (RocketMQ's name-server processor; services: the topic
table, the endpoints and config values): route data for this single master broker
(brokerId 0), in standard JSON with quoted map keys (every stock client accepts it), and
the name server's settings under NamesrvConfig/NettyServerConfig names.

Invariants: a route lookup never creates a topic (RocketMQ's name server only reads its
route table). An unknown topic answers TOPIC_NOT_EXIST (17), so producers fall back to the
``TBW102`` route and the broker auto-creates on first send; ``%RETRY%<group>`` exists as
soon as a clustering consumer of the group sent a heartbeat (stock clients ask again after
it, and at every 30 s route poll), so it is routable then. The routes are the broker's own
topic table, so a topic deleted in the broker (DELETE_TOPIC_IN_BROKER, 215) has no route any
more; DELETE_TOPIC_IN_NAMESRV therefore answers SUCCESS when the broker no longer has the
topic and SYSTEM_ERROR, naming the broker request to send, while it still has it (the name
server cannot drop a route the broker keeps).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import orjson
from kairosmq.protocol.bodies import (
    BrokerData,
    QueueData,
    TopicRouteData,
    properties_to_string,
)
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import GetRouteInfoRequestHeader, TopicRequestHeader

from ..remoting import ingress
from ..tables.table_file import collect, encode_parts

if TYPE_CHECKING:
    from ..config import BrokerConfig
    from ..endpoints import Endpoints
    from ..remoting.transport import Connection
    from ..tables.topics import TopicConfig, TopicConfigManager


class DefaultRequestProcessor:
    """The name-server port's route, cluster, topic-list and config requests."""

    def __init__(
        self, *, topics: TopicConfigManager, endpoints: Endpoints, config: BrokerConfig
    ) -> None:
        self.topics = topics
        self.endpoints = endpoints
        self.config = config

    def _broker_data(self) -> BrokerData:
        cfg = self.config
        return BrokerData(cfg.broker_name, {0: self.endpoints.address}, cfg.cluster_name)

    def handle_route(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetRouteInfoRequestHeader.from_ext_fields(cmd.ext_fields)
        cfg = ingress.check_known_topic(self.topics, h.topic)
        if cfg is None:
            return cmd.error(
                ResponseCode.TOPIC_NOT_EXIST, f"no route for topic {h.topic}: it does not exist yet"
            )
        return cmd.response(body=self._route(cfg))

    def _route(self, cfg: TopicConfig) -> bytes:
        route = TopicRouteData(
            queue_datas=[
                QueueData(
                    self.config.broker_name,
                    cfg.read_queue_nums,
                    cfg.write_queue_nums,
                    cfg.perm,
                    cfg.topic_sys_flag,
                )
            ],
            broker_datas=[self._broker_data()],
        )
        return route.to_json()

    def handle_cluster_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        name = self.config.broker_name
        body = {
            "brokerAddrTable": {name: self._broker_data().to_dict()},
            "clusterAddrTable": {self.config.cluster_name: [name]},
        }
        return cmd.response(body=orjson.dumps(body))

    async def handle_topic_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        # RocketMQ's TopicList is a set; encoded in parts between other requests
        parts = encode_parts(b'{"topicList":[', list(self.topics.topics), b"]}", mapping=False)
        return cmd.response(body=await collect(parts))

    def handle_namesrv_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """The embedded name server's settings under NamesrvConfig/NettyServerConfig names."""
        props = {
            "listenPort": str(self.endpoints.namesrv_port),
            "clusterTest": "false",
            "orderMessageEnable": "false",
            "productEnvName": "center",
            "rocketmqHome": str(Path(self.config.data_dir).resolve()),
            "serverChannelMaxIdleTimeSeconds": f"{self.config.idle_timeout:g}",
        }
        return cmd.response(body=properties_to_string(props).encode())

    def handle_delete_topic_in_namesrv(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        h = TopicRequestHeader.from_ext_fields(cmd.ext_fields)
        ingress.check_topic(h.topic)
        if self.topics.get(h.topic) is not None:
            return cmd.error(
                ResponseCode.SYSTEM_ERROR,
                f"topic {h.topic} still exists in broker {self.config.broker_name}"
                ": delete it there first (DELETE_TOPIC_IN_BROKER); the embedded "
                "name server routes the broker's topics",
            )
        return cmd.response()
