"""``kairosmq admin``: operate a running broker over the remoting protocol (mqadmin-style).

Owns: argument parsing, broker address resolution (``--broker``, else the name server's
cluster info), one request per step through the client's remoting layer (``RemotingPool``),
and output: aligned tables by default, ``--json`` for scripts. See docs/admin.md. It lives in
kairosmq.client because it is a protocol client; ``kairosmq admin`` (server/cli.py) calls
``main``.

Invariants: talks only the wire protocol (works against any reachable broker, no file
access, nothing imported from kairosmq.server); exit status 0 on success, 1 when the broker
answered an error or a lookup found nothing, 2 when the broker or name server cannot be
reached. ``main(argv)`` runs its own event loop, so call it from a thread when a loop is
already running.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, TextIO

import orjson
from kairosmq.protocol.codes import PERM_READ, PERM_WRITE, ResponseCode
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.errors import HeaderError
from kairosmq.protocol.headers import (
    BrowseDlqRequestHeader,
    ConsumerGroupRequestHeader,
    CreateTopicRequestHeader,
    EndHalfMessageRequestHeader,
    Header,
    OffsetResponseHeader,
    QueryMessageRequestHeader,
    QueueRequestHeader,
    RecallMessageRequestHeader,
    RecallMessageResponseHeader,
    ResendDlqRequestHeader,
    TopicRequestHeader,
    TransactionStatusRequestHeader,
    ViewMessageRequestHeader,
)
from kairosmq.protocol.ids import decode_offset_msg_id
from kairosmq.protocol.message import MessageExt, decode_records
from kairosmq.protocol.pending import (
    DEFAULT_PAGE,
    KINDS,
    UNITS_MS,
    BrowsePendingRequestHeader,
    PendingHistogramRequestHeader,
    RecallPendingRequestHeader,
    ReschedulePendingRequestHeader,
)
from kairosmq.protocol.registration import ClusterInfo
from kairosmq.protocol.timer import RecallHandleInvalid, decode_recall_handle

from . import admin_view as view
from .credentials import client_ssl_context, credentials_from, rpc_hook_for
from .errors import ClientError
from .remoting import RemotingPool

ADMIN_GROUP = "KAIROS_ADMIN"  # the producerGroup of the admin's RECALL_MESSAGE


class AdminError(Exception):
    """The broker answered an error (exit 1)."""


def cluster_json(body: bytes) -> dict[str, Any]:
    """GET_BROKER_CLUSTER_INFO's body with string map keys: an Apache RocketMQ name server
    writes fastjson's unquoted numeric ones (``{0:"host:port"}``)."""
    return dict(orjson.loads(ClusterInfo.from_json(body).to_json()))


class Admin:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.pool = RemotingPool(**security_options(args))
        self._broker: str | None = args.broker

    async def call(
        self,
        addr: str,
        code: int,
        header: Header | None = None,
        ok: tuple[int, ...] = (ResponseCode.SUCCESS,),
    ) -> RemotingCommand:
        fields = header.to_ext_fields() if header is not None else {}
        resp = await self.pool.invoke(addr, code, fields, timeout=self.args.timeout)
        if resp.code not in ok:
            raise AdminError(resp.remark or f"request {code} failed with code {resp.code}")
        return resp

    async def broker(self) -> str:
        if self._broker is None:
            resp = await self.call(self.args.namesrv, R.GET_BROKER_CLUSTER_INFO)
            table = cluster_json(resp.body).get("brokerAddrTable", {})
            addrs = [b["brokerAddrs"].get("0") for b in table.values()]
            if not any(addrs):
                raise AdminError(f"name server {self.args.namesrv} knows no master broker")
            self._broker = str(next(a for a in addrs if a))
        return self._broker

    async def masters(self, names: str) -> dict[str, str]:
        """``--brokers``: broker name -> master address from the name server's cluster info
        (GET_BROKER_CLUSTER_INFO); ``names`` is ``all`` or a comma-separated list."""
        resp = await self.call(self.args.namesrv, R.GET_BROKER_CLUSTER_INFO)
        table = cluster_json(resp.body).get("brokerAddrTable", {})
        known = {
            n: str(b["brokerAddrs"]["0"])
            for n, b in table.items()
            if b.get("brokerAddrs", {}).get("0")
        }
        wanted = (
            sorted(known)
            if names.strip() == "all"
            else [n.strip() for n in names.split(",") if n.strip()]
        )
        missing = [n for n in wanted if n not in known]
        if missing or not wanted:
            raise AdminError(
                f"name server {self.args.namesrv} has no master for "
                f"{', '.join(missing) or names!r} (known: "
                f"{', '.join(sorted(known)) or 'none'})"
            )
        return {n: known[n] for n in wanted}

    async def json(self, code: int, header: Header | None = None) -> Any:
        return orjson.loads((await self.call(await self.broker(), code, header)).body)

    async def topics(self) -> dict[str, Any]:
        table: dict[str, Any] = (await self.json(R.GET_ALL_TOPIC_CONFIG))["topicConfigTable"]
        return table


async def cmd_topic(a: Admin, args: argparse.Namespace) -> Any:
    if args.action == "list":
        table = await a.topics()
        return [
            {
                "topic": name,
                "kind": view.topic_kind(name),
                "readQueues": c["readQueueNums"],
                "writeQueues": c["writeQueueNums"],
                "perm": view.perm(c["perm"]),
                "order": c["order"],
            }
            for name, c in sorted(table.items())
        ]
    # --brokers a,b|all: every named master of the name server's cluster info, else one
    targets = (
        await a.masters(args.brokers) if getattr(args, "brokers", None) else {"": await a.broker()}
    )
    names = {"brokers": sorted(targets)} if "" not in targets else {}
    if args.action == "create":
        perm = (PERM_READ if "r" in args.perm else 0) | (PERM_WRITE if "w" in args.perm else 0)
        h = CreateTopicRequestHeader(
            topic=args.topic,
            read_queue_nums=args.queues,
            write_queue_nums=args.queues,
            perm=perm,
            order=args.order,
        )
        for addr in targets.values():
            await a.call(addr, R.UPDATE_AND_CREATE_TOPIC, h)
        return {"topic": args.topic, "created": True, "queues": args.queues, **names}
    for addr in targets.values():
        await a.call(addr, R.DELETE_TOPIC_IN_BROKER, TopicRequestHeader(args.topic))
    if names and args.brokers.strip() != "all":
        return {"topic": args.topic, "deleted": True, **names}
    # deleted on every broker: drop the route too, as mqadmin deleteTopic does (a name
    # server keeps a topic a broker stops listing); best effort, the brokers are done
    try:
        await a.call(args.namesrv, R.DELETE_TOPIC_IN_NAMESRV, TopicRequestHeader(args.topic))
        route = "deleted"
    except (AdminError, ClientError) as err:
        route = f"not deleted: {err}"
    return {"topic": args.topic, "deleted": True, "nameServerRoute": route, **names}


async def cmd_offsets(a: Admin, args: argparse.Namespace) -> Any:
    cfg = (await a.topics()).get(args.topic)
    if cfg is None:
        raise AdminError(f"topic {args.topic} does not exist")
    broker, rows = await a.broker(), []
    for qid in range(max(cfg["readQueueNums"], cfg["writeQueueNums"])):
        q = QueueRequestHeader(args.topic, qid)
        lo = _offset(await a.call(broker, R.GET_MIN_OFFSET, q))
        hi = _offset(await a.call(broker, R.GET_MAX_OFFSET, q))
        rows.append(
            {
                "topic": args.topic,
                "queueId": qid,
                "minOffset": lo,
                "maxOffset": hi,
                "messages": hi - lo,
            }
        )
    return rows


def _offset(resp: RemotingCommand) -> int:
    try:
        return OffsetResponseHeader.from_ext_fields(resp.ext_fields).offset
    except HeaderError as err:
        raise AdminError(f"offset answer unreadable: {err}") from None


async def cmd_groups(a: Admin, args: argparse.Namespace) -> Any:
    """Groups (900) with their subscription-group config (201: consumeEnable, retries...);
    a group only in the subscription-group table is listed too."""
    groups = {g["group"]: g for g in (await a.json(R.KAIROS_GET_CONSUMER_GROUPS))["groups"]}
    table = (await a.json(R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)).get("subscriptionGroupTable", {})
    for name, cfg in table.items():
        row = groups.setdefault(
            name,
            {
                "group": name,
                "online": 0,
                "messageModel": None,
                "subscriptions": [],
                "lag": 0,
                "dlq": 0,
            },
        )
        row["subscriptionGroup"] = cfg
    return [groups[g] for g in sorted(groups)]


async def cmd_lag(a: Admin, args: argparse.Namespace) -> Any:
    return await a.json(R.KAIROS_GET_CONSUMER_LAG, ConsumerGroupRequestHeader(args.group))


async def cmd_schedule(a: Admin, args: argparse.Namespace) -> Any:
    return await a.json(R.KAIROS_GET_SCHEDULE_BACKLOG)


async def cmd_timers(a: Admin, args: argparse.Namespace) -> Any:
    return await a.json(R.KAIROS_GET_TIMER_STATUS)


async def cmd_transactions(a: Admin, args: argparse.Namespace) -> Any:
    """Pending half messages per producer group (906), counters, check settings; or an
    admin's commit / rollback of one of them (912)."""
    if args.action:
        if args.offset is None:
            raise AdminError(f"usage: kairosmq admin transactions {args.action} <commitLogOffset>")
        return await a.json(
            R.KAIROS_END_HALF_MESSAGE,
            EndHalfMessageRequestHeader(commit_log_offset=args.offset, action=args.action),
        )
    return await a.json(
        R.KAIROS_GET_TRANSACTION_STATUS, TransactionStatusRequestHeader(producer_group=args.group)
    )


async def _recall(a: Admin, handle: str) -> dict[str, Any]:
    """RECALL_MESSAGE (370) for a recall handle (RocketMQ 5.3's, from a send answer)."""
    try:
        h = decode_recall_handle(handle)
    except RecallHandleInvalid as err:
        raise AdminError(str(err)) from None
    resp = await a.call(
        await a.broker(),
        R.RECALL_MESSAGE,
        RecallMessageRequestHeader(producer_group=ADMIN_GROUP, topic=h.topic, recall_handle=handle),
    )
    msg_id = RecallMessageResponseHeader.from_ext_fields(resp.ext_fields).msg_id
    return {
        "msgId": msg_id,
        "topic": h.topic,
        "dueMs": h.deliver_ms,
        "recalled": True,
        "remark": resp.remark or "",
    }


async def cmd_msg(a: Admin, args: argparse.Namespace) -> Any:
    if args.recall:
        if not args.handle:
            raise AdminError("usage: kairosmq admin msg recall <recallHandle>")
        return await _recall(a, args.handle)
    if not (args.id or args.offset_id or args.key):
        raise AdminError("give --id, --offset-id or --key (or: msg recall <recallHandle>)")
    broker = await a.broker()
    if args.offset_id:
        try:
            _ip, _port, phy = decode_offset_msg_id(args.offset_id)
        except ValueError as err:
            raise AdminError(f"not an offsetMsgId: {err}") from None
        resp = await a.call(broker, R.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(phy))
    else:
        query = QueryMessageRequestHeader(
            args.id or args.key,
            args.topic or "",
            args.max,
            unique_key_query="true" if args.id else None,
        )
        resp = await a.call(broker, R.QUERY_MESSAGE, query)
    msgs: list[MessageExt] = decode_records(resp.body)
    return [view.message_dict(m, args.body) for m in sorted(msgs, key=view.message_order)]


async def cmd_dlq(a: Admin, args: argparse.Namespace) -> Any:
    if args.action in ("list", "export"):
        return await _dlq_pages(a, args)
    delay = None
    if args.delay is not None:
        due = parse_instant(f"+{args.delay}", 0)
        if due is None or due < 0:
            raise AdminError(f"--delay {args.delay!r} is not <n>ms|s|m|h|d")
        delay = due
    qid = qoff = None
    if args.at is not None:
        pair = args.at.split(":")
        if len(pair) != 2 or not all(x.isdigit() for x in pair):
            raise AdminError(f"--at {args.at!r} is not <queueId>:<queueOffset>")
        qid, qoff = int(pair[0]), int(pair[1])
    out = await a.json(
        R.KAIROS_RESEND_DLQ,
        ResendDlqRequestHeader(args.group, args.max, args.to_retry, delay, qid, qoff),
    )
    if out.get("error"):
        raise AdminError(f"resent {len(out['resent'])}, then stopped: {out['error']}")
    return out


_RELATIVE = re.compile(r"^\+(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_instant(text: str | None, now_ms: int | None = None) -> int | None:
    """An instant for ``--from``/``--to``/``--at``: epoch ms, ``+<n><ms|s|m|h|d>`` from
    now, or an ISO 8601 date-time (local time unless it names its zone)."""
    if text is None:
        return None
    text = text.strip()
    if text.isdigit():
        return int(text)
    m = _RELATIVE.match(text)
    if m:
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        return now + round(float(m.group(1)) * _UNIT_MS[m.group(2)])
    try:
        return int(dt.datetime.fromisoformat(text).timestamp() * 1000)
    except ValueError:
        raise AdminError(
            f"{text!r} is not an instant: give epoch ms, +<n>s|m|h|d or an ISO date-time"
        ) from None


async def cmd_pending(a: Admin, args: argparse.Namespace) -> Any:
    """Pending timers and level-delayed messages (907-910): list, histogram, reschedule,
    run-now, recall."""
    if args.action == "list":
        return await _pending_list(a, args)
    if args.action == "histogram":
        return await _pending_histogram(a, args)
    names = {"ref": args.ref, "msg_id": args.id, "key": args.key, "topic": args.topic}
    if args.action == "recall":
        return await a.json(R.KAIROS_RECALL_PENDING, RecallPendingRequestHeader(**names))
    run_now = args.action == "run-now"
    due = None if run_now else parse_instant(args.at)
    if not run_now and due is None:
        raise AdminError("give --at (epoch ms, +<n>s|m|h|d or an ISO date-time)")
    return await a.json(
        R.KAIROS_RESCHEDULE_PENDING,
        ReschedulePendingRequestHeader(**names, due_ms=due, run_now=run_now),
    )


async def _pending_list(a: Admin, args: argparse.Namespace) -> Any:
    """Pages of pending messages; ``--all`` follows ``nextCursor`` to the end."""
    rows: list[dict[str, Any]] = []
    cursor = args.cursor
    while True:
        page = await a.json(
            R.KAIROS_BROWSE_PENDING,
            BrowsePendingRequestHeader(
                cursor=cursor,
                limit=args.limit,
                topic=args.topic,
                msg_id=args.id,
                key=args.key,
                kind=args.kind,
                from_ms=parse_instant(args.from_),
                to_ms=parse_instant(args.to),
            ),
        )
        rows.extend(page["rows"])
        cursor = page["nextCursor"]
        if not args.all or cursor is None:
            break
    return {"rows": rows, "nextCursor": cursor, "nowMs": page["nowMs"]}


async def _pending_histogram(a: Admin, args: argparse.Namespace) -> Any:
    """The histogram; with ``--topic`` the broker scans in steps: their bins are summed."""
    bins: dict[int, list[int]] = {}
    cursor = None
    while True:
        out = await a.json(
            R.KAIROS_PENDING_HISTOGRAM,
            PendingHistogramRequestHeader(
                unit=args.unit,
                topic=args.topic,
                kind=args.kind,
                from_ms=parse_instant(args.from_),
                to_ms=parse_instant(args.to),
                cursor=cursor,
            ),
        )
        for b in out["bins"]:
            acc = bins.setdefault(b["startMs"], [0, 0])
            acc[0] += b["timers"]
            acc[1] += b["levels"]
        cursor = out["nextCursor"]
        if out["complete"] or cursor is None:
            break
    rows = [{"startMs": k, "timers": v[0], "levels": v[1]} for k, v in sorted(bins.items())]
    return {
        "unit": out["unit"],
        "topic": out["topic"],
        "bins": rows,
        "timers": sum(r["timers"] for r in rows),
        "levels": sum(r["levels"] for r in rows),
        "nowMs": out["nowMs"],
    }


async def _dlq_pages(a: Admin, args: argparse.Namespace) -> Any:
    """Dead letters in pages (911); ``export`` follows every page, with bodies (one JSON
    object per dead letter, written to ``--out`` as JSON lines, else printed so)."""
    export = args.action == "export"
    rows: list[dict[str, Any]] = []
    cursor = getattr(args, "cursor", None)
    while True:
        page = await a.json(
            R.KAIROS_BROWSE_DLQ, BrowseDlqRequestHeader(args.group, cursor, args.limit, export)
        )
        rows.extend(page["rows"])
        cursor = page["nextCursor"]
        if cursor is None or not (export or args.all):
            break
    if export and args.out:
        data = b"".join(orjson.dumps(r) + b"\n" for r in rows)
        await asyncio.to_thread(Path(args.out).write_bytes, data)
        return {"group": args.group, "exported": len(rows), "out": args.out}
    return {"group": args.group, "rows": rows, "nextCursor": cursor}


RUNTIME_KEYS = (
    "brokerVersionDesc",
    "bootTimestamp",
    "runtime",
    "putTps",
    "getTransferedTps",
    "msgPutTotalTodayNow",
    "msgGetTotalTodayNow",
    "commitLogDiskRatio",
)


async def cmd_status(a: Admin, args: argparse.Namespace) -> Any:
    cluster = cluster_json((await a.call(args.namesrv, R.GET_BROKER_CLUSTER_INFO)).body)
    status = await a.json(R.KAIROS_GET_BROKER_STATUS)
    # the runtime stats mqadmin's brokerStatus shows (GET_BROKER_RUNTIME_INFO), same keys
    runtime = (await a.json(R.GET_BROKER_RUNTIME_INFO))["table"]
    for key in RUNTIME_KEYS:
        status[key] = runtime.get(key)
    status.update(
        {k: v for k, v in sorted(runtime.items()) if k.startswith("scheduleMessageOffset_")}
    )
    status["namesrv"] = args.namesrv
    status["clusters"] = sorted(cluster.get("clusterAddrTable", {}))
    return status


async def cmd_promote(a: Admin, args: argparse.Namespace) -> Any:
    """KAIROS_PROMOTE to the slave named by --broker (never a name-server lookup: that
    would find the master)."""
    if args.broker is None:
        raise AdminError("promote needs --broker <the slave's host:port>")
    return orjson.loads((await a.call(args.broker, R.KAIROS_PROMOTE)).body)


COMMANDS = {
    "topic": cmd_topic,
    "promote": cmd_promote,
    "offsets": cmd_offsets,
    "groups": cmd_groups,
    "lag": cmd_lag,
    "schedule": cmd_schedule,
    "timers": cmd_timers,
    "msg": cmd_msg,
    "dlq": cmd_dlq,
    "status": cmd_status,
    "transactions": cmd_transactions,
    "pending": cmd_pending,
    "health": cmd_status,
}


def build_parser() -> argparse.ArgumentParser:
    def common(suppress: bool) -> argparse.ArgumentParser:
        p = argparse.ArgumentParser(add_help=False)
        d: Any = (lambda v: argparse.SUPPRESS) if suppress else (lambda v: v)
        p.add_argument(
            "--namesrv",
            default=d(os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876")),
            help="name server host:port (default $NAMESRV_ADDR or 127.0.0.1:9876)",
        )
        p.add_argument(
            "--broker", default=d(None), help="broker host:port (default: ask the name server)"
        )
        p.add_argument("--json", action="store_true", default=d(False), help="JSON output")
        p.add_argument("--timeout", type=float, default=d(5.0), help="per-request seconds")
        p.add_argument(
            "--access-key",
            default=d(None),
            help="ACL account: sign every request (default $KAIROS_ACCESS_KEY)",
        )
        p.add_argument(
            "--secret-key",
            default=d(None),
            help="its secret (prefer $KAIROS_SECRET_KEY: arguments show in ps)",
        )
        p.add_argument(
            "--tls",
            action="store_true",
            default=d(False),
            help="connect with TLS (broker verified against the system CAs)",
        )
        p.add_argument(
            "--tls-ca",
            default=d(None),
            metavar="FILE",
            help="connect with TLS, verifying the broker against this CA (PEM)",
        )
        return p

    sub_common = [common(True)]
    ap = argparse.ArgumentParser(
        prog="kairosmq admin",
        parents=[common(False)],
        description="Operate a running kairosmq broker.",
    )
    sub = ap.add_subparsers(dest="command", required=True)
    topic = sub.add_parser("topic", help="list, create or delete topics").add_subparsers(
        dest="action", required=True
    )
    topic.add_parser("list", parents=sub_common, help="topics with their queue counts")
    p = topic.add_parser("create", parents=sub_common, help="create or update a topic")
    p.add_argument("topic")
    p.add_argument("--queues", type=int, default=4, help="read and write queues (default 4)")
    p.add_argument("--perm", default="rw", choices=("rw", "r", "w"))
    p.add_argument("--order", action="store_true", help="mark the topic as ordered")
    brokers_help = (
        "on these brokers (names from the name server's cluster info, "
        "comma-separated) or `all`; default: --broker, else the first master"
    )
    p.add_argument("--brokers", default=None, metavar="NAME,..|all", help=brokers_help)
    p = topic.add_parser("delete", parents=sub_common, help="delete a topic")
    p.add_argument("topic")
    p.add_argument("--brokers", default=None, metavar="NAME,..|all", help=brokers_help)
    p = sub.add_parser("offsets", parents=sub_common, help="per-queue min/max offsets")
    p.add_argument("topic")
    sub.add_parser("groups", parents=sub_common, help="consumer groups with total lag")
    p = sub.add_parser("lag", parents=sub_common, help="per-queue lag of a consumer group")
    p.add_argument("group")
    sub.add_parser("schedule", parents=sub_common, help="delayed backlog per delay level")
    sub.add_parser(
        "timers", parents=sub_common, help="timer messages: pending per hour, next due, fired"
    )
    p = sub.add_parser(
        "transactions",
        parents=sub_common,
        help="pending transaction half messages per producer group",
    )
    p.add_argument("--group", default=None, help="only this producer group")
    p.add_argument(
        "action",
        nargs="?",
        choices=["commit", "rollback"],
        help="commit or roll back the pending half message at OFFSET (admin)",
    )
    p.add_argument("offset", nargs="?", type=int, help="its commitLogOffset (from the list)")
    p = sub.add_parser(
        "msg", parents=sub_common, help="look up a message, or recall a timer/delayed one"
    )
    p.add_argument(
        "recall",
        nargs="?",
        choices=["recall"],
        help="recall (cancel) the message a send's recallHandle names",
    )
    p.add_argument("handle", nargs="?", help="the recallHandle (with `recall`)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--id", help="msgId (the producer's UNIQ_KEY)")
    g.add_argument("--offset-id", help="offsetMsgId (store host + commit-log offset)")
    g.add_argument("--key", help="a message key (KEYS)")
    p.add_argument("--topic", help="only messages stored in this topic")
    p.add_argument("--max", type=int, default=32, help="at most this many (default 32)")
    p.add_argument("--body", action="store_true", help="print whole bodies")
    dlq = sub.add_parser("dlq", help="dead-letter queue tools").add_subparsers(
        dest="action", required=True
    )
    p = dlq.add_parser(
        "resend", parents=sub_common, help="resend %%DLQ%%<group> messages to their original topic"
    )
    p.add_argument("group")
    p.add_argument("--max", type=int, default=1000, help="at most this many (default 1000)")
    p.add_argument(
        "--to-retry",
        action="store_true",
        help="resend to %%RETRY%%<group> instead (only this group sees them)",
    )
    p.add_argument(
        "--delay",
        default=None,
        metavar="N<ms|s|m|h|d>",
        help="deliver each resent message this long after the resend (as a timer)",
    )
    p.add_argument(
        "--at",
        metavar="QUEUE:OFFSET",
        help="only the dead letter at <queueId>:<queueOffset> (as `dlq list` shows it)",
    )
    for action, text in (
        ("list", "dead letters of %%DLQ%%<group>, page by page"),
        ("export", "every dead letter with its body (base64) as JSON lines"),
    ):
        p = dlq.add_parser(action, parents=sub_common, help=text)
        p.add_argument("group")
        p.add_argument("--limit", type=int, default=50 if action == "list" else 500)
        if action == "list":
            p.add_argument("--cursor", help="continue at <queueId>:<queueOffset>")
            p.add_argument("--all", action="store_true", help="follow the pages to the end")
        else:
            p.add_argument("--out", help="write to this file (default: stdout)")
    pending = sub.add_parser(
        "pending", help="pending timers and level-delayed messages, one by one"
    ).add_subparsers(dest="action", required=True)
    p = pending.add_parser(
        "list", parents=sub_common, help="pending messages by due time (keyset pages)"
    )
    p.add_argument("--topic", help="only messages for this topic")
    p.add_argument("--id", help="only this msgId (UNIQ_KEY)")
    p.add_argument("--key", help="only messages with this key (KEYS)")
    p.add_argument("--kind", default="all", choices=KINDS)
    p.add_argument("--from", dest="from_", help="due at or after (ms, +1h, ISO)")
    p.add_argument("--to", help="due before (ms, +1h, ISO)")
    p.add_argument("--limit", type=int, default=DEFAULT_PAGE, help="rows per page")
    p.add_argument("--cursor", help="continue after this ref (a page's nextCursor)")
    p.add_argument("--all", action="store_true", help="follow the pages to the end")
    p = pending.add_parser(
        "histogram", parents=sub_common, help="pending per minute, hour or day of due time"
    )
    p.add_argument("--unit", default="hour", choices=sorted(UNITS_MS))
    p.add_argument("--topic", help="only messages for this topic (the broker scans)")
    p.add_argument("--kind", default="all", choices=KINDS)
    p.add_argument("--from", dest="from_", help="due at or after (ms, +1h, ISO)")
    p.add_argument("--to", help="due before (ms, +1h, ISO)")
    for action, text in (
        ("reschedule", "move pending message(s) to a new instant (--at)"),
        ("run-now", "deliver pending message(s) now"),
        ("recall", "recall (cancel) pending message(s), no recall handle needed"),
    ):
        p = pending.add_parser(action, parents=sub_common, help=text)
        g = p.add_mutually_exclusive_group(required=True)
        g.add_argument("--ref", help="a ref from `pending list` (<dueMs>:<phyOffset>)")
        g.add_argument("--id", help="msgId (UNIQ_KEY)")
        g.add_argument("--key", help="every pending message with this key (KEYS)")
        p.add_argument("--topic", help="only messages for this topic")
        if action == "reschedule":
            p.add_argument("--at", required=True, help="new instant (ms, +10m, ISO)")
    sub.add_parser("status", parents=sub_common, help="broker status")
    sub.add_parser(
        "promote",
        parents=sub_common,
        help="make the slave --broker an ASYNC_MASTER now (docs/replication.md)",
    )
    sub.add_parser(
        "health",
        parents=sub_common,
        help="exit 0 if the name server and broker answer (container healthcheck)",
    )
    return ap


def security_options(args: argparse.Namespace) -> dict[str, Any]:
    """RemotingPool keywords from --access-key/--secret-key (or the environment) and
    --tls/--tls-ca (client/credentials.py)."""
    import ssl

    creds = credentials_from(getattr(args, "access_key", None), getattr(args, "secret_key", None))
    ca = getattr(args, "tls_ca", None)
    tls: bool | ssl.SSLContext = bool(getattr(args, "tls", False))
    if ca is not None:
        tls = ssl.create_default_context(cafile=ca)
    return {"rpc_hook": rpc_hook_for(creds), "ssl": client_ssl_context(tls)}


async def run(
    args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    try:
        a = Admin(args)
    except (ValueError, OSError) as e:  # half a key pair, an unreadable --tls-ca
        print(f"kairosmq admin {args.command}: {e}", file=err)
        return 2
    try:
        result = await COMMANDS[args.command](a, args)
    except AdminError as e:
        print(f"kairosmq admin {args.command}: {e}", file=err)
        return 1
    except (ClientError, OSError, ValueError) as e:
        print(f"kairosmq admin {args.command}: cannot reach the broker: {e}", file=err)
        return 2
    finally:
        a.pool.close()
    if args.json:
        print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode(), file=out)
    else:
        print(view.render(args, result), file=out)
    return 0


def main(
    argv: list[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Run one admin command; ``out``/``err`` default to sys.stdout/sys.stderr."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    return asyncio.run(run(args, out, err))
