"""Request handler tables: request code -> handler, one for the broker port and one for
the embedded name server port (RocketMQ's ``registerProcessor``).

Owns: ``broker_table`` and ``namesrv_table``, the one place that reads a ``Broker``'s
services. Each handler module defines processor classes named after RocketMQ's
(``SendMessageProcessor``, ``PullMessageProcessor``, ...), constructed here with only the
services they use (store reads, topic table, offsets, notifier, stats, the put path,
config values); a handler is a processor's bound ``handle_x(conn, cmd)`` returning a
``RemotingCommand``, ``None`` or an awaitable. Each decodes its header or body, calls its
``ingress`` check, then does the work.

Invariants: every handler in both tables is wrapped by ``ingress.guarded``, which answers,
counts and logs (``request.rejected``) a refused or undecodable request (on the native
core the send handlers' two wrappers are one C call, ``send.GuardedSend``: the same
rules). A request that changed the topic table (a send or send-back that auto-created
its topic, a heartbeat that created retry topics, UPDATE_AND_CREATE_TOPIC,
DELETE_TOPIC_IN_BROKER, a DLQ resend) is answered once ``topics.json`` holds the change
(``after_topic_write``; the write itself runs in the background, coalesced:
``server/tables/table_file.py``). A route lookup never changes the table.
"""

from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, Any  # Any: handler answers: command, None or an awaitable

from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand

from ..config import FlushMode
from ..remoting.ingress import guarded
from ..remoting.transport import Handler
from ..schedule.pending.actions import PendingActions
from ..schedule.pending.browse import PendingView
from . import send as send_module
from .admin.broker import AdminBrokerProcessor
from .admin.broker_config import BrokerConfigProcessor
from .admin.callbacks import ConsumerCallbackProcessor
from .admin.consume_stats import ConsumerAdminProcessor
from .admin.groups import SubscriptionGroupProcessor
from .admin.kairos import KairosAdminProcessor
from .admin.kv import KvConfigProcessor
from .admin.messages import QueryMessageProcessor
from .admin.pending import PendingMessageProcessor
from .admin.replication import SlaveSyncProcessor
from .admin.stats import BrokerStatsProcessor
from .admin.topics import TopicAdminProcessor
from .client import ClientManageProcessor
from .namesrv import DefaultRequestProcessor
from .offsets import ConsumerManageProcessor, QueueOffsetProcessor
from .pull import PullMessageProcessor
from .reply import ReplyMessageProcessor
from .send import SendMessageProcessor
from .send_back import ConsumerSendMsgBackProcessor
from .timers import RecallMessageProcessor, TimerStatusProcessor
from .transaction import (
    EndTransactionProcessor,
    TransactionAdminProcessor,
    TransactionStatusProcessor,
)

if TYPE_CHECKING:
    from ..broker import Broker
    from ..remoting.transport import Connection
    from ..tables.topics import TopicConfigManager

# the broker requests that may create or delete topics
TOPIC_CHANGING = frozenset(
    {
        R.SEND_MESSAGE,
        R.SEND_MESSAGE_V2,
        R.SEND_BATCH_MESSAGE,
        R.CONSUMER_SEND_MSG_BACK,
        R.HEART_BEAT,
        R.UPDATE_AND_CREATE_TOPIC,
        R.DELETE_TOPIC_IN_BROKER,
        R.KAIROS_RESEND_DLQ,
    }
)


def after_topic_write(topics: TopicConfigManager, handler: Handler) -> Handler:
    """``handler``, answered only once ``topics.json`` holds the topic-table change it
    made (unchanged table: answered as the handler answers)."""

    @functools.wraps(handler)
    def run(conn: Connection, cmd: RemotingCommand) -> Any:
        before = topics.version
        answer = handler(conn, cmd)
        if topics.version == before and not inspect.isawaitable(answer):
            return answer
        return _when_written(topics, cmd, answer, before)

    return run


async def _when_written(
    topics: TopicConfigManager, cmd: RemotingCommand, answer: Any, before: int
) -> Any:
    """``answer`` (awaited: a handler may change the table over several loop turns), once
    ``topics.json`` holds what changed since version ``before``."""
    if inspect.isawaitable(answer):
        answer = await answer
        if topics.version == before:
            return answer
    try:
        await topics.flushed()
    except OSError as err:  # logged by the writer (topic.persist_failed), retried there
        if isinstance(answer, RemotingCommand) and answer.code == ResponseCode.SUCCESS:
            return cmd.error(
                ResponseCode.SYSTEM_ERROR,
                f"the topic table could not be written ({type(err).__name__}: "
                f"{err}); the change is in memory and written again later",
            )
    return answer


def _guarded(
    b: Broker, table: dict[int, Handler], topic_changing: frozenset[int] = frozenset()
) -> dict[int, Handler]:
    return {
        code: guarded(
            after_topic_write(b.topics, h) if code in topic_changing else h, b.stats, b.log
        )
        for code, h in table.items()
    }


def broker_table(b: Broker) -> dict[int, Handler]:
    """The broker port's (and the VIP port's) handlers."""
    cfg, store, put = b.config, b.store, b.put_path.put
    send = SendMessageProcessor(
        topics=b.topics,
        config=cfg,
        stats=b.stats,
        log=b.log,
        put=put,
        offset_msg_id=b.put_path.offset_msg_id,
        wait_flushed=b.wait_flushed,
        clock_ms=store.clock_ms,
        ack_token=store.ack_token,
    )
    pull = PullMessageProcessor(
        reads=store,
        topics=b.topics,
        offsets=b.offsets,
        clients=b.clients,
        notifier=b.notifier,
        holds=b.pull_holds,
        stats=b.stats,
        config=cfg,
        log=b.log,
        msglog=b.msglog,
        running=lambda: b.running,
        subscriptions=b.subscriptions,
    )  # MQADMIN
    send_back = ConsumerSendMsgBackProcessor(
        reads=store,
        topics=b.topics,
        config=cfg,
        stats=b.stats,
        log=b.log,
        put=put,
        subscriptions=b.subscriptions,
    )  # MQADMIN
    consumer = ConsumerManageProcessor(
        reads=store, topics=b.topics, offsets=b.offsets, log=b.log, subscriptions=b.subscriptions
    )
    queues = QueueOffsetProcessor(reads=store, topics=b.topics)
    client = ClientManageProcessor(
        clients=b.clients,
        locks=b.locks,
        topics=b.topics,
        config=cfg,
        log=b.log,
        subscriptions=b.subscriptions,
    )  # MQADMIN
    topic_admin = TopicAdminProcessor(topics=b.topics, offsets=b.offsets, log=b.log)
    query = QueryMessageProcessor(reads=store, index=b.index)
    admin = AdminBrokerProcessor(
        reads=store,
        guard=store.guard,
        topics=b.topics,
        offsets=b.offsets,
        clients=b.clients,
        schedule_progress=lambda: b.schedule.progress,
        stats=b.stats,
        endpoints=b.endpoints,
        uptime_ms=lambda: b.uptime_ms,
        config=cfg,
    )
    consumer_admin = ConsumerAdminProcessor(
        reads=store,
        topics=b.topics,
        offsets=b.offsets,
        clients=b.clients,
        endpoints=b.endpoints,
        broker_name=cfg.broker_name,
        consume_tps=b.stats_manager.consume_tps,
    )  # MQADMIN
    # MQADMIN: subscription groups, broker settings, broker -> consumer calls, stats items
    groups = SubscriptionGroupProcessor(subscriptions=b.subscriptions, offsets=b.offsets, log=b.log)
    settings = BrokerConfigProcessor(
        settings=b.settings, log=b.log, known=lambda: set(admin.broker_config())
    )
    callbacks = ConsumerCallbackProcessor(
        clients=b.clients,
        topics=b.topics,
        offsets=b.offsets,
        reads=store,
        broker_name=cfg.broker_name,
        log=b.log,
    )
    stats_view = BrokerStatsProcessor(stats_manager=b.stats_manager)
    # what a slave syncs that is not in the log (admin/replication.py; server/ha/sync.py)
    slave_sync = SlaveSyncProcessor(
        offsets=b.offsets, delay_progress=lambda: b.schedule.progress, promote=b.promote
    )
    kairos = KairosAdminProcessor(
        reads=store,
        topics=b.topics,
        offsets=b.offsets,
        clients=b.clients,
        backlog=b.schedule.backlog,
        stats=b.stats,
        put=put,
        status=b.status,
        config=cfg,
        log=b.log,
        clock_ms=store.clock_ms,
    )
    # timers and recall (timers.py; server/schedule/timer/)
    recall = RecallMessageProcessor(
        timer=b.timer,
        reads=store,
        index=b.index,
        topics=b.topics,
        put=put,
        schedule_fired=lambda level, off: b.schedule.progress.get(level, 0) > off,
        clock_ms=store.clock_ms,
        broker_name=cfg.broker_name,
        msglog=b.msglog,
        log_messages=cfg.log_messages,
        wait_flushed=b.wait_flushed if cfg.flush_mode is FlushMode.SYNC_FLUSH else None,
    )
    # REPLY: request-reply (reply.py)
    reply = ReplyMessageProcessor(
        topics=b.topics,
        clients=b.clients,
        config=cfg,
        endpoints=b.endpoints,
        log=b.log,
        put=put,
        offset_msg_id=b.put_path.offset_msg_id,
    )
    timer_status = TimerStatusProcessor(
        timer=b.timer,
        stats=b.stats,
        clock_ms=store.clock_ms,
        max_delay_ms=cfg.timer_max_delay_sec * 1000,
    )
    # pending scheduled messages, one by one (admin/pending.py; server/schedule/pending/)
    view = PendingView(
        store,
        b.timer_buckets,
        timer_cursor=lambda: b.timer.cursor,
        pending_buckets=b.timer.pending_buckets,
        level_progress=lambda: b.schedule.progress,
        level_recalls=b.timer.level_recalls,
        run_blocking=b.timer.run_blocking,
    )
    pending = PendingMessageProcessor(
        view=view,
        actions=PendingActions(
            view=view,
            timer=b.timer,
            index=b.index,
            put=put,
            schedule_fired=lambda level, off: b.schedule.progress.get(level, 0) > off,
            clock_ms=store.clock_ms,
            max_delay_ms=cfg.timer_max_delay_sec * 1000,
            wait_flushed=b.wait_flushed if cfg.flush_mode is FlushMode.SYNC_FLUSH else None,
        ),
        index=b.index,
        clock_ms=store.clock_ms,
    )
    # TXN: transactional messages (transaction.py; server/transaction/)
    end_tx = EndTransactionProcessor(transactions=b.transactions, log=b.log)
    tx_status = TransactionStatusProcessor(transactions=b.transactions)
    tx_admin = TransactionAdminProcessor(transactions=b.transactions, log=b.log)
    table = _guarded(
        b,
        {
            R.SEND_MESSAGE: send.handle_send,
            R.SEND_MESSAGE_V2: send.handle_send,
            R.SEND_BATCH_MESSAGE: send.handle_send,
            R.PULL_MESSAGE: pull.handle_pull,
            R.SEND_REPLY_MESSAGE: reply.handle_reply,  # REPLY
            R.SEND_REPLY_MESSAGE_V2: reply.handle_reply,
            R.CONSUMER_SEND_MSG_BACK: send_back.handle_send_back,
            R.RECALL_MESSAGE: recall.handle_recall,
            R.QUERY_CONSUMER_OFFSET: consumer.handle_query_consumer_offset,
            R.UPDATE_CONSUMER_OFFSET: consumer.handle_update_consumer_offset,
            R.GET_MAX_OFFSET: queues.handle_get_max_offset,
            R.GET_MIN_OFFSET: queues.handle_get_min_offset,
            R.GET_EARLIEST_MSG_STORETIME: queues.handle_earliest_msg_storetime,
            R.SEARCH_OFFSET_BY_TIMESTAMP: queues.handle_search_offset,
            R.HEART_BEAT: client.handle_heartbeat,
            R.UNREGISTER_CLIENT: client.handle_unregister,
            R.GET_CONSUMER_LIST_BY_GROUP: client.handle_consumer_list,
            R.LOCK_BATCH_MQ: client.handle_lock,
            R.UNLOCK_BATCH_MQ: client.handle_unlock,
            R.CHECK_CLIENT_CONFIG: client.handle_check_client_config,
            R.UPDATE_AND_CREATE_TOPIC: topic_admin.handle_create_topic,
            R.DELETE_TOPIC_IN_BROKER: topic_admin.handle_delete_topic,
            R.GET_ALL_TOPIC_CONFIG: topic_admin.handle_all_topic_config,
            R.VIEW_MESSAGE_BY_ID: query.handle_view_message,
            R.QUERY_MESSAGE: query.handle_query_message,
            # RocketMQ's admin requests (mqadmin, dashboard: admin/broker.py, consume_stats.py)
            R.GET_BROKER_RUNTIME_INFO: admin.handle_runtime_info,
            R.GET_BROKER_CONFIG: admin.handle_broker_config,
            R.GET_TOPIC_STATS_INFO: admin.handle_topic_stats,
            R.GET_CONSUMER_CONNECTION_LIST: admin.handle_consumer_connections,
            R.GET_PRODUCER_CONNECTION_LIST: admin.handle_producer_connections,
            R.GET_CONSUME_STATS: consumer_admin.handle_consume_stats,
            R.QUERY_TOPIC_CONSUME_BY_WHO: admin.handle_consume_by_who,
            R.GET_BROKER_CONSUME_STATS: consumer_admin.handle_broker_consume_stats,
            R.QUERY_CONSUME_QUEUE: consumer_admin.handle_query_consume_queue,
            # MQADMIN (admin/groups.py, broker_config.py, callbacks.py, stats.py)
            R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: groups.handle_update_subscription_group,
            R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: groups.handle_all_subscription_groups,
            R.GET_ALL_CONSUMER_OFFSET: slave_sync.handle_all_consumer_offset,
            R.GET_ALL_DELAY_OFFSET: slave_sync.handle_all_delay_offset,
            R.DELETE_SUBSCRIPTIONGROUP: groups.handle_delete_subscription_group,
            R.UPDATE_BROKER_CONFIG: settings.handle_update_broker_config,
            R.GET_CONSUMER_RUNNING_INFO: callbacks.handle_consumer_running_info,
            R.INVOKE_BROKER_TO_RESET_OFFSET: callbacks.handle_reset_offset,
            R.VIEW_BROKER_STATS_DATA: stats_view.handle_view_broker_stats,
            # kairosmq admin (900-range, admin/kairos.py)
            R.KAIROS_GET_CONSUMER_GROUPS: kairos.handle_consumer_groups,
            R.KAIROS_GET_CONSUMER_LAG: kairos.handle_consumer_lag,
            R.KAIROS_GET_SCHEDULE_BACKLOG: kairos.handle_schedule_backlog,
            R.KAIROS_RESEND_DLQ: kairos.handle_resend_dlq,
            R.KAIROS_BROWSE_DLQ: kairos.handle_browse_dlq,
            R.KAIROS_GET_BROKER_STATUS: kairos.handle_broker_status,
            R.KAIROS_GET_TIMER_STATUS: timer_status.handle_timer_status,
            R.KAIROS_PROMOTE: slave_sync.handle_promote,
            R.KAIROS_BROWSE_PENDING: pending.handle_browse,
            R.KAIROS_PENDING_HISTOGRAM: pending.handle_histogram,
            R.KAIROS_RESCHEDULE_PENDING: pending.handle_reschedule,
            R.KAIROS_RECALL_PENDING: pending.handle_recall,
            # TXN
            R.END_TRANSACTION: end_tx.handle_end_transaction,
            R.KAIROS_GET_TRANSACTION_STATUS: tx_status.handle_transaction_status,
            R.KAIROS_END_HALF_MESSAGE: tx_admin.handle_end_half,
        },
        TOPIC_CHANGING,
    )
    entry = send_module.GuardedSend  # send.py's twin: the two wrappers above in one C call
    if entry is not None:
        for code in (R.SEND_MESSAGE, R.SEND_MESSAGE_V2, R.SEND_BATCH_MESSAGE):
            table[code] = entry(send.handle_send, b.topics, b.stats, b.log)
    return table


def namesrv_table(b: Broker) -> dict[int, Handler]:
    """The embedded name server port's handlers."""
    names = DefaultRequestProcessor(topics=b.topics, endpoints=b.endpoints, config=b.config)
    kv = KvConfigProcessor(kv=b.kv_config, log=b.log)
    return _guarded(
        b,
        {
            R.GET_ROUTEINFO_BY_TOPIC: names.handle_route,
            R.GET_BROKER_CLUSTER_INFO: names.handle_cluster_info,
            R.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: names.handle_topic_list,
            R.GET_NAMESRV_CONFIG: names.handle_namesrv_config,
            R.DELETE_TOPIC_IN_NAMESRV: names.handle_delete_topic_in_namesrv,
            R.PUT_KV_CONFIG: kv.handle_kv,
            R.GET_KV_CONFIG: kv.handle_kv,
            R.DELETE_KV_CONFIG: kv.handle_kv,
            R.GET_KVLIST_BY_NAMESPACE: kv.handle_kv_list,
        },
    )
