"""Wire numbers of the RocketMQ 4.x remoting protocol.

Owns: request codes, response codes, language codes, serialize types, RPC flag bits,
message sys-flag bits and pull sys-flag bits. Every number here is RocketMQ's own
(RocketMQ ``RequestCode``/``ResponseCode``/``LanguageCode``/``MessageSysFlag``/``PullSysFlag``);
codes that RocketMQ does not have (kairosmq admin requests) live in the 900-range so
they cannot collide with a future RocketMQ code in the ranges it uses.

Invariant: a decoded command keeps its ``code`` as a plain ``int``; mapping to
``RequestCode`` happens at dispatch, so an unknown number becomes a
REQUEST_CODE_NOT_SUPPORTED answer rather than a decode error.
"""

from __future__ import annotations

from enum import IntEnum


class RequestCode(IntEnum):
    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    UPDATE_BROKER_CONFIG = 25
    GET_BROKER_CONFIG = 26
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    GET_ALL_CONSUMER_OFFSET = 43  # a slave's SlaveSynchronize (server/ha/sync.py)
    GET_ALL_DELAY_OFFSET = 45
    CHECK_CLIENT_CONFIG = 46
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    GET_KVLIST_BY_NAMESPACE = 219
    RESET_CONSUMER_CLIENT_OFFSET = 220  # broker -> consumer (one-way)
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    WIPE_WRITE_PERM_OF_BROKER = 205  # name server (server/namesrv/)
    GET_TOPICS_BY_CLUSTER = 224  # name server
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304  # name server
    UPDATE_NAMESRV_CONFIG = 318  # name server
    QUERY_DATA_VERSION = 322  # broker -> name server: has my topic config changed?
    ADD_WRITE_PERM_OF_BROKER = 327  # name server
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    GET_CONSUMER_RUNNING_INFO = 307  # admin -> broker -> consumer, answered
    SEND_MESSAGE_V2 = 310
    VIEW_BROKER_STATS_DATA = 315
    GET_BROKER_CONSUME_STATS = 317
    GET_NAMESRV_CONFIG = 319
    QUERY_CONSUME_QUEUE = 321
    SEND_BATCH_MESSAGE = 320
    # request-reply (RocketMQ 4.6+, server/handlers/reply.py)
    SEND_REPLY_MESSAGE = 324
    SEND_REPLY_MESSAGE_V2 = 325
    PUSH_REPLY_MESSAGE_TO_CLIENT = 326  # broker -> requesting client, answered
    RECALL_MESSAGE = 370  # RocketMQ 5.3: cancel a timer / delayed message by its handle
    # ---- kairosmq admin requests (no RocketMQ equivalent): the 900-range, JSON bodies ----
    KAIROS_GET_CONSUMER_GROUPS = 900  # every group: online clients, subscriptions, total lag
    KAIROS_GET_CONSUMER_LAG = 901  # one group: per-queue broker offset, group offset, lag
    KAIROS_GET_SCHEDULE_BACKLOG = 902  # per delay level: pending count, next due time
    KAIROS_RESEND_DLQ = 903  # move %DLQ%<group> messages back to their original topic
    KAIROS_GET_BROKER_STATUS = 904  # liveness/health: uptime, connections, commit-log range
    KAIROS_GET_TIMER_STATUS = 905  # timer messages: pending per hour, next due, counters
    KAIROS_GET_TRANSACTION_STATUS = 906  # pending half messages per producer group
    # pending scheduled messages, one by one (protocol/pending.py; `kairosmq admin pending`)
    KAIROS_BROWSE_PENDING = 907  # timers and level-delayed messages by due time, keyset pages
    KAIROS_PENDING_HISTOGRAM = 908  # pending per minute/hour/day of due time
    KAIROS_RESCHEDULE_PENDING = 909  # move a pending message to a new instant (or now)
    KAIROS_RECALL_PENDING = 910  # recall a pending message by ref, msgId or key
    KAIROS_BROWSE_DLQ = 911  # %DLQ%<group> messages in pages (with bodies: an export)
    KAIROS_END_HALF_MESSAGE = 912  # an admin commits or rolls back a pending half message
    KAIROS_PROMOTE = 913  # a slave becomes an ASYNC_MASTER (docs/replication.md)


class ResponseCode(IntEnum):
    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    FLOW_CONTROL = 215
    ILLEGAL_OPERATION = 604  # RocketMQ 5 (recall: bad handle, already delivered, unknown)


class LanguageCode(IntEnum):
    """Binary-header language byte; JSON headers carry the member name."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13


class SerializeType(IntEnum):
    JSON = 0
    ROCKETMQ = 1


# RemotingCommand.flag bits
FLAG_RESPONSE = 0x1
FLAG_ONEWAY = 0x2

# MessageSysFlag bits (RocketMQ common/sysflag/MessageSysFlag.java)
SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TRANSACTION_PREPARED = 0x4
SYSFLAG_TRANSACTION_COMMIT = 0x8
SYSFLAG_TRANSACTION_ROLLBACK = 0xC
SYSFLAG_BORNHOST_V6 = 0x10
SYSFLAG_STOREHOST_V6 = 0x20

# PullSysFlag bits (RocketMQ common/sysflag/PullSysFlag.java)
PULL_COMMIT_OFFSET = 0x1
PULL_SUSPEND = 0x2
PULL_SUBSCRIPTION = 0x4
PULL_CLASS_FILTER = 0x8

# The protocol version this broker reports in responses (V4_9_8); the Java client
# refuses some features from brokers reporting < 232.
BROKER_VERSION = 409

# Perm bits of a topic (PermName)
PERM_PRIORITY = 0x8
PERM_READ = 0x4
PERM_WRITE = 0x2
PERM_INHERIT = 0x1
