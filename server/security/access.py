"""Plain ACL on the broker and name-server ports (RocketMQ 4.x ``PlainAccessValidator``).

Owns: the classification of every request code (``ADMIN_CODES``, ``needed_access`` and
``STORED_NEEDS`` for codes checked on the topics/groups they name, ``SIGNED_ONLY``),
``check_request`` (the check of one request), ``RequestPolicy`` (kairosmq's checks beyond
RocketMQ's signature: the request binding, its freshness and replay cache, admin requests
only over TLS), ``AclGuard`` (the rules in force, the transport's auth hook ``check(conn,
cmd)`` that ``RemotingServer.dispatch`` calls before a handler, denial counts by reason,
the ``acl.denied`` event, and the file watcher that reloads ``--acl FILE``).

Order of checks, as RocketMQ 4.9's ``PlainPermissionManager.validate`` (steps 5 and 6 are
kairosmq's):
1. a peer matching ``globalWhiteRemoteAddresses`` passes, signed or not;
2. no ``AccessKey`` -> SYSTEM_ERROR "No accessKey is configured"; an unknown one ->
   SYSTEM_ERROR "No acl config for <key>";
3. a peer matching the account's ``whiteRemoteAddress`` passes (trusted address);
4. a ``Signature`` that is not HMAC-SHA1(secretKey, content) -> SYSTEM_ERROR
   "Check signature failed for accessKey=<key>" (remarks carry RocketMQ's
   ``org.apache.rocketmq.acl.common.AclException:`` prefix; its broker answers these with
   SYSTEM_ERROR too);
5. the request binding (protocol/acl.py), when the signed content carries one: signed for
   another request code, outside ``aclRequestWindow`` of the broker's clock, or a nonce
   already used -> SYSTEM_ERROR; none where ``aclRequestBinding`` requires one (``admin``:
   every request of an admin account; ``all``: every signed request) -> NO_PERMISSION;
6. an admin account's request on a plain connection with ``aclAdminRequireTls`` ->
   NO_PERMISSION;
7. admin-only codes need ``admin: true``; each resource the request names needs its
   permission: the explicit ``topicPerms``/``groupPerms`` entry, else the default, except
   that an admin without any entry may do everything. A refusal here answers
   NO_PERMISSION (16) - RocketMQ answers SYSTEM_ERROR - with a remark naming the resource,
   the permission needed and the one held.

Resources (``needed_access``; RocketMQ 4.9's list, extended where it left holes):
* sends (SEND_MESSAGE, _V2, SEND_BATCH_MESSAGE) and RECALL_MESSAGE: PUB on the topic (read
  from the field the handler uses: V1 names for code 10, V2 letters otherwise); replies
  (SEND_REPLY_MESSAGE 324, _V2 325; RocketMQ checks none): PUB on the reply topic;
* PULL_MESSAGE, QUERY/UPDATE_CONSUMER_OFFSET, GET_CONSUME_STATS, QUERY_CONSUME_QUEUE: SUB
  on the topic and the group (the latter two: each only when named); QUERY_MESSAGE: SUB
  on the topic; HEART_BEAT: SUB on each consumer group and subscribed topic;
* a topic's queue metadata (GET_MAX/MIN_OFFSET, GET_EARLIEST_MSG_STORETIME,
  SEARCH_OFFSET_BY_TIMESTAMP, GET_TOPIC_STATS_INFO): PUB or SUB on the topic (a producer
  and a consumer of the topic both may);
* CONSUMER_SEND_MSG_BACK, UNREGISTER_CLIENT (consumer group), GET_CONSUMER_LIST_BY_GROUP,
  LOCK/UNLOCK_BATCH_MQ, GET_CONSUMER_CONNECTION_LIST, GET_CONSUMER_RUNNING_INFO (relayed
  to the group's client), KAIROS_GET_CONSUMER_LAG: SUB on the group;
* ``STORED_NEEDS``: a request naming a stored message by commit-log offset is also checked
  on that message's topic, read through ``StoreLookups``: a send-back needs SUB on the
  topic of the record it copies (RocketMQ checks the group only, so an account could copy
  any message into its retry topic); END_TRANSACTION needs PUB on the real topic of the
  half message it ends (RocketMQ checks nothing: any signed account knowing the offsets
  could commit or roll back another producer's transaction). No message there: no extra
  need, and the handler refuses the request without changing anything;
* a ``%RETRY%G`` or ``%DLQ%G`` topic is checked as group ``G`` (SUB), whatever the
  operation; system topics (``SCHEDULE_TOPIC_XXXX``, ``TBW102``, ``RMQ_SYS_*``) are not
  covered by ``defaultTopicPerm``: only an explicit entry or an admin reaches them
  (RocketMQ lets any default-SUB account pull every pending delayed message).
Admin-only (``ADMIN_CODES``): RocketMQ's five, every other write (name server, KV config,
offset reset, DLQ resend, operators' reschedule and recall of pending messages, an
admin's commit or rollback of a half message, registration), and every read that lists
other accounts' groups, clients or data (all subscription groups, producer connections,
who consumes a topic, every group's consume stats, stats items, message by offset id,
the schedule backlog, pending messages and their histogram, dead letters, timer and
transaction status, broker and name-server config), plus QUERY_MESSAGE without a topic
(all topics). ``SIGNED_ONLY``: routes, cluster info, topic
lists and configs, KV reads, broker runtime info and status (aggregates),
CHECK_CLIENT_CONFIG (parses a filter).
A code in none of the sets is not served (REQUEST_CODE_NOT_SUPPORTED after the signature
check); tests/security/test_request_binding.py fails for a served code left unclassified.

Invariants:
* ``check`` never raises: a body it cannot read is a refusal (SYSTEM_ERROR), so a request
  whose resources are unknown is never let through.
* A nonce is remembered only once its signature verified, per access key, for the
  request window; at most ``REPLAY_CACHE_PER_KEY`` per key: evicting one raises that key's
  floor, and a binding signed at or before the floor is refused (never a replay let
  through because the cache was full). The cache is not persisted: its floor starts at
  the broker's start, so a request signed before a restart is not taken again after it.
  Sends, replies, pulls, offset commits and send-backs are not remembered
  (``AT_LEAST_ONCE``: their replay is a duplicate or a redelivery, which RocketMQ's
  at-least-once delivery already allows, and their rate would evict everything else);
  their binding's code and time are still checked.
* A reload swaps the rules object whole; a file that does not parse leaves the rules in
  force and logs ``acl.reload_failed`` with the reason. The policy and the replay cache
  are not part of the file (broker options) and survive a reload.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any  # Any: structlog's logger; the supervisor's task state

from kairosmq.protocol.acl import (
    ACCESS_KEY,
    ANY,
    BINDING,
    DENY,
    PUB,
    SIGNATURE,
    SUB,
    Binding,
    calc_signature,
    check_permission,
    content_forms,
    find_binding,
    perm_text,
    signature_matches,
)
from kairosmq.protocol.bodies import HeartbeatData, LockBatchRequest
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.naming import (
    TRACE_TOPIC,
    group_of_dlq_topic,
    group_of_retry_topic,
    is_system_topic,
)

from ..clock import wall_ms
from .acl_file import Account, AclConfigError, AclRules, load_rules, parse_text, yaml_problem

if TYPE_CHECKING:
    from ..remoting.transport import Connection

ACL_EXCEPTION = "org.apache.rocketmq.acl.common.AclException: "
_SYSTEM_ERROR = int(ResponseCode.SYSTEM_ERROR)
ADMIN_CODES = frozenset(
    {
        # RocketMQ 4.9.8's Permission.ADMIN_CODE
        R.UPDATE_AND_CREATE_TOPIC,
        R.UPDATE_BROKER_CONFIG,
        R.DELETE_TOPIC_IN_BROKER,
        R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
        R.DELETE_SUBSCRIPTIONGROUP,
        # writes RocketMQ leaves to any signed account
        R.DELETE_TOPIC_IN_NAMESRV,
        R.PUT_KV_CONFIG,
        R.DELETE_KV_CONFIG,
        R.INVOKE_BROKER_TO_RESET_OFFSET,
        R.KAIROS_RESEND_DLQ,
        R.KAIROS_PROMOTE,  # a slave takes over as the master
        R.KAIROS_RESCHEDULE_PENDING,  # any producer's pending message, by ref, msgId or key
        R.KAIROS_RECALL_PENDING,
        R.KAIROS_END_HALF_MESSAGE,  # any producer's transaction
        # the standalone name server: broker registration and its writes
        R.REGISTER_BROKER,
        R.UNREGISTER_BROKER,
        R.QUERY_DATA_VERSION,
        R.WIPE_WRITE_PERM_OF_BROKER,
        R.ADD_WRITE_PERM_OF_BROKER,
        R.UPDATE_NAMESRV_CONFIG,
        # reads of other accounts' messages, groups and clients, or of the deployment
        R.VIEW_MESSAGE_BY_ID,  # an offset id names any message
        R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG,
        R.GET_ALL_CONSUMER_OFFSET,  # a slave's SlaveSynchronize (every group's offsets)
        R.GET_ALL_DELAY_OFFSET,
        R.GET_PRODUCER_CONNECTION_LIST,
        R.QUERY_TOPIC_CONSUME_BY_WHO,
        R.GET_BROKER_CONSUME_STATS,
        R.VIEW_BROKER_STATS_DATA,
        R.KAIROS_GET_CONSUMER_GROUPS,
        R.KAIROS_GET_SCHEDULE_BACKLOG,
        R.KAIROS_GET_TIMER_STATUS,
        R.KAIROS_GET_TRANSACTION_STATUS,  # every producer's pending half messages and offsets
        R.KAIROS_BROWSE_PENDING,  # every topic's pending messages (ids, keys, topics)
        R.KAIROS_PENDING_HISTOGRAM,
        R.KAIROS_BROWSE_DLQ,  # dead letters with their bodies (an export)
        R.GET_BROKER_CONFIG,
        R.GET_NAMESRV_CONFIG,
    }
)
SIGNED_ONLY = frozenset(
    {
        # what every stock client reads, or public by the route anyway
        R.GET_ROUTEINFO_BY_TOPIC,
        R.GET_BROKER_CLUSTER_INFO,
        R.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
        R.GET_TOPICS_BY_CLUSTER,
        R.GET_SYSTEM_TOPIC_LIST_FROM_NS,
        R.GET_ALL_TOPIC_CONFIG,
        R.GET_KV_CONFIG,
        R.GET_KVLIST_BY_NAMESPACE,  # written by admins only
        # broker-wide aggregates (the container healthcheck's account reads them)
        R.GET_BROKER_RUNTIME_INFO,
        R.KAIROS_GET_BROKER_STATUS,
        R.CHECK_CLIENT_CONFIG,  # parses a consumer's SQL92 filter; reads and stores nothing
    }
)
# Replays of these are at most a duplicate message or a redelivery (at-least-once), and
# they come at rates a replay cache could not hold: their nonces are not remembered.
AT_LEAST_ONCE = frozenset(
    {
        R.SEND_MESSAGE,
        R.SEND_MESSAGE_V2,
        R.SEND_BATCH_MESSAGE,
        R.SEND_REPLY_MESSAGE,
        R.SEND_REPLY_MESSAGE_V2,
        R.PULL_MESSAGE,
        R.UPDATE_CONSUMER_OFFSET,
        R.CONSUMER_SEND_MSG_BACK,
    }
)
REPLAY_CACHE_PER_KEY = 50_000
StoredTopic = Callable[[int], "str | None"]
RECALL_MESSAGE = 370  # RocketMQ 5.3 RequestCode.RECALL_MESSAGE (cancel a timer message)
_SENDS = frozenset({R.SEND_MESSAGE, R.SEND_MESSAGE_V2, R.SEND_BATCH_MESSAGE})
_REPLIES = frozenset({R.SEND_REPLY_MESSAGE, R.SEND_REPLY_MESSAGE_V2})
_GROUP_SUB: dict[int, str] = {  # code -> ext field naming the consumer group
    R.CONSUMER_SEND_MSG_BACK: "group",
    R.UNREGISTER_CLIENT: "consumerGroup",
    R.GET_CONSUMER_LIST_BY_GROUP: "consumerGroup",
    R.GET_CONSUMER_CONNECTION_LIST: "consumerGroup",
    R.GET_CONSUMER_RUNNING_INFO: "consumerGroup",  # relayed to the group's client
    R.KAIROS_GET_CONSUMER_LAG: "consumerGroup",
}
# code -> (group field, topic field); each checked when present
_GROUP_TOPIC_SUB: dict[int, tuple[str, str]] = {
    R.PULL_MESSAGE: ("consumerGroup", "topic"),
    R.UPDATE_CONSUMER_OFFSET: ("consumerGroup", "topic"),
    R.QUERY_CONSUMER_OFFSET: ("consumerGroup", "topic"),
    R.GET_CONSUME_STATS: ("consumerGroup", "topic"),
    R.QUERY_CONSUME_QUEUE: ("consumerGroup", "topic"),
}
_TOPIC_ANY = frozenset(
    {  # a topic's queue metadata: producers and consumers of it
        R.GET_MAX_OFFSET,
        R.GET_MIN_OFFSET,
        R.GET_EARLIEST_MSG_STORETIME,
        R.SEARCH_OFFSET_BY_TIMESTAMP,
        R.GET_TOPIC_STATS_INFO,
    }
)
_OTHER_RESOURCE_CODES = frozenset(
    {
        *_SENDS,
        *_REPLIES,
        R.QUERY_MESSAGE,
        RECALL_MESSAGE,
        R.HEART_BEAT,
        R.LOCK_BATCH_MQ,
        R.UNLOCK_BATCH_MQ,
    }
)


@dataclass(frozen=True, slots=True)
class StoreLookups:
    """What the ACL reads from the store for requests naming a message by commit-log
    offset (server/security/install.py builds it): each returns None when there is none."""

    stored_topic: StoredTopic  # the topic of the record there (what a send-back copies)
    half_topic: StoredTopic  # the real topic of the half message there (END_TRANSACTION)


# code -> (ext field holding the commit-log offset, StoreLookups attribute, permission)
STORED_NEEDS: dict[int, tuple[str, str, int]] = {
    R.CONSUMER_SEND_MSG_BACK: ("offset", "stored_topic", SUB),
    R.END_TRANSACTION: ("commitLogOffset", "half_topic", PUB),
}
RESOURCE_CODES = frozenset(
    {*_GROUP_SUB, *_GROUP_TOPIC_SUB, *_TOPIC_ANY, *_OTHER_RESOURCE_CODES, *STORED_NEEDS}
)


@dataclass(frozen=True, slots=True)
class Need:
    """One resource a request touches: kind "topic" or "group", its name, the permission."""

    kind: str
    name: str
    perm: int

    def shown(self) -> str:
        return f"{self.kind}:{self.name}"


class Denied(Exception):
    def __init__(self, code: int, reason: str, remark: str, need: Need | None = None) -> None:
        super().__init__(remark)
        self.code = code
        self.reason = reason
        self.remark = remark
        self.need = need


def _topic_need(topic: str | None, perm: int) -> Iterator[Need]:
    if not topic:
        return
    group = group_of_retry_topic(topic)
    if group is None:
        group = group_of_dlq_topic(topic)
    if group is not None:
        yield Need("group", group, SUB)
    else:
        yield Need("topic", topic, perm)


def needed_access(cmd: RemotingCommand) -> list[Need]:
    """The resources ``cmd`` names in its fields and body (``ValueError`` if its body
    cannot be read); ``STORED_NEEDS`` adds those of a stored message in ``check_request``."""
    code, ext = cmd.code, cmd.ext_fields
    if code in _SENDS:  # the field the send handler reads: V1 names for code 10 only
        return list(_topic_need(ext.get("topic" if code == R.SEND_MESSAGE else "b"), PUB))
    if code in _REPLIES:  # REPLY: a reply is a send to the reply topic (324: V1 names)
        return list(_topic_need(ext.get("topic" if code == R.SEND_REPLY_MESSAGE else "b"), PUB))
    if code in _GROUP_TOPIC_SUB:
        gf, tf = _GROUP_TOPIC_SUB[code]
        out = list(_topic_need(ext.get(tf), SUB))
        if ext.get(gf):
            out.append(Need("group", ext[gf], SUB))
        return out
    if code in _GROUP_SUB:
        group = ext.get(_GROUP_SUB[code])
        return [Need("group", group, SUB)] if group else []
    if code in _TOPIC_ANY:
        return list(_topic_need(ext.get("topic"), ANY))
    if code == R.QUERY_MESSAGE:
        return list(_topic_need(ext.get("topic"), SUB))
    if code == RECALL_MESSAGE:  # RocketMQ 5's rule: recalling a message is a PUB
        return list(_topic_need(ext.get("topic"), PUB))
    if code == R.HEART_BEAT:
        out = []
        for consumer in HeartbeatData.from_json(cmd.body).consumers:
            out.append(Need("group", consumer.group_name, SUB))
            for sub in consumer.subscriptions:
                out.extend(_topic_need(sub.topic, SUB))
        return out
    if code in (R.LOCK_BATCH_MQ, R.UNLOCK_BATCH_MQ):
        return [Need("group", LockBatchRequest.from_json(cmd.body).consumer_group, SUB)]
    return []


def _owned(account: Account, need: Need) -> tuple[int, bool]:
    """(the permission ``account`` holds on the resource, whether it is the default)."""
    table = account.topic_perms if need.kind == "topic" else account.group_perms
    perm = table.get(need.name)
    if perm is not None:
        return perm, False
    if need.kind == "topic":
        return (DENY if is_system_topic(need.name) else account.default_topic_perm), True
    return account.default_group_perm, True


# ------------------------------------------------------------------ request policy


class BindingMode(StrEnum):
    """``aclRequestBinding``: which signed requests must carry the request binding."""

    OPTIONAL = "optional"  # checked when present (kairosmq clients); stock clients pass
    ADMIN = "admin"  # every request of an admin account (stock mqadmin is refused)
    ALL = "all"  # every signed request (only kairosmq clients)


class _Nonces:
    """One access key's remembered nonces: arrival order, nonce -> signing time, floor."""

    __slots__ = ("floor", "order", "times")

    def __init__(self, floor: int) -> None:
        self.order: deque[tuple[int, str]] = deque()
        self.times: dict[str, int] = {}
        self.floor = floor  # bindings signed at or before this are refused


class ReplayCache:
    """Nonces of bound requests within the request window, per access key, bounded.
    ``floor``: the time the cache starts covering (the broker's start: nothing is
    persisted, so a binding signed before it is refused rather than taken as new)."""

    def __init__(self, window_ms: int, per_key: int = REPLAY_CACHE_PER_KEY, floor: int = 0) -> None:
        self.window_ms = window_ms
        self.per_key = per_key
        self.floor = floor
        self._keys: dict[str, _Nonces] = {}

    def __len__(self) -> int:
        return sum(len(n.times) for n in self._keys.values())

    def admit(self, access_key: str, binding: Binding, now: int) -> str | None:
        """Remember ``binding``'s nonce; None, or why it is refused."""
        seen = self._keys.get(access_key)
        if seen is None:
            seen = self._keys[access_key] = _Nonces(self.floor)
        order, times = seen.order, seen.times
        oldest = now - self.window_ms
        while order and order[0][0] < oldest:  # past the window: refused as stale anyway
            ts, nonce = order.popleft()
            times.pop(nonce, None)
            seen.floor = max(seen.floor, ts)
        if binding.nonce in times:
            return f"nonce {binding.nonce} was already used"
        if binding.timestamp_ms <= seen.floor:
            return (
                f"signed at {binding.timestamp_ms}, at or before the oldest time the "
                f"replay cache still covers ({seen.floor})"
            )
        if len(times) >= self.per_key:
            ts, nonce = order.popleft()
            times.pop(nonce, None)
            seen.floor = max(seen.floor, ts)
        order.append((binding.timestamp_ms, binding.nonce))
        times[binding.nonce] = binding.timestamp_ms
        return None


class RequestPolicy:
    """What kairosmq asks of a signed request beyond RocketMQ's signature (broker options
    ``aclRequestBinding``, ``aclRequestWindow``, ``aclAdminRequireTls``)."""

    def __init__(
        self,
        binding: BindingMode | str = BindingMode.OPTIONAL,
        window_ms: int = 300_000,
        admin_require_tls: bool = False,
        clock_ms: Callable[[], int] = wall_ms,
        per_key: int = REPLAY_CACHE_PER_KEY,
    ) -> None:
        self.binding = BindingMode(binding)
        self.window_ms = int(window_ms)
        self.admin_require_tls = admin_require_tls
        self.clock_ms = clock_ms
        self.replays = ReplayCache(self.window_ms, per_key, floor=clock_ms() - 1)

    def check(
        self, account: Account, cmd: RemotingCommand, binding: Binding | None, tls: bool
    ) -> None:
        """Raise ``Denied`` unless ``cmd`` (signature verified) meets the policy."""
        key = account.access_key
        if binding is not None:
            if binding.code != cmd.code:
                raise Denied(
                    _SYSTEM_ERROR,
                    "binding_code",
                    ACL_EXCEPTION + f"Request binding mismatch for accessKey={key}: signed for "
                    f"request code={binding.code}, sent as request code={cmd.code}",
                )
            now = self.clock_ms()
            skew = now - binding.timestamp_ms
            if abs(skew) > self.window_ms:
                raise Denied(
                    _SYSTEM_ERROR,
                    "binding_stale",
                    ACL_EXCEPTION + f"Request binding expired for accessKey={key}: signed at "
                    f"{binding.timestamp_ms}, {skew} ms from the broker's clock "
                    f"(aclRequestWindow {self.window_ms} ms)",
                )
            if cmd.code not in AT_LEAST_ONCE:
                why = self.replays.admit(key, binding, now)
                if why is not None:
                    raise Denied(
                        _SYSTEM_ERROR,
                        "binding_replay",
                        ACL_EXCEPTION + f"Request replayed for accessKey={key}: {why}",
                    )
        elif self.binding is BindingMode.ALL or (
            self.binding is BindingMode.ADMIN and account.admin
        ):
            whose = (
                "every signed request"
                if self.binding is BindingMode.ALL
                else "an admin account's requests"
            )
            raise Denied(
                ResponseCode.NO_PERMISSION,
                "binding_required",
                ACL_EXCEPTION + f"aclRequestBinding={self.binding.value} requires {whose} to carry "
                f"the {BINDING} field (kairosmq clients and kairosmq admin sign "
                f"it; RocketMQ's stock clients cannot): accessKey={key}, request "
                f"code={cmd.code}",
            )
        if self.admin_require_tls and account.admin and not tls:
            raise Denied(
                ResponseCode.NO_PERMISSION,
                "admin_tls",
                ACL_EXCEPTION + f"accessKey={key} is an admin account: with aclAdminRequireTls "
                f"its requests are taken over TLS only (request code={cmd.code})",
            )


# ------------------------------------------------------------------ the check


def check_request(
    rules: AclRules,
    peer_ip: str,
    cmd: RemotingCommand,
    lookups: StoreLookups | None = None,
    *,
    tls: bool = False,
    policy: RequestPolicy | None = None,
) -> Account | None:
    """Let ``cmd`` from ``peer_ip`` through (the account, None if white-listed) or raise
    ``Denied``. ``lookups`` makes the ``STORED_NEEDS`` codes also need their permission on
    the topic of the stored message they name; ``policy`` (None: RocketMQ's checks only)
    adds steps 5 and 6 (``tls``: the request came over TLS)."""
    if rules.global_white and rules.white_listed(peer_ip):
        return None
    err = _SYSTEM_ERROR
    ext = cmd.ext_fields
    access_key = ext.get(ACCESS_KEY)
    if access_key is None:
        raise Denied(err, "no_access_key", ACL_EXCEPTION + "No accessKey is configured")
    account = rules.accounts.get(access_key)
    if account is None:
        raise Denied(err, "unknown_access_key", ACL_EXCEPTION + f"No acl config for {access_key}")
    if account.white_address is not None and account.white_address.match(peer_ip):
        return account
    given = ext.get(SIGNATURE)
    verified = next(
        (
            form
            for form in content_forms(ext, cmd.body)
            if signature_matches(calc_signature(form[1], account.secret_key), given)
        ),
        None,
    )  # (the names left out, the content) of the form that verified
    if verified is None:
        raise Denied(
            err, "signature", ACL_EXCEPTION + f"Check signature failed for accessKey={access_key}"
        )
    if policy is not None:
        exclude, content = verified
        policy.check(account, cmd, find_binding(ext, cmd.body, exclude, content), tls)
    try:
        needs = needed_access(cmd)
    except ValueError as bad:
        raise Denied(
            err,
            "unreadable",
            ACL_EXCEPTION + f"cannot tell the resources of request code={cmd.code}: {bad}",
        ) from None
    stored = STORED_NEEDS.get(cmd.code)
    if stored is not None and lookups is not None:
        field, lookup, perm = stored
        needs.extend(_topic_need(_stored(getattr(lookups, lookup), ext.get(field)), perm))
    for need in needs:
        if need.name == TRACE_TOPIC and need.perm == PUB and need.kind == "topic":
            return account  # RocketMQ: message traces may always be written
    # a message query without a topic searches every topic: an admin's request
    admin_only = cmd.code in ADMIN_CODES or (cmd.code == R.QUERY_MESSAGE and not ext.get("topic"))
    if admin_only and not account.admin:
        raise Denied(
            ResponseCode.NO_PERMISSION,
            "admin",
            ACL_EXCEPTION + f"Need admin permission for request code={cmd.code}, "
            f"but accessKey={access_key} is not",
        )
    if account.admin and not account.topic_perms and not account.group_perms:
        return account
    for need in needs:
        owned, default = _owned(account, need)
        if not check_permission(need.perm, owned):
            how = " (its default)" if default else ""
            raise Denied(
                ResponseCode.NO_PERMISSION,
                "permission",
                ACL_EXCEPTION + f"No {perm_text(need.perm)} permission for {need.shown()}: "
                f"accessKey={access_key} has {perm_text(owned)}{how}",
                need,
            )
    return account


def _stored(lookup: StoredTopic, offset: str | None) -> str | None:
    try:
        return lookup(int(offset)) if offset is not None else None
    except ValueError:
        return None  # not a number: the handler refuses the request


class AclGuard:
    """The ACL in force on a broker: ``check`` is the transport's auth hook."""

    def __init__(
        self,
        path: Path,
        log: Any,
        reload_interval: float = 1.0,
        policy: RequestPolicy | None = None,
        lookups: StoreLookups | None = None,
    ) -> None:
        self.path = Path(path)
        self.log = log
        self.reload_interval = reload_interval
        self.policy = policy if policy is not None else RequestPolicy()
        self.denied: dict[str, int] = {}
        self.reloads = 0
        self.lookups = lookups  # a broker's (server/security/install.py); none on a name server
        self._stamp: tuple[int, int, int] | None = None
        self._digest = b""
        self.rules = self._read()  # start-up: a bad file fails the start

    def _read(self) -> AclRules:
        data = self.path.read_bytes()
        st = os.stat(self.path)
        if (problem := yaml_problem()) is not None:
            raise AclConfigError(problem)
        rules = parse_text(data)
        self._stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        self._digest = hashlib.sha256(data).digest()
        return rules

    # ------------------------------------------------------------------ the hook

    def check(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        """None to let ``cmd`` through, else the error answer (also counted and logged)."""
        try:
            check_request(
                self.rules, conn.peer_ip, cmd, self.lookups, tls=_is_tls(conn), policy=self.policy
            )
            return None
        except Denied as d:
            self.denied[d.reason] = self.denied.get(d.reason, 0) + 1
            need = d.need
            self.log.warning(
                "acl.denied",
                peer=conn.peer,
                listener=conn.listener,
                access_key=cmd.ext_fields.get(ACCESS_KEY, ""),
                request_code=cmd.code,
                reason=d.reason,
                resource="" if need is None else need.shown(),
                perm="" if need is None else perm_text(need.perm),
                code=int(d.code),
                remark=d.remark,
            )
            return cmd.error(d.code, d.remark)

    # ------------------------------------------------------------------ reload

    def reload_if_changed(self) -> bool:
        """Re-read the file if its stat changed; True if new rules are in force."""
        try:
            st = os.stat(self.path)
        except OSError as err:
            if self._stamp is not None:  # logged once; a file put back is read again
                self._stamp = None
                self.log.error(
                    "acl.reload_failed",
                    path=str(self.path),
                    error=f"cannot read the ACL file: {err.strerror or err}; "
                    f"the rules in force stay",
                )
            return False
        if (st.st_mtime_ns, st.st_size, st.st_ino) == self._stamp:
            return False
        old_digest = self._digest
        try:
            rules = self._read()
        except (OSError, AclConfigError) as err:
            self._stamp = (st.st_mtime_ns, st.st_size, st.st_ino)  # log once per change
            self.log.error(
                "acl.reload_failed", path=str(self.path), error=f"{err}; the rules in force stay"
            )
            return False
        if self._digest == old_digest:
            return False
        self.rules = rules
        self.reloads += 1
        self.log.info(
            "acl.reloaded",
            path=str(self.path),
            accounts=len(rules.accounts),
            global_white=len(rules.global_white),
        )
        return True

    async def watch(self, state: Any) -> None:
        """Supervised service: poll the file's stat every ``reload_interval`` seconds."""
        while True:
            await asyncio.sleep(self.reload_interval)
            self.reload_if_changed()
            state.ok()


def _is_tls(conn: Connection) -> bool:
    """Whether ``conn`` speaks TLS (tls.py's proxy transport exposes its SSLObject)."""
    transport = conn.transport
    return transport is not None and transport.get_extra_info("ssl_object") is not None


def load_guard(
    path: Path,
    log: Any,
    reload_interval: float = 1.0,
    policy: RequestPolicy | None = None,
    lookups: StoreLookups | None = None,
) -> AclGuard:
    """An ``AclGuard`` for ``path`` (raises ``AclConfigError``/``OSError`` if unusable)."""
    guard = AclGuard(path, log, reload_interval, policy, lookups)
    log.info(
        "acl.loaded",
        path=str(path),
        accounts=len(guard.rules.accounts),
        global_white=len(guard.rules.global_white),
        request_binding=guard.policy.binding.value,
        request_window_ms=guard.policy.window_ms,
        admin_require_tls=guard.policy.admin_require_tls,
    )
    return guard


__all__ = [
    "ADMIN_CODES",
    "RESOURCE_CODES",
    "SIGNED_ONLY",
    "AclGuard",
    "BindingMode",
    "Denied",
    "Need",
    "RequestPolicy",
    "StoreLookups",
    "check_request",
    "load_guard",
    "load_rules",
    "needed_access",
]
