"""The embedded name server: GET_ROUTEINFO_BY_TOPIC (105), GET_BROKER_CLUSTER_INFO (106),
GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206).

Owns: route data for this single master broker (brokerId 0), in standard JSON with
quoted map keys (every stock client accepts it).

Invariants: an unknown topic answers TOPIC_NOT_EXIST (17) so producers fall back to the
``TBW102`` route and the broker auto-creates on first send; ``%RETRY%<group>`` exists
as soon as a clustering consumer of the group sent a heartbeat, so it is routable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
from kairosmq.protocol.bodies import BrokerData, QueueData, TopicRouteData
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import GetRouteInfoRequestHeader
from kairosmq.protocol.naming import is_retry_topic

from .. import ingress

if TYPE_CHECKING:
    from ..broker import Broker
    from ..topics import TopicConfig
    from ..transport import Connection


def _broker_data(broker: Broker) -> BrokerData:
    return BrokerData(broker.config.broker_name, {0: broker.address}, broker.config.cluster_name)


def handle_route(broker: Broker, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    h = GetRouteInfoRequestHeader.from_ext_fields(cmd.ext_fields)
    cfg = ingress.check_known_topic(broker, h.topic)
    if cfg is None and is_retry_topic(h.topic):
        # The C++ client asks for its retry route before its first heartbeat (which is
        # what creates the topic in RocketMQ); answering 17 would stall its retries until
        # the next 30 s route poll, so the route lookup creates it too (the name was
        # checked above: %RETRY% and a valid group).
        cfg, _ = broker.topics.ensure(h.topic, broker.config.retry_queue_nums)
    if cfg is None:
        return cmd.error(ResponseCode.TOPIC_NOT_EXIST,
                         f"no route for topic {h.topic}: it does not exist yet")
    return cmd.response(body=_route(broker, cfg))


def _route(broker: Broker, cfg: TopicConfig) -> bytes:
    route = TopicRouteData(
        queue_datas=[QueueData(broker.config.broker_name, cfg.read_queue_nums,
                               cfg.write_queue_nums, cfg.perm, cfg.topic_sys_flag)],
        broker_datas=[_broker_data(broker)],
    )
    return route.to_json()


def handle_cluster_info(broker: Broker, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    name = broker.config.broker_name
    body = {
        "brokerAddrTable": {name: _broker_data(broker).to_dict()},
        "clusterAddrTable": {broker.config.cluster_name: [name]},
    }
    return cmd.response(body=orjson.dumps(body))


def handle_topic_list(broker: Broker, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
    return cmd.response(body=orjson.dumps({"topicList": sorted(broker.topics.topics)}))
