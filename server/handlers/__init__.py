"""Request handler tables: request code -> handler, one for the broker port and one for
the embedded name server port (RocketMQ's ``registerProcessor``).

A handler is ``(broker, connection, command) -> RemotingCommand | awaitable | None``.
Each decodes its header or body, calls its ``ingress`` check, then does the work; every
handler in the tables is wrapped by ``ingress.guarded``, which answers, counts and logs
(``request.rejected``) a refused or undecodable request.
"""

from __future__ import annotations

from kairosmq.protocol.codes import RequestCode as R

from ..ingress import guarded
from ..transport import Handler
from .admin import (
    handle_all_topic_config,
    handle_create_topic,
    handle_delete_topic,
    handle_view_message,
)
from .admin_ext import (
    handle_broker_status,
    handle_consumer_groups,
    handle_consumer_lag,
    handle_query_message,
    handle_resend_dlq,
    handle_schedule_backlog,
)
from .client import (
    handle_check_client_config,
    handle_consumer_list,
    handle_heartbeat,
    handle_lock,
    handle_unlock,
    handle_unregister,
)
from .namesrv import handle_cluster_info, handle_route, handle_topic_list
from .offsets import (
    handle_earliest_msg_storetime,
    handle_get_max_offset,
    handle_get_min_offset,
    handle_query_consumer_offset,
    handle_search_offset,
    handle_update_consumer_offset,
)
from .pull import handle_pull
from .rocketmq_admin import (
    handle_broker_config,
    handle_consume_by_who,
    handle_consume_stats,
    handle_consumer_connections,
    handle_namesrv_config,
    handle_producer_connections,
    handle_runtime_info,
    handle_topic_stats,
)
from .rocketmq_admin_ops import (
    handle_all_subscription_groups,
    handle_broker_consume_stats,
    handle_delete_topic_in_namesrv,
    handle_query_consume_queue,
    handle_reset_offset,
)
from .rocketmq_kv import handle_kv, handle_kv_list
from .send import handle_send
from .send_back import handle_send_back

_BROKER: dict[int, Handler] = {
    R.SEND_MESSAGE: handle_send,
    R.SEND_MESSAGE_V2: handle_send,
    R.SEND_BATCH_MESSAGE: handle_send,
    R.PULL_MESSAGE: handle_pull,
    R.CONSUMER_SEND_MSG_BACK: handle_send_back,
    R.QUERY_CONSUMER_OFFSET: handle_query_consumer_offset,
    R.UPDATE_CONSUMER_OFFSET: handle_update_consumer_offset,
    R.GET_MAX_OFFSET: handle_get_max_offset,
    R.GET_MIN_OFFSET: handle_get_min_offset,
    R.GET_EARLIEST_MSG_STORETIME: handle_earliest_msg_storetime,
    R.SEARCH_OFFSET_BY_TIMESTAMP: handle_search_offset,
    R.HEART_BEAT: handle_heartbeat,
    R.UNREGISTER_CLIENT: handle_unregister,
    R.GET_CONSUMER_LIST_BY_GROUP: handle_consumer_list,
    R.LOCK_BATCH_MQ: handle_lock,
    R.UNLOCK_BATCH_MQ: handle_unlock,
    R.CHECK_CLIENT_CONFIG: handle_check_client_config,
    R.UPDATE_AND_CREATE_TOPIC: handle_create_topic,
    R.DELETE_TOPIC_IN_BROKER: handle_delete_topic,
    R.GET_ALL_TOPIC_CONFIG: handle_all_topic_config,
    R.VIEW_MESSAGE_BY_ID: handle_view_message,
    R.QUERY_MESSAGE: handle_query_message,
    # RocketMQ's admin requests (mqadmin, dashboard: rocketmq_admin.py)
    R.GET_BROKER_RUNTIME_INFO: handle_runtime_info,
    R.GET_BROKER_CONFIG: handle_broker_config,
    R.GET_TOPIC_STATS_INFO: handle_topic_stats,
    R.GET_CONSUMER_CONNECTION_LIST: handle_consumer_connections,
    R.GET_PRODUCER_CONNECTION_LIST: handle_producer_connections,
    R.GET_CONSUME_STATS: handle_consume_stats,
    R.QUERY_TOPIC_CONSUME_BY_WHO: handle_consume_by_who,
    R.GET_BROKER_CONSUME_STATS: handle_broker_consume_stats,
    R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: handle_all_subscription_groups,
    R.QUERY_CONSUME_QUEUE: handle_query_consume_queue,
    R.INVOKE_BROKER_TO_RESET_OFFSET: handle_reset_offset,
    # kairosmq admin (900-range, admin_ext.py)
    R.KAIROS_GET_CONSUMER_GROUPS: handle_consumer_groups,
    R.KAIROS_GET_CONSUMER_LAG: handle_consumer_lag,
    R.KAIROS_GET_SCHEDULE_BACKLOG: handle_schedule_backlog,
    R.KAIROS_RESEND_DLQ: handle_resend_dlq,
    R.KAIROS_GET_BROKER_STATUS: handle_broker_status,
}

_NAMESRV: dict[int, Handler] = {
    R.GET_ROUTEINFO_BY_TOPIC: handle_route,
    R.GET_BROKER_CLUSTER_INFO: handle_cluster_info,
    R.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: handle_topic_list,
    R.GET_NAMESRV_CONFIG: handle_namesrv_config,
    R.DELETE_TOPIC_IN_NAMESRV: handle_delete_topic_in_namesrv,
    R.PUT_KV_CONFIG: handle_kv,
    R.GET_KV_CONFIG: handle_kv,
    R.DELETE_KV_CONFIG: handle_kv,
    R.GET_KVLIST_BY_NAMESPACE: handle_kv_list,
}

BROKER_HANDLERS: dict[int, Handler] = {code: guarded(h) for code, h in _BROKER.items()}
NAMESRV_HANDLERS: dict[int, Handler] = {code: guarded(h) for code, h in _NAMESRV.items()}
