"""THE catalogue of broker log events: the line format, every event and its typed fields.

Owns: ``LOG_FORMAT``, ``COMMON`` (the fields every line may carry), ``CATALOGUE`` (event name ->
field name -> type name), ``LEAN_EVENTS``, ``FORMAT_1_FIELDS``, ``all_fields()`` and
``record()`` (the format-2 dict of one log call). This is the input contract of the Spark job:
``server/observe/logs.py`` (the logging machinery) and ``spark/`` both import it from here, so
neither package imports the other (``server -> spark -> protocol`` is one-way; a test checks it).

Invariants:
* Sans-IO data and pure functions only: no structlog, no files (``tests/protocol/
  test_sans_io.py``).
* Event names are stable dotted names; fields are added, never renamed or retyped, and
  ``spark/schema.py`` follows this table without an edit (a contract test reads real broker
  logs with the Spark schema in FAILFAST mode). The table is exact both ways:
  ``tests/server/test_log_catalogue.py`` checks every log call in ``server/`` and every line a
  live broker writes. Type names are Spark's: string, long, int, double, boolean (format 1's
  ``timestamp`` is ``timestamp``).
* Line format ``LOG_FORMAT`` (2): see ``server/observe/logs.py`` and ``record``.
"""

from __future__ import annotations

from typing import Any  # Any: a log event's fields: any JSON-encodable value

LOG_FORMAT = 2  # the ``v`` of every JSON line; format 1 lines have no ``v``

# field name -> type name (Spark: string, long, int, double, boolean)
COMMON: dict[str, str] = {
    "ts": "long",
    "v": "int",
    "event": "string",
    "level": "string",
    "component": "string",
}

CATALOGUE: dict[str, dict[str, str]] = {
    # ---- lifecycle
    "broker.started": {
        "host": "string",
        "port": "int",
        "namesrv_port": "int",
        "data_dir": "string",
        "delay_levels": "string",
        "flush_mode": "string",
        # --namesrv: the external name servers (namesrv_port is then 0)
        "namesrv": "string",
        # replication (server/ha/): ASYNC_MASTER, SYNC_MASTER or SLAVE; a master's HA port
        "broker_role": "string",
        "ha_port": "int",
    },
    # the open-file budget at start (server/fdbudget.py): the soft RLIMIT_NOFILE raised to
    # the hard one (raised_from: before), the descriptors each part may hold, their total;
    # warning (fits false) when the configured connections and open queue files did not
    # fit and were lowered (remark: to what, and the limit to ask for); error when the
    # broker cannot start under the limit
    "broker.fd_budget": {
        "limit": "int",
        "raised_from": "int",
        "open_at_start": "int",
        "listeners": "int",
        "services": "int",
        "transient": "int",
        "segments": "int",
        "queue_files": "int",
        "connections": "int",
        "total": "long",
        "needed": "int",
        "fits": "boolean",
        "remark": "string",
    },
    # which core runs (protocol/native.py): "native" (every compiled twin), "pure" or
    # "mixed"; reason says why a module runs its pure core (KAIROSMQ_NO_EXTENSIONS, not
    # built, stale); warning when the core is not native and nobody asked for that
    "broker.core": {"core": "string", "reason": "string"},
    # warning: the VIP channel (port - 2) could not be bound; the broker serves without it
    "broker.vip_unavailable": {"port": "int", "error": "string"},
    "broker.stopping": {"reason": "string"},
    # ---- external name servers (--namesrv; server/cluster/registration.py): one per registration
    "broker.registered": {
        "namesrv": "string",
        "broker_addr": "string",
        "topic_count": "int",
        "data_version": "long",
        "duration_ms": "double",
    },
    # warning: REGISTER_BROKER failed (unreachable, timeout, refused); retried in retry_in_ms
    "broker.register_failed": {
        "namesrv": "string",
        "error": "string",
        "failures": "int",
        "retry_in_ms": "double",
    },
    "broker.unregistered": {"namesrv": "string", "broker_addr": "string"},
    "broker.unregister_failed": {"namesrv": "string", "error": "string"},  # warning
    "broker.stopped": {"uptime_ms": "double"},
    # error level: a stop step failed or timed out; stop goes on and closes the files
    "broker.stop_failed": {"step": "string", "error": "string"},
    # error level: a supervised background service raised; restarted after retry_in_ms
    "service.failed": {
        "service": "string",
        "error": "string",
        "failures": "int",
        "retry_in_ms": "double",
    },
    "service.recovered": {"service": "string", "failures": "int", "down_ms": "double"},
    # ---- `kairosmq cluster` (server/cluster/local.py): its children are services of the supervisor
    "cluster.child_started": {
        "name": "string",
        "kind": "string",
        "address": "string",
        "pid": "int",
        "starts": "int",
    },
    # error level: a child failed --max-failures times in a row; the cluster stops
    "cluster.gave_up": {"name": "string", "failures": "int", "error": "string"},
    "cluster.stopping": {"reason": "string"},
    "cluster.stopped": {"reason": "string"},
    # ---- replication (server/ha/, docs/replication.md); slave/master: host:port
    # a master: a slave connected, started streaming (offset: what it asked; start_offset:
    # where the stream starts; kairosmq: it said HELLO), disconnected (ack_offset: its
    # last ack); error: a report it refused (the connection is closed)
    "ha.slave_connected": {"slave": "string"},
    "ha.slave_started": {
        "slave": "string",
        "offset": "long",
        "start_offset": "long",
        "kairosmq": "boolean",
    },
    "ha.slave_disconnected": {"slave": "string", "ack_offset": "long", "reason": "string"},
    "ha.bad_report": {"slave": "string", "offset": "long", "reason": "string"},
    # warning: the default HA port (port + 1) was taken; the lone master runs without it
    "ha.listen_failed": {"port": "int", "error": "string"},
    # a slave: connected (offset: the start it reported; kairosmq: the master answered
    # HELLO), disconnected (warning; reconnects), and the errors that close the
    # connection with nothing appended
    "ha.master_connected": {"master": "string", "offset": "long", "kairosmq": "boolean"},
    "ha.master_disconnected": {"master": "string", "offset": "long", "reason": "string"},
    "ha.segment_size_mismatch": {
        "master": "string",
        "master_segment_size": "long",
        "segment_size": "long",
        "reason": "string",
    },
    "ha.offset_mismatch": {"master": "string", "master_offset": "long", "offset": "long"},
    # replicated bytes the slave's store refused (kind: offset, segment_size or record)
    "ha.replica_refused": {
        "master": "string",
        "master_offset": "long",
        "offset": "long",
        "kind": "string",
        "reason": "string",
    },
    # warning: a slave became an ASYNC_MASTER (`kairosmq admin promote`): its new epoch
    # starts at start_offset; cut_bytes: a record it was receiving, dropped;
    # topics_created: topics its log holds that its last table sync had not brought
    "ha.promoted": {
        "epoch": "int",
        "start_offset": "long",
        "cut_bytes": "long",
        "broker_role": "string",
        "topics_created": "int",
    },
    "ha.epoch_unreadable": {"path": "string", "error": "string"},  # error: read as empty
    # a starting slave cut its log at its master's newest epoch start (warning; cut_bytes
    # 0: it held nothing there) and rebuilds what was derived; or could not check
    # (warning; error when its own epoch is newer than its master's)
    "ha.rejoined": {
        "master": "string",
        "epoch": "int",
        "start_offset": "long",
        "cut_bytes": "long",
    },
    "ha.rejoin_unchecked": {"master": "string", "reason": "string"},
    # SlaveSynchronize (ha/sync.py): a table copied (count: entries changed; info), or a
    # request that failed (warning; retried next round)
    "ha.synced": {"master": "string", "table": "string", "count": "int"},
    "ha.sync_failed": {"master": "string", "table": "string", "error": "string"},
    # the master's ACL refused the slave's account (error; nothing changed, retried next round)
    "ha.sync_denied": {
        "master": "string",
        "table": "string",
        "access_key": "string",
        "error": "string",
        "fix": "string",
    },
    "store.recovered": {
        "commitlog_max_offset": "long",
        "truncated_bytes": "long",
        "records_replayed": "long",
        "records_skipped": "long",
        "duration_ms": "double",
    },
    "store.files_deleted": {"kind": "string", "count": "int", "bytes": "long"},
    # ---- store faults (error level unless noted; docs/reliability.md)
    # replay passed over a record it could not decode or dispatch (counted in the summary)
    "store.replay_skipped": {"phy_offset": "long", "reason": "string"},
    # a dispatch listener raised after an append (the message is stored)
    "store.dispatch_failed": {"phy_offset": "long", "dispatcher": "string", "error": "string"},
    # a commit-log write failed: the records after phy_offset were rolled back
    "store.write_failed": {
        "phy_offset": "long",
        "rolled_back_bytes": "long",
        "records": "int",
        "errno": "int",
        "error": "string",
        "retry_in_ms": "double",
    },
    "store.write_recovered": {"failures": "int"},  # info: a write succeeded again
    # sends refused above the free-space watermark / accepted again (info)
    "store.disk_full": {"used_ratio": "double", "max_used_ratio": "double", "path": "string"},
    "store.disk_ok": {"used_ratio": "double", "max_used_ratio": "double", "path": "string"},
    # warning: a file could not be allocated where a failure is survivable
    "store.allocation_failed": {"kind": "string", "path": "string", "error": "string"},
    "store.checkpoint_unreadable": {"path": "string", "error": "string"},  # full replay
    # the scheduler passed over a schedule record it cannot deliver
    "schedule.record_skipped": {
        "delay_level": "int",
        "queue_offset": "long",
        "phy_offset": "long",
        "reason": "string",
    },
    # a KAIROS_SCHEDULE_ORIGIN value that is not a known level:offset was ignored (warning)
    "schedule.origin_ignored": {"phy_offset": "long", "origin": "string", "reason": "string"},
    # warning: the wall clock stepped back; a head's due time was capped (RocketMQ
    # correctDeliverTimestamp)
    "schedule.due_capped": {
        "delay_level": "int",
        "queue_offset": "long",
        "deliver_ts": "long",
        "capped_ts": "long",
    },
    # ---- timer messages (server/schedule/timer/): any due millisecond, recall
    "timer.scheduled": {
        "msg_id": "string",
        "real_topic": "string",
        "real_queue_id": "int",
        "queue_offset": "long",
        "phy_offset": "long",
        "deliver_ts": "long",
    },
    "timer.fired": {
        "msg_id": "string",
        "topic": "string",
        "queue_id": "int",
        "queue_offset": "long",
        "phy_offset": "long",
        "deliver_ts": "long",
        "lateness_ms": "double",
    },
    "timer.recalled": {
        "msg_id": "string",
        "topic": "string",
        "deliver_ts": "long",
        "phy_offset": "long",
        "kind": "string",
    },
    # an operator moved a pending timer or level-delayed message (KAIROS_RESCHEDULE_PENDING,
    # server/schedule/pending/actions.py): from its due ms to a new one (run_now: to the
    # broker's now); new_phy_offset is the timer record that replaces it
    "schedule.rescheduled": {
        "msg_id": "string",
        "topic": "string",
        "kind": "string",
        "from_ts": "long",
        "deliver_ts": "long",
        "phy_offset": "long",
        "new_phy_offset": "long",
        "run_now": "boolean",
    },
    # an operator recalled a pending message by ref, msgId or key (KAIROS_RECALL_PENDING)
    "schedule.recalled": {
        "msg_id": "string",
        "topic": "string",
        "kind": "string",
        "deliver_ts": "long",
        "phy_offset": "long",
    },
    "timer.record_skipped": {"phy_offset": "long", "reason": "string"},
    "timer.origin_ignored": {"phy_offset": "long", "origin": "string"},
    "timer.buckets_deleted": {"count": "int", "before_ts": "long"},
    # ---- the web console's process (console/, `kairosmq console`): its own log lines
    "console.started": {
        "host": "string",
        "port": "int",
        "namesrv": "string",
        "users": "int",
    },
    "console.login": {"user": "string", "role": "string", "peer": "string"},
    "console.login_failed": {"user": "string", "peer": "string"},  # warning
    # an operator's action through the console (the broker's answer code; 0: done)
    "console.action": {
        "user": "string",
        "route": "string",
        "broker": "string",
        "target": "string",
        "code": "int",
    },
    "console.request_failed": {"path": "string", "error": "string"},  # error: a 500
    # a bulk action on pending messages (console/bulk.py): after each message's
    # console.action, the whole; confirmed false: the count changed, nothing was done
    "console.bulk_action": {
        "user": "string",
        "broker": "string",
        "action": "string",
        "filter": "string",
        "selected": "int",
        "done": "int",
        "failed": "int",
        "confirmed": "boolean",
    },
    # ---- transactional messages (server/transaction/): half, end, check-back
    "transaction.prepared": {
        "msg_id": "string",
        "producer_group": "string",
        "real_topic": "string",
        "real_queue_id": "int",
        "queue_offset": "long",
        "phy_offset": "long",
    },
    "transaction.committed": {
        "msg_id": "string",
        "producer_group": "string",
        "topic": "string",
        "half_offset": "long",
        "checks": "int",
        "from_check": "boolean",
        "peer": "string",
    },
    "transaction.rolled_back": {
        "msg_id": "string",
        "producer_group": "string",
        "topic": "string",
        "half_offset": "long",
        "checks": "int",
        "from_check": "boolean",
        "peer": "string",
    },
    # CHECK_TRANSACTION_STATE sent to a live producer of the group (checks: before this one)
    "transaction.checked": {
        "msg_id": "string",
        "producer_group": "string",
        "topic": "string",
        "half_offset": "long",
        "checks": "int",
        "peer": "string",
    },
    # warning: transactionCheckMax checks without an end (or its record is gone: retention);
    # the half message is dropped
    "transaction.discarded": {
        "msg_id": "string",
        "producer_group": "string",
        "topic": "string",
        "half_offset": "long",
        "checks": "int",
        "reason": "string",
    },
    # debug: a check found no live producer of the group; tried again next interval
    "transaction.check_deferred": {
        "msg_id": "string",
        "producer_group": "string",
        "reason": "string",
    },
    # warning: an END_TRANSACTION that could not be applied (wrong group/offset, no half)
    "transaction.end_failed": {
        "producer_group": "string",
        "msg_id": "string",
        "half_offset": "long",
        "code": "int",
        "remark": "string",
        "peer": "string",
    },
    # an END_TRANSACTION for a half message that already ended (ignored)
    "transaction.end_ignored": {
        "producer_group": "string",
        "msg_id": "string",
        "half_offset": "long",
        "remark": "string",
    },
    # warning: a KAIROS_TX_HALF outside the commit in progress was ignored
    "transaction.origin_ignored": {"phy_offset": "long", "origin": "string"},
    # warning: a commit outside 0..2^63-1 was refused
    "offset.commit_refused": {
        "group": "string",
        "topic": "string",
        "queue_id": "int",
        "value": "string",
    },
    "offset.persist_failed": {"path": "string", "error": "string"},  # retried next checkpoint
    # warning: a new offset not stored, the table holds max_consumer_offsets (limit) offsets
    "offset.table_full": {"group": "string", "topic": "string", "queue_id": "int", "limit": "int"},
    "offset.file_unreadable": {"path": "string", "error": "string"},
    # warning: DLQ resend passed over a dead letter it must not resend
    "message.resend_skipped": {"group": "string", "msg_id": "string", "reason": "string"},
    "topic.created": {"topic": "string", "queue_nums": "int", "auto": "boolean"},
    "topic.deleted": {"topic": "string"},
    # error level: topics.json could not be written; written again 1 s later (table_file.py)
    "topic.persist_failed": {"path": "string", "error": "string"},
    # name-server KV config (PUT_KV_CONFIG / DELETE_KV_CONFIG, handlers/admin/kv.py)
    "kvconfig.updated": {"namespace": "string", "key": "string"},
    "kvconfig.deleted": {"namespace": "string", "key": "string"},
    # ---- the standalone name server (server/namesrv/, ``kairosmq namesrv``)
    "namesrv.started": {
        "host": "string",
        "port": "int",
        "data_dir": "string",
        "broker_expiry_ms": "double",
        "scan_interval_ms": "double",
        "acl": "boolean",
        "tls_mode": "string",
    },
    "namesrv.stopped": {"uptime_ms": "double", "brokers": "int"},
    # REGISTER_BROKER from a new broker address (first) or with a changed topic config
    "namesrv.broker_registered": {
        "cluster": "string",
        "broker_name": "string",
        "broker_addr": "string",
        "broker_id": "long",
        "topic_count": "int",
        "first": "boolean",
        "peer": "string",
    },
    "namesrv.broker_unregistered": {
        "cluster": "string",
        "broker_name": "string",
        "broker_addr": "string",
        "broker_id": "long",
        "peer": "string",
    },
    # warning: no REGISTER_BROKER for longer than the expiry (120 s): dropped with its routes
    "namesrv.broker_expired": {
        "broker_name": "string",
        "broker_addr": "string",
        "silent_ms": "double",
    },
    # the connection a broker registered on closed (RocketMQ BrokerHousekeepingService)
    "namesrv.broker_disconnected": {
        "broker_name": "string",
        "broker_addr": "string",
        "peer": "string",
    },
    "namesrv.topic_deleted": {"topic": "string", "cluster": "string", "brokers": "int"},
    # WIPE_WRITE_PERM_OF_BROKER (action wipe) / ADD_WRITE_PERM_OF_BROKER (action add)
    "namesrv.write_perm_changed": {
        "broker_name": "string",
        "action": "string",
        "topic_count": "int",
        "peer": "string",
    },
    # UPDATE_NAMESRV_CONFIG (318): the settings changed (in memory), as RocketMQ names them
    "namesrv.config_updated": {"keys": "string", "peer": "string"},
    # subscription groups (server/tables/subscriptions.py; auto: created by a heartbeat or pull)
    "subgroup.created": {"group": "string", "auto": "boolean"},
    "subgroup.updated": {"group": "string", "auto": "boolean"},
    "subgroup.deleted": {"group": "string"},
    "subgroup.persist_failed": {"path": "string", "error": "string"},  # written again later
    # UPDATE_BROKER_CONFIG (25): the settings changed, as RocketMQ names them
    "broker.config_updated": {"keys": "string", "peer": "string"},
    # at start: the persisted UPDATE_BROKER_CONFIG values applied (skipped: unreadable ones)
    "broker.config_loaded": {"path": "string", "keys": "string", "skipped": "string"},
    # GET_CONSUMER_RUNNING_INFO / RESET_CONSUMER_CLIENT_OFFSET sent to a client that failed
    # INVOKE_BROKER_TO_RESET_OFFSET sent RESET_CONSUMER_CLIENT_OFFSET to the group's clients
    "offset.reset": {"group": "string", "topic": "string", "reset_ts": "long", "clients": "int"},
    "client.call_failed": {
        "client_id": "string",
        "group": "string",
        "request_code": "int",
        "error": "string",
    },
    # ---- connections and clients
    "conn.opened": {"peer": "string", "conn_id": "long", "listener": "string"},
    "conn.closed": {"peer": "string", "conn_id": "long", "reason": "string"},
    # warning level: max_connections reached, the new connection is closed at once
    "conn.refused": {
        "peer": "string",
        "listener": "string",
        "connections": "int",
        "reason": "string",
    },
    # warning: unfinished frames across connections above partial_frame_budget: this
    # connection (buffered bytes; authorized: a request of it passed the ACL) is closed
    "conn.over_budget": {
        "peer": "string",
        "conn_id": "long",
        "buffered": "long",
        "total": "long",
        "budget": "long",
        "authorized": "boolean",
    },
    "frame.rejected": {"peer": "string", "conn_id": "long", "error": "string"},
    # ---- security (server/security/: access.py, install.py, tls.py; docs/security.md)
    # warning: a request refused by the ACL: who (access_key), what (request_code, resource,
    # perm needed), from where (peer, listener); reason: no_access_key, unknown_access_key,
    # signature, binding_code, binding_stale, binding_replay,
    # binding_required, admin_tls, unreadable, admin, permission
    "acl.denied": {
        "peer": "string",
        "listener": "string",
        "access_key": "string",
        "request_code": "int",
        "reason": "string",
        "resource": "string",
        "perm": "string",
        "code": "int",
        "remark": "string",
    },
    # at start; request_binding, request_window_ms, admin_require_tls: the request policy
    "acl.loaded": {
        "path": "string",
        "accounts": "int",
        "global_white": "int",
        "request_binding": "string",
        "request_window_ms": "int",
        "admin_require_tls": "boolean",
    },
    "acl.reloaded": {"path": "string", "accounts": "int", "global_white": "int"},
    # error: the changed ACL file cannot be used; the rules in force stay
    "acl.reload_failed": {"path": "string", "error": "string"},
    # warning at start: bound beyond loopback without --acl
    "acl.disabled": {"host": "string", "reason": "string"},
    # warning: plain remoting on a TLS-enforcing port (closed)
    "tls.refused": {"peer": "string", "reason": "string"},
    # warning: a TLS handshake or record failed (that connection is closed)
    "tls.failed": {"peer": "string", "stage": "string", "error": "string"},
    # error level, from ``log.exception``: ``exception`` is the formatted traceback (an
    # event logged that way must list it)
    "request.failed": {
        "peer": "string",
        "request_code": "int",
        "error": "string",
        "exception": "string",
    },
    # a request refused by server/remoting/ingress.py (bad name, integer, size, property)
    "request.rejected": {
        "peer": "string",
        "request_code": "int",
        "code": "int",
        "remark": "string",
    },
    # ---- request-reply (server/handlers/reply.py); warning: the reply did not reach its
    # requester (the sender gets SYSTEM_ERROR with the same remark)
    "reply.push_failed": {
        "client_id": "string",
        "topic": "string",
        "remark": "string",
        "peer": "string",
    },
    "reply.store_failed": {"topic": "string", "status": "string", "remark": "string"},
    # at start: the reply topic and (trace_topic_enable) RMQ_SYS_TRACE_TOPIC created
    "topic.system_created": {"topics": "string"},
    "client.registered": {"client_id": "string", "group": "string", "role": "string"},
    "client.unregistered": {"client_id": "string", "group": "string", "role": "string"},
    # warn: a heartbeat registered an SQL92 subscription that does not compile
    "filter.compile_failed": {
        "group": "string",
        "topic": "string",
        "expression": "string",
        "remark": "string",
    },
    # ---- the message lifecycle (one event per step)
    # (the time of the line is the store time; offset_msg_id = store host + phy_offset)
    "message.stored": {
        "msg_id": "string",
        "topic": "string",
        "queue_id": "int",
        "queue_offset": "long",
        "phy_offset": "long",
        "size": "int",
        "born_ts": "long",
        "reconsume_times": "int",
    },
    "message.rejected": {
        "topic": "string",
        "producer_group": "string",
        "code": "int",
        "remark": "string",
        "peer": "string",
    },
    "message.scheduled": {
        "msg_id": "string",
        "real_topic": "string",
        "real_queue_id": "int",
        "delay_level": "int",
        "queue_offset": "long",
        "phy_offset": "long",
        "deliver_ts": "long",
        "reconsume_times": "int",
    },
    # debug level: the scheduler found it due (message.delivered carries the lateness)
    "message.due": {
        "msg_id": "string",
        "delay_level": "int",
        "queue_offset": "long",
        "deliver_ts": "long",
        "wake_lag_ms": "double",
    },
    # (deliver_ts = ts - lateness_ms; the planned time is on message.scheduled)
    "message.delivered": {
        "msg_id": "string",
        "topic": "string",
        "queue_id": "int",
        "queue_offset": "long",
        "phy_offset": "long",
        "delay_level": "int",
        "lateness_ms": "double",
        "reconsume_times": "int",
    },
    "message.pulled": {
        "msg_id": "string",
        "group": "string",
        "topic": "string",
        "queue_id": "int",
        "queue_offset": "long",
        "born_ts": "long",
        "reconsume_times": "int",
    },
    "message.redelivered": {
        "msg_id": "string",
        "group": "string",
        "topic": "string",
        "origin_topic": "string",
        "origin_msg_id": "string",
        "reconsume_times": "int",
        "delay_level": "int",
    },
    "message.dead_lettered": {
        "msg_id": "string",
        "group": "string",
        "topic": "string",
        "origin_topic": "string",
        "origin_msg_id": "string",
        "reconsume_times": "int",
    },
    # ---- pulls and offsets
    "pull.held": {
        "group": "string",
        "topic": "string",
        "queue_id": "int",
        "queue_offset": "long",
        "timeout_ms": "long",
    },
    "offset.committed": {"group": "string", "topic": "string", "queue_id": "int", "offset": "long"},
}


# The per-message events written through ``MessageLog`` -> the fields format 1 had that
# format 2 drops (callers may still pass them; the line leaves them out).
LEAN_EVENTS: dict[str, tuple[str, ...]] = {
    "message.stored": ("offset_msg_id", "store_ts", "tags", "keys", "producer_group"),
    "message.scheduled": ("offset_msg_id", "store_ts", "tags"),
    "message.due": (),
    "message.delivered": ("deliver_ts",),
    "message.pulled": ("store_ts",),
}
# Format 1 fields that format 2 no longer writes (old logs still read with these types).
FORMAT_1_FIELDS: dict[str, str] = {
    "timestamp": "timestamp",
    "offset_msg_id": "string",
    "store_ts": "long",
    "tags": "string",
    "keys": "string",
    "deliver_ts": "long",
    "producer_group": "string",
}


def all_fields() -> dict[str, str]:
    """Union of every event's fields with their types (the Spark schema's columns)."""
    out = dict(COMMON)
    for fields in CATALOGUE.values():
        for name, kind in fields.items():
            prev = out.setdefault(name, kind)
            if prev != kind:
                raise ValueError(f"field {name!r} has two types: {prev} and {kind}")
    return out


def drop_lean_fields(fields: dict[str, Any], drop: tuple[str, ...]) -> None:
    """Leave out of a ``LEAN_EVENTS`` event's ``fields`` its format-1-only ``drop`` fields
    and a ``reconsume_times`` of 0 (the one rule for ``record`` and the broker's hot-path
    log writer)."""
    for key in drop:
        if key in fields:
            del fields[key]
    if not fields.get("reconsume_times", 1):
        del fields["reconsume_times"]


def record(event: str, fields: dict[str, Any], ts_ms: int, level: str = "info") -> dict[str, Any]:
    """The format-2 JSON record of one log call (``fields`` may be consumed).

    ``ts, v, event`` first; a ``LEAN_EVENTS`` event drops ``component``, its format-1-only
    fields, ``reconsume_times`` 0 and ``level`` info; other events keep ``level`` and get
    ``uncatalogued`` when the catalogue does not know them (they would fall outside the
    Spark schema). The bench generator writes its lines with this function too.
    """
    drop = LEAN_EVENTS.get(event)
    if drop is None:
        rec: dict[str, Any] = {"ts": ts_ms, "v": LOG_FORMAT, "event": event, "level": level}
        if event not in CATALOGUE:
            rec["uncatalogued"] = True
    else:
        rec = {"ts": ts_ms, "v": LOG_FORMAT, "event": event}
        if level != "info":
            rec["level"] = level
        fields.pop("component", None)
        drop_lean_fields(fields, drop)
    fields.pop("event", None)
    rec.update(fields)
    return rec
