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
import os
import sys
from typing import Any, TextIO

import orjson
from kairosmq.protocol.codes import PERM_READ, PERM_WRITE, ResponseCode
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.headers import CreateTopicRequestHeader
from kairosmq.protocol.ids import decode_offset_msg_id
from kairosmq.protocol.message import MessageExt, decode_records

from . import admin_view as view
from .errors import ClientError
from .remoting import RemotingPool


class AdminError(Exception):
    """The broker answered an error (exit 1)."""


class Admin:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.pool = RemotingPool()
        self._broker: str | None = args.broker

    async def call(self, addr: str, code: int, ext: dict[str, Any] | None = None,
                   ok: tuple[int, ...] = (ResponseCode.SUCCESS,)) -> RemotingCommand:
        fields = {k: str(v) for k, v in (ext or {}).items()}
        resp = await self.pool.invoke(addr, code, fields, timeout=self.args.timeout)
        if resp.code not in ok:
            raise AdminError(resp.remark or f"request {code} failed with code {resp.code}")
        return resp

    async def broker(self) -> str:
        if self._broker is None:
            resp = await self.call(self.args.namesrv, R.GET_BROKER_CLUSTER_INFO)
            table = orjson.loads(resp.body).get("brokerAddrTable", {})
            addrs = [b["brokerAddrs"].get("0") for b in table.values()]
            if not any(addrs):
                raise AdminError(f"name server {self.args.namesrv} knows no master broker")
            self._broker = str(next(a for a in addrs if a))
        return self._broker

    async def json(self, code: int, ext: dict[str, Any] | None = None) -> Any:
        return orjson.loads((await self.call(await self.broker(), code, ext)).body)

    async def topics(self) -> dict[str, Any]:
        table: dict[str, Any] = (await self.json(R.GET_ALL_TOPIC_CONFIG))["topicConfigTable"]
        return table


async def cmd_topic(a: Admin, args: argparse.Namespace) -> Any:
    if args.action == "list":
        table = await a.topics()
        return [{"topic": name, "kind": view.topic_kind(name),
                 "readQueues": c["read_queue_nums"], "writeQueues": c["write_queue_nums"],
                 "perm": view.perm(c["perm"]), "order": c["order"]}
                for name, c in sorted(table.items())]
    broker = await a.broker()
    if args.action == "create":
        perm = (PERM_READ if "r" in args.perm else 0) | (PERM_WRITE if "w" in args.perm else 0)
        h = CreateTopicRequestHeader(topic=args.topic, read_queue_nums=args.queues,
                                     write_queue_nums=args.queues, perm=perm, order=args.order)
        await a.call(broker, R.UPDATE_AND_CREATE_TOPIC, h.to_ext_fields())
        return {"topic": args.topic, "created": True, "queues": args.queues}
    await a.call(broker, R.DELETE_TOPIC_IN_BROKER, {"topic": args.topic})
    return {"topic": args.topic, "deleted": True}


async def cmd_offsets(a: Admin, args: argparse.Namespace) -> Any:
    cfg = (await a.topics()).get(args.topic)
    if cfg is None:
        raise AdminError(f"topic {args.topic} does not exist")
    broker, rows = await a.broker(), []
    for qid in range(max(cfg["read_queue_nums"], cfg["write_queue_nums"])):
        ext = {"topic": args.topic, "queueId": qid}
        lo = int((await a.call(broker, R.GET_MIN_OFFSET, ext)).ext_fields["offset"])
        hi = int((await a.call(broker, R.GET_MAX_OFFSET, ext)).ext_fields["offset"])
        rows.append({"topic": args.topic, "queueId": qid, "minOffset": lo, "maxOffset": hi,
                     "messages": hi - lo})
    return rows


async def cmd_groups(a: Admin, args: argparse.Namespace) -> Any:
    return (await a.json(R.KAIROS_GET_CONSUMER_GROUPS))["groups"]


async def cmd_lag(a: Admin, args: argparse.Namespace) -> Any:
    return await a.json(R.KAIROS_GET_CONSUMER_LAG, {"consumerGroup": args.group})


async def cmd_schedule(a: Admin, args: argparse.Namespace) -> Any:
    return await a.json(R.KAIROS_GET_SCHEDULE_BACKLOG)


async def cmd_msg(a: Admin, args: argparse.Namespace) -> Any:
    broker = await a.broker()
    if args.offset_id:
        try:
            _ip, _port, phy = decode_offset_msg_id(args.offset_id)
        except ValueError as err:
            raise AdminError(f"not an offsetMsgId: {err}") from None
        resp = await a.call(broker, R.VIEW_MESSAGE_BY_ID, {"offset": phy})
    else:
        ext: dict[str, Any] = {"key": args.id or args.key, "topic": args.topic or "",
                               "maxNum": args.max, "beginTimestamp": 0, "endTimestamp": 0}
        if args.id:
            ext["_UNIQUE_KEY_QUERY"] = "true"
        resp = await a.call(broker, R.QUERY_MESSAGE, ext)
    msgs: list[MessageExt] = decode_records(resp.body)
    return [view.message_dict(m, args.body) for m in sorted(msgs, key=view.message_order)]


async def cmd_dlq(a: Admin, args: argparse.Namespace) -> Any:
    ext = {"consumerGroup": args.group, "maxNum": args.max,
           "toRetryTopic": "true" if args.to_retry else "false"}
    out = await a.json(R.KAIROS_RESEND_DLQ, ext)
    if out.get("error"):
        raise AdminError(f"resent {len(out['resent'])}, then stopped: {out['error']}")
    return out


RUNTIME_KEYS = ("brokerVersionDesc", "bootTimestamp", "runtime", "putTps", "getTransferedTps",
                "msgPutTotalTodayNow", "msgGetTotalTodayNow", "commitLogDiskRatio")


async def cmd_status(a: Admin, args: argparse.Namespace) -> Any:
    cluster = orjson.loads((await a.call(args.namesrv, R.GET_BROKER_CLUSTER_INFO)).body)
    status = await a.json(R.KAIROS_GET_BROKER_STATUS)
    # the runtime stats mqadmin's brokerStatus shows (GET_BROKER_RUNTIME_INFO), same keys
    runtime = (await a.json(R.GET_BROKER_RUNTIME_INFO))["table"]
    for key in RUNTIME_KEYS:
        status[key] = runtime.get(key)
    status.update({k: v for k, v in sorted(runtime.items())
                   if k.startswith("scheduleMessageOffset_")})
    status["namesrv"] = args.namesrv
    status["clusters"] = sorted(cluster.get("clusterAddrTable", {}))
    return status


COMMANDS = {"topic": cmd_topic, "offsets": cmd_offsets, "groups": cmd_groups, "lag": cmd_lag,
            "schedule": cmd_schedule, "msg": cmd_msg, "dlq": cmd_dlq, "status": cmd_status,
            "health": cmd_status}


def build_parser() -> argparse.ArgumentParser:
    def common(suppress: bool) -> argparse.ArgumentParser:
        p = argparse.ArgumentParser(add_help=False)
        d: Any = (lambda v: argparse.SUPPRESS) if suppress else (lambda v: v)
        p.add_argument("--namesrv", default=d(os.environ.get("NAMESRV_ADDR", "127.0.0.1:9876")),
                       help="name server host:port (default $NAMESRV_ADDR or 127.0.0.1:9876)")
        p.add_argument("--broker", default=d(None),
                       help="broker host:port (default: ask the name server)")
        p.add_argument("--json", action="store_true", default=d(False), help="JSON output")
        p.add_argument("--timeout", type=float, default=d(5.0), help="per-request seconds")
        return p

    sub_common = [common(True)]
    ap = argparse.ArgumentParser(prog="kairosmq admin", parents=[common(False)],
                                 description="Operate a running kairosmq broker.")
    sub = ap.add_subparsers(dest="command", required=True)
    topic = sub.add_parser("topic", help="list, create or delete topics").add_subparsers(
        dest="action", required=True)
    topic.add_parser("list", parents=sub_common, help="topics with their queue counts")
    p = topic.add_parser("create", parents=sub_common, help="create or update a topic")
    p.add_argument("topic")
    p.add_argument("--queues", type=int, default=4, help="read and write queues (default 4)")
    p.add_argument("--perm", default="rw", choices=("rw", "r", "w"))
    p.add_argument("--order", action="store_true", help="mark the topic as ordered")
    topic.add_parser("delete", parents=sub_common, help="delete a topic").add_argument("topic")
    p = sub.add_parser("offsets", parents=sub_common, help="per-queue min/max offsets")
    p.add_argument("topic")
    sub.add_parser("groups", parents=sub_common, help="consumer groups with total lag")
    p = sub.add_parser("lag", parents=sub_common, help="per-queue lag of a consumer group")
    p.add_argument("group")
    sub.add_parser("schedule", parents=sub_common, help="delayed backlog per delay level")
    p = sub.add_parser("msg", parents=sub_common, help="look up a message")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--id", help="msgId (the producer's UNIQ_KEY)")
    g.add_argument("--offset-id", help="offsetMsgId (store host + commit-log offset)")
    g.add_argument("--key", help="a message key (KEYS)")
    p.add_argument("--topic", help="only messages stored in this topic")
    p.add_argument("--max", type=int, default=32, help="at most this many (default 32)")
    p.add_argument("--body", action="store_true", help="print whole bodies")
    dlq = sub.add_parser("dlq", help="dead-letter queue tools").add_subparsers(
        dest="action", required=True)
    p = dlq.add_parser("resend", parents=sub_common,
                       help="resend %%DLQ%%<group> messages to their original topic")
    p.add_argument("group")
    p.add_argument("--max", type=int, default=1000, help="at most this many (default 1000)")
    p.add_argument("--to-retry", action="store_true",
                   help="resend to %%RETRY%%<group> instead (only this group sees them)")
    sub.add_parser("status", parents=sub_common, help="broker status")
    sub.add_parser("health", parents=sub_common,
                   help="exit 0 if the name server and broker answer (container healthcheck)")
    return ap


async def run(args: argparse.Namespace, out: TextIO | None = None,
              err: TextIO | None = None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    a = Admin(args)
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


def main(argv: list[str] | None = None, *, out: TextIO | None = None,
         err: TextIO | None = None) -> int:
    """Run one admin command; ``out``/``err`` default to sys.stdout/sys.stderr."""
    args = build_parser().parse_args(sys.argv[1:] if argv is None else argv)
    return asyncio.run(run(args, out, err))

