"""Plain ACL on the broker and name-server ports (RocketMQ 4.x ``PlainAccessValidator``).

Owns: ``needed_access`` (which request code needs which permission on which resource),
``AclGuard`` (the rules in force, the check of every request - ``check(conn, cmd)``, the
hook ``RemotingServer.dispatch`` calls before a handler - denial counts by reason, the
``acl.denied`` event, and the file watcher that reloads ``--acl FILE``).

Order of checks, as RocketMQ 4.9's ``PlainPermissionManager.validate``:
1. a peer matching ``globalWhiteRemoteAddresses`` passes, signed or not;
2. no ``AccessKey`` -> SYSTEM_ERROR "No accessKey is configured"; an unknown one ->
   SYSTEM_ERROR "No acl config for <key>";
3. a peer matching the account's ``whiteRemoteAddress`` passes (trusted address);
4. a ``Signature`` that is not HMAC-SHA1(secretKey, content) -> SYSTEM_ERROR
   "Check signature failed for accessKey=<key>" (remarks carry RocketMQ's
   ``org.apache.rocketmq.acl.common.AclException:`` prefix; its broker answers these with
   SYSTEM_ERROR too);
5. admin-only codes need ``admin: true``; each resource the request names needs its
   permission: the explicit ``topicPerms``/``groupPerms`` entry, else the default, except
   that an admin without any entry may do everything. A refusal here answers
   NO_PERMISSION (16) - RocketMQ answers SYSTEM_ERROR - with a remark naming the resource,
   the permission needed and the one held.

Resources (``needed_access``; RocketMQ 4.9's list, extended where it left holes):
* sends (SEND_MESSAGE, _V2, SEND_BATCH_MESSAGE) and RECALL_MESSAGE: PUB on the topic (read
  from the field the handler uses: V1 names for code 10, V2 letters otherwise); replies
  (SEND_REPLY_MESSAGE 324, _V2 325; RocketMQ checks none): PUB on the reply topic;
* PULL_MESSAGE, QUERY/UPDATE_CONSUMER_OFFSET: SUB on topic and group; QUERY_MESSAGE: SUB on
  the topic; HEART_BEAT: SUB on each consumer group and subscribed topic;
* CONSUMER_SEND_MSG_BACK, UNREGISTER_CLIENT (consumer group), GET_CONSUMER_LIST_BY_GROUP,
  LOCK/UNLOCK_BATCH_MQ: SUB on the group; a send-back also SUB on the topic of the stored
  message it copies (RocketMQ checks the group only, so an account could copy any message
  into its retry topic);
* a ``%RETRY%G`` or ``%DLQ%G`` topic is checked as group ``G`` (SUB), whatever the
  operation; system topics (``SCHEDULE_TOPIC_XXXX``, ``TBW102``, ``RMQ_SYS_*``) are not
  covered by ``defaultTopicPerm``: only an explicit entry or an admin reaches them
  (RocketMQ lets any default-SUB account pull every pending delayed message).
Admin-only: RocketMQ's (UPDATE_AND_CREATE_TOPIC, UPDATE_BROKER_CONFIG, DELETE_TOPIC_IN_BROKER,
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, DELETE_SUBSCRIPTIONGROUP) plus DELETE_TOPIC_IN_NAMESRV,
PUT/DELETE_KV_CONFIG, INVOKE_BROKER_TO_RESET_OFFSET, VIEW_MESSAGE_BY_ID (an offset id can
name any message), KAIROS_RESEND_DLQ, and QUERY_MESSAGE without a topic (all topics); the
name server's REGISTER_BROKER, UNREGISTER_BROKER, QUERY_DATA_VERSION, WIPE/ADD_WRITE_PERM_OF_BROKER
and UPDATE_NAMESRV_CONFIG (RocketMQ 4.9's name server checks nothing).
Other read-only admin codes need a valid signature.

Invariants:
* ``check`` never raises: a body it cannot read is a refusal (SYSTEM_ERROR), so a request
  whose resources are unknown is never let through.
* A reload swaps the rules object whole; a file that does not parse leaves the rules in
  force and logs ``acl.reload_failed`` with the reason.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kairosmq.protocol.acl import (
    ACCESS_KEY,
    DENY,
    PUB,
    SIGNATURE,
    SUB,
    calc_signature,
    check_permission,
    content_variants,
    perm_text,
    signature_matches,
)
from kairosmq.protocol.bodies import HeartbeatData, LockBatchRequest
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.naming import group_of_dlq_topic, group_of_retry_topic, is_system_topic

from .acl_rules import Account, AclConfigError, AclRules, load_rules, parse_text, yaml_problem

if TYPE_CHECKING:
    from .transport import Connection

ACL_EXCEPTION = "org.apache.rocketmq.acl.common.AclException: "
_SYSTEM_ERROR = int(ResponseCode.SYSTEM_ERROR)
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
ADMIN_CODES = frozenset({
    R.UPDATE_AND_CREATE_TOPIC, R.UPDATE_BROKER_CONFIG, R.DELETE_TOPIC_IN_BROKER,
    R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, R.DELETE_SUBSCRIPTIONGROUP,
    R.DELETE_TOPIC_IN_NAMESRV, R.PUT_KV_CONFIG, R.DELETE_KV_CONFIG,
    R.INVOKE_BROKER_TO_RESET_OFFSET, R.VIEW_MESSAGE_BY_ID, R.KAIROS_RESEND_DLQ,
    # the standalone name server's registrations and writes (a forged REGISTER_BROKER moves
    # a broker's route; QUERY_DATA_VERSION keeps a broker alive)
    R.REGISTER_BROKER, R.UNREGISTER_BROKER, R.QUERY_DATA_VERSION, R.WIPE_WRITE_PERM_OF_BROKER,
    R.ADD_WRITE_PERM_OF_BROKER, R.UPDATE_NAMESRV_CONFIG,
})
StoredTopic = Callable[[int], "str | None"]
RECALL_MESSAGE = 370  # RocketMQ 5.3 RequestCode.RECALL_MESSAGE (cancel a timer message)
_SENDS = frozenset({R.SEND_MESSAGE, R.SEND_MESSAGE_V2, R.SEND_BATCH_MESSAGE})
_REPLIES = frozenset({R.SEND_REPLY_MESSAGE, R.SEND_REPLY_MESSAGE_V2})
_GROUP_SUB = {  # code -> ext field naming the consumer group
    R.CONSUMER_SEND_MSG_BACK: "group",
    R.UNREGISTER_CLIENT: "consumerGroup",
    R.GET_CONSUMER_LIST_BY_GROUP: "consumerGroup",
}
_GROUP_TOPIC_SUB = {  # code -> (group field, topic field)
    R.PULL_MESSAGE: ("consumerGroup", "topic"),
    R.UPDATE_CONSUMER_OFFSET: ("consumerGroup", "topic"),
    R.QUERY_CONSUMER_OFFSET: ("consumerGroup", "topic"),
}


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
    """The resources ``cmd`` needs (``ValueError`` if its body cannot be read)."""
    code, ext = cmd.code, cmd.ext_fields
    if code in _SENDS:  # the field the send handler reads: V1 names for code 10 only
        return list(_topic_need(ext.get("topic" if code == R.SEND_MESSAGE else "b"), PUB))
    if code in _REPLIES:  # REPLY: a reply is a send to the reply topic (324: V1 names)
        return list(_topic_need(
            ext.get("topic" if code == R.SEND_REPLY_MESSAGE else "b"), PUB))
    if code in _GROUP_TOPIC_SUB:
        gf, tf = _GROUP_TOPIC_SUB[code]
        out = list(_topic_need(ext.get(tf), SUB))
        if ext.get(gf):
            out.append(Need("group", ext[gf], SUB))
        return out
    if code in _GROUP_SUB:
        group = ext.get(_GROUP_SUB[code])
        return [Need("group", group, SUB)] if group else []
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


def check_request(rules: AclRules, peer_ip: str, cmd: RemotingCommand,
                  stored_topic: StoredTopic | None = None) -> Account | None:
    """Let ``cmd`` from ``peer_ip`` through (the account, None if white-listed) or raise
    ``Denied``. ``stored_topic`` (commit-log offset -> topic of the record there, or None)
    makes a send-back also need SUB on the topic of the message it copies."""
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
    for content in content_variants(ext, cmd.body):
        if signature_matches(calc_signature(content, account.secret_key), given):
            break
    else:
        raise Denied(err, "signature", ACL_EXCEPTION +
                     f"Check signature failed for accessKey={access_key}")
    try:
        needs = needed_access(cmd)
    except ValueError as bad:
        raise Denied(err, "unreadable", ACL_EXCEPTION + f"cannot tell the resources of "
                     f"request code={cmd.code}: {bad}") from None
    if cmd.code == R.CONSUMER_SEND_MSG_BACK and stored_topic is not None:
        needs.extend(_topic_need(_stored(stored_topic, ext.get("offset")), SUB))
    for need in needs:
        if need.name == TRACE_TOPIC and need.perm == PUB and need.kind == "topic":
            return account  # RocketMQ: message traces may always be written
    # a message query without a topic searches every topic: an admin's request
    admin_only = cmd.code in ADMIN_CODES or (cmd.code == R.QUERY_MESSAGE
                                             and not ext.get("topic"))
    if admin_only and not account.admin:
        raise Denied(ResponseCode.NO_PERMISSION, "admin", ACL_EXCEPTION +
                     f"Need admin permission for request code={cmd.code}, "
                     f"but accessKey={access_key} is not")
    if account.admin and not account.topic_perms and not account.group_perms:
        return account
    for need in needs:
        owned, default = _owned(account, need)
        if not check_permission(need.perm, owned):
            how = " (its default)" if default else ""
            raise Denied(ResponseCode.NO_PERMISSION, "permission", ACL_EXCEPTION +
                         f"No {perm_text(need.perm)} permission for {need.shown()}: "
                         f"accessKey={access_key} has {perm_text(owned)}{how}", need)
    return account


def _stored(stored_topic: StoredTopic, offset: str | None) -> str | None:
    try:
        return stored_topic(int(offset)) if offset is not None else None
    except ValueError:
        return None  # not a number: the handler refuses the request


class AclGuard:
    """The ACL in force on a broker: ``check`` is the transport's auth hook."""

    def __init__(self, path: Path, log: Any, reload_interval: float = 1.0) -> None:
        self.path = Path(path)
        self.log = log
        self.reload_interval = reload_interval
        self.denied: dict[str, int] = {}
        self.reloads = 0
        self.stored_topic: StoredTopic | None = None  # set by server/security.py
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
            check_request(self.rules, conn.peer_ip, cmd, self.stored_topic)
            return None
        except Denied as d:
            self.denied[d.reason] = self.denied.get(d.reason, 0) + 1
            need = d.need
            self.log.warning("acl.denied", peer=conn.peer, listener=conn.listener,
                             access_key=cmd.ext_fields.get(ACCESS_KEY, ""),
                             request_code=cmd.code, reason=d.reason,
                             resource="" if need is None else need.shown(),
                             perm="" if need is None else perm_text(need.perm),
                             code=int(d.code), remark=d.remark)
            return cmd.error(d.code, d.remark)

    # ------------------------------------------------------------------ reload

    def reload_if_changed(self) -> bool:
        """Re-read the file if its stat changed; True if new rules are in force."""
        try:
            st = os.stat(self.path)
        except OSError as err:
            if self._stamp is not None:  # logged once; a file put back is read again
                self._stamp = None
                self.log.error("acl.reload_failed", path=str(self.path),
                               error=f"cannot read the ACL file: {err.strerror or err}; "
                                     f"the rules in force stay")
            return False
        if (st.st_mtime_ns, st.st_size, st.st_ino) == self._stamp:
            return False
        old_digest = self._digest
        try:
            rules = self._read()
        except (OSError, AclConfigError) as err:
            self._stamp = (st.st_mtime_ns, st.st_size, st.st_ino)  # log once per change
            self.log.error("acl.reload_failed", path=str(self.path),
                           error=f"{err}; the rules in force stay")
            return False
        if self._digest == old_digest:
            return False
        self.rules = rules
        self.reloads += 1
        self.log.info("acl.reloaded", path=str(self.path), accounts=len(rules.accounts),
                      global_white=len(rules.global_white))
        return True

    async def watch(self, state: Any) -> None:
        """Supervised service: poll the file's stat every ``reload_interval`` seconds."""
        while True:
            await asyncio.sleep(self.reload_interval)
            self.reload_if_changed()
            state.ok()


def load_guard(path: Path, log: Any, reload_interval: float = 1.0) -> AclGuard:
    """An ``AclGuard`` for ``path`` (raises ``AclConfigError``/``OSError`` if unusable)."""
    guard = AclGuard(path, log, reload_interval)
    log.info("acl.loaded", path=str(path), accounts=len(guard.rules.accounts),
             global_white=len(guard.rules.global_white))
    return guard


__all__ = ["AclGuard", "Denied", "Need", "check_request", "load_guard", "load_rules",
           "needed_access"]
