"""Request handler tables: request code -> handler, one for the broker port and one for
the embedded name server port (RocketMQ's ``registerProcessor``).

A handler is ``(broker, connection, command) -> RemotingCommand | awaitable | None``.
"""

from __future__ import annotations

from kairosmq.protocol.codes import RequestCode as R

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
from .send import handle_send
from .send_back import handle_send_back

BROKER_HANDLERS: dict[int, Handler] = {
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
    # kairosmq admin (900-range, admin_ext.py)
    R.KAIROS_GET_CONSUMER_GROUPS: handle_consumer_groups,
    R.KAIROS_GET_CONSUMER_LAG: handle_consumer_lag,
    R.KAIROS_GET_SCHEDULE_BACKLOG: handle_schedule_backlog,
    R.KAIROS_RESEND_DLQ: handle_resend_dlq,
    R.KAIROS_GET_BROKER_STATUS: handle_broker_status,
}

NAMESRV_HANDLERS: dict[int, Handler] = {
    R.GET_ROUTEINFO_BY_TOPIC: handle_route,
    R.GET_BROKER_CLUSTER_INFO: handle_cluster_info,
    R.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: handle_topic_list,
}
