"""Human-readable output of ``kairosmq admin``: aligned tables and message cards.

Owns: turning each command's result (the same structure ``--json`` prints) into text, and
the small field formatters (times, permissions, topic kinds, message dicts).

Invariant: pure functions of their inputs (the clock only for "due in" columns); nothing
here talks to the network, so the JSON and table views always show the same data.
"""

from __future__ import annotations

import argparse
import datetime as dt
from typing import Any

import orjson
from kairosmq.protocol.codes import PERM_READ, PERM_WRITE
from kairosmq.protocol.message import MessageExt
from kairosmq.protocol.naming import dlq_topic, is_dlq_topic, is_retry_topic, is_system_topic

BODY_PREVIEW = 120


def fmt_time(ms: int | None) -> str:
    if ms is None or ms <= 0:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000).isoformat(sep=" ", timespec="milliseconds")


def fmt_ms(ms: float) -> str:
    if ms < 1000:
        return f"{ms:g}ms"
    for unit, size in (("h", 3_600_000), ("m", 60_000)):
        if ms >= size and ms % size == 0:
            return f"{ms // size:g}{unit}"
    return f"{ms / 1000:g}s"


def perm(value: int) -> str:
    return ("r" if value & PERM_READ else "-") + ("w" if value & PERM_WRITE else "-")


def topic_kind(name: str) -> str:
    if is_retry_topic(name):
        return "retry"
    if is_dlq_topic(name):
        return "dlq"
    if is_system_topic(name):
        return "system"
    return "normal"


def message_order(m: MessageExt) -> tuple[int, int]:
    return (m.store_timestamp, m.commit_log_offset)


def message_dict(m: MessageExt, full_body: bool) -> dict[str, Any]:
    text = m.body.decode("utf-8", errors="replace")
    if not full_body and len(text) > BODY_PREVIEW:
        text = text[:BODY_PREVIEW] + "..."
    return {
        "msgId": m.msg_id,
        "offsetMsgId": m.offset_msg_id,
        "topic": m.topic,
        "queueId": m.queue_id,
        "queueOffset": m.queue_offset,
        "commitLogOffset": m.commit_log_offset,
        "tags": m.tags,
        "keys": m.keys,
        "storeTimestamp": m.store_timestamp,
        "bornTimestamp": m.born_timestamp,
        "reconsumeTimes": m.reconsume_times,
        "size": m.store_size,
        "properties": m.properties,
        "body": text,
    }


def table(rows: list[dict[str, Any]], columns: list[tuple[str, str]]) -> str:
    """Align ``rows`` under ``columns`` ((header, key) pairs); numbers right-aligned."""
    cells = [[h for h, _ in columns]]
    for r in rows:
        cells.append(["-" if r.get(k) is None else str(r.get(k)) for _, k in columns])
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    numeric = [bool(rows) and all(isinstance(r.get(k), int) for r in rows) for _, k in columns]
    lines = []
    for row in cells:
        parts = [
            c.rjust(w) if num else c.ljust(w)
            for c, w, num in zip(row, widths, numeric, strict=True)
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def _schedule(result: dict[str, Any]) -> str:
    now = result["nowMs"]
    rows = []
    for lv in result["levels"]:
        due = lv["nextDueMs"]
        rows.append(
            {
                **lv,
                "delay": fmt_ms(lv["delayMs"]),
                "next": fmt_time(due),
                "in": "-" if due is None else fmt_ms(max(0, due - now)),
            }
        )
    cols = [
        ("LEVEL", "level"),
        ("DELAY", "delay"),
        ("PENDING", "pending"),
        ("NEXT DUE", "next"),
        ("DUE IN", "in"),
        ("SCHEDULED", "scheduled"),
        ("DELIVERED", "delivered"),
    ]
    return table(rows, cols) + f"\npending total: {sum(r['pending'] for r in rows)}"


def _timers(result: dict[str, Any]) -> str:
    now, due = result["nowMs"], result["nextDueMs"]
    rows = [
        {"hour": fmt_time(h["hourMs"]), "entries": h["entries"]} for h in result["entriesPerHour"]
    ]
    lines = [
        table(rows, [("HOUR", "hour"), ("ENTRIES", "entries")])
        if rows
        else "no pending timer messages",
        f"next due: {fmt_time(due)}"
        + ("" if due is None else f" (in {fmt_ms(max(0, due - now))})"),
        f"scheduled: {result['scheduled']}  fired: {result['fired']}  mean lateness: "
        + ("-" if result["meanLatenessMs"] is None else f"{result['meanLatenessMs']} ms"),
        f"max delay: {fmt_ms(result['maxDelayMs'])}",
    ]
    return "\n".join(lines)


def _status(result: dict[str, Any]) -> str:
    """Broker status: one ``key: value`` line per field, then the services table and
    a ``degraded:`` line naming each failing service with its last error."""
    services = result.get("services") or []
    lines = [f"{k}: {v}" for k, v in result.items() if k not in ("services", "degraded", "ha")]
    if isinstance(result.get("ha"), dict):
        lines += _ha_lines(result["ha"])
    if services:
        rows = [
            {
                **sv,
                "retry": "-" if sv["retryInMs"] is None else fmt_ms(sv["retryInMs"]),
                "since": fmt_time(sv["lastErrorTs"]),
            }
            for sv in services
        ]
        lines += [
            "",
            table(
                rows,
                [
                    ("SERVICE", "name"),
                    ("STATE", "state"),
                    ("FAILURES", "failures"),
                    ("RETRY IN", "retry"),
                    ("LAST ERROR AT", "since"),
                    ("LAST ERROR", "lastError"),
                ],
            ),
        ]
    bad = [sv for sv in services if sv["state"] == "degraded"]
    if bad:
        lines.append("degraded: " + "; ".join(f"{sv['name']} ({sv['lastError']})" for sv in bad))
    elif services:
        lines.append("degraded: none")
    return "\n".join(lines)


def _ha_lines(ha: dict[str, Any]) -> list[str]:
    """Replication (docs/replication.md): the role, where slaves connect or the master
    followed, the lag in bytes and ms, then every other field as ``ha.<key>: value``."""
    lines = [f"ha.role: {ha.get('role')}"]
    if "haAddress" in ha:
        lines.append(f"ha.address: {ha['haAddress']}")
        if ha.get("lagBytes") is None:
            lines.append("ha.lag: no slave attached")
        else:
            lines.append(f"ha.lag: {ha['lagBytes']} bytes, {ha.get('lagMs')} ms")
    elif "masterAddress" in ha:
        state = "connected" if ha.get("connected") else "not connected"
        lines.append(f"ha.master: {ha['masterAddress']} ({state})")
    shown = {"role", "haAddress", "lagBytes", "lagMs", "masterAddress", "connected"}
    lines += [f"ha.{k}: {v}" for k, v in ha.items() if k not in shown]
    return lines


def _messages(result: list[dict[str, Any]]) -> str:
    cards = []
    for m in result:
        props = {k: v for k, v in m["properties"].items()}
        lines = [
            f"msgId:          {m['msgId']}",
            f"offsetMsgId:    {m['offsetMsgId']}",
            f"topic:          {m['topic']}  queue {m['queueId']}  offset {m['queueOffset']}",
            f"tags / keys:    {m['tags'] or '-'} / {m['keys'] or '-'}",
            f"stored:         {fmt_time(m['storeTimestamp'])}  "
            f"(born {fmt_time(m['bornTimestamp'])})",
            f"reconsumeTimes: {m['reconsumeTimes']}  size {m['size']} B",
            f"properties:     {props}",
            f"body:           {m['body']!r}",
        ]
        cards.append("\n".join(lines))
    return "\n\n".join(cards) + f"\n\n{len(result)} message(s)"


def _subgroup(group: dict[str, Any]) -> dict[str, Any]:
    """A group's subscription-group columns (``-`` when the broker has no config for it)."""
    cfg = group.get("subscriptionGroup")
    if not cfg:
        return {}
    consume = "on" if cfg.get("consumeEnable") else "off"
    if cfg.get("consumeEnable") and not cfg.get("consumeBroadcastEnable"):
        consume = "on (no broadcast)"
    return {
        "consume": consume,
        "retryMaxTimes": cfg.get("retryMaxTimes"),
        "retryQueueNums": cfg.get("retryQueueNums"),
    }


def render(args: argparse.Namespace, result: Any) -> str:
    cmd = args.command
    if cmd == "topic" and args.action == "list":
        return table(
            result,
            [
                ("TOPIC", "topic"),
                ("KIND", "kind"),
                ("READ Q", "readQueues"),
                ("WRITE Q", "writeQueues"),
                ("PERM", "perm"),
                ("ORDER", "order"),
            ],
        )
    if cmd == "offsets":
        return table(
            result,
            [
                ("TOPIC", "topic"),
                ("QUEUE", "queueId"),
                ("MIN", "minOffset"),
                ("MAX", "maxOffset"),
                ("MESSAGES", "messages"),
            ],
        )
    if cmd == "groups":
        rows = [{**g, "subs": ",".join(g["subscriptions"]) or "-", **_subgroup(g)} for g in result]
        return table(
            rows,
            [
                ("GROUP", "group"),
                ("ONLINE", "online"),
                ("MODEL", "messageModel"),
                ("SUBSCRIPTIONS", "subs"),
                ("LAG", "lag"),
                ("DLQ", "dlq"),
                ("CONSUME", "consume"),
                ("RETRY MAX", "retryMaxTimes"),
                ("RETRY Q", "retryQueueNums"),
            ],
        )
    if cmd == "lag":
        return table(
            result["queues"],
            [
                ("TOPIC", "topic"),
                ("QUEUE", "queueId"),
                ("BROKER OFFSET", "brokerOffset"),
                ("CONSUMER OFFSET", "consumerOffset"),
                ("LAG", "lag"),
            ],
        ) + (f"\ntotal lag of {result['group']}: {result['lag']}")
    if cmd == "schedule":
        return _schedule(result)
    if cmd == "timers":
        return _timers(result)
    if cmd == "transactions" and args.action:
        return (
            f"{result['action']}: {result['msgId']} of {result['topic']} "
            f"(group {result['producerGroup']}, offset {result['commitLogOffset']})"
            + (f": {result['remark']}" if result.get("remark") else "")
        )
    if cmd == "transactions":
        rows = [
            {"group": g, **m}
            for g, info in sorted(result["groups"].items())
            for m in info["messages"]
        ]
        counters = ", ".join(f"{k} {v}" for k, v in sorted(result["counters"].items()))
        return table(
            rows,
            [
                ("GROUP", "group"),
                ("MSG ID", "msgId"),
                ("TOPIC", "topic"),
                ("OFFSET", "commitLogOffset"),
                ("AGE MS", "ageMs"),
                ("CHECKS", "checks"),
                ("NEXT CHECK MS", "nextCheckInMs"),
            ],
        ) + (f"\npending {result['pending']}" + (f"; {counters}" if counters else ""))
    if cmd == "msg" and isinstance(result, dict):  # msg recall
        return (
            f"recalled {result['msgId']} of {result['topic']} (was due "
            f"{fmt_time(result['dueMs'])})" + (f": {result['remark']}" if result["remark"] else "")
        )
    if cmd == "msg":
        return _messages(result)
    if cmd == "dlq" and args.action == "export":
        if "out" in result:
            n, group = result["exported"], result["group"]
            return f"exported {n} dead letters of {group} to {result['out']}"
        return "\n".join(orjson.dumps(r).decode() for r in result["rows"])  # JSON lines
    if cmd == "dlq" and args.action == "list":
        more = result.get("nextCursor")
        rows = [{**r, "stored": fmt_time(r["storeMs"])} for r in result["rows"]]
        return table(
            rows,
            [
                ("QUEUE", "queueId"),
                ("OFFSET", "queueOffset"),
                ("MSG ID", "msgId"),
                ("FROM TOPIC", "originTopic"),
                ("KEYS", "keys"),
                ("RECONSUMES", "reconsumeTimes"),
                ("STORED", "stored"),
                ("RESENT", "resent"),
            ],
        ) + (f"\nmore: --cursor {more}" if more else "")
    if cmd == "dlq":
        return table(
            result["resent"],
            [
                ("MSG ID", "msgId"),
                ("TO TOPIC", "topic"),
                ("QUEUE", "queueId"),
                ("OFFSET", "queueOffset"),
            ],
        ) + (
            f"\nresent {len(result['resent'])}; still in {dlq_topic(result['group'])}: "
            f"{result['remaining']}"
        )
    if cmd == "pending":
        return _pending(args, result)
    if cmd == "status":
        return _status(result)
    if cmd == "health":
        bad = result.get("degraded") or []
        return f"ok: broker {result['address']} up {result['uptimeMs'] / 1000:.1f}s" + (
            f"; degraded: {', '.join(bad)}" if bad else ""
        )
    if isinstance(result, dict):
        return "\n".join(f"{k}: {v}" for k, v in result.items())
    return str(result)


def _pending(args: argparse.Namespace, result: dict[str, Any]) -> str:
    now = result.get("nowMs")
    if args.action == "list":
        rows = [
            {
                **r,
                "due": fmt_time(r["dueMs"]),
                "in": "-" if now is None else fmt_ms(max(0, r["dueMs"] - now)),
                "what": f"level {r['level']}" if r["kind"] == "level" else "timer",
            }
            for r in result["rows"]
        ]
        more = result.get("nextCursor")
        return table(
            rows,
            [
                ("REF", "ref"),
                ("DUE", "due"),
                ("IN", "in"),
                ("KIND", "what"),
                ("TOPIC", "topic"),
                ("MSG ID", "msgId"),
                ("KEYS", "keys"),
                ("TAGS", "tags"),
            ],
        ) + (f"\nmore: --cursor {more}" if more else "")
    if args.action == "histogram":
        rows = [{**b, "start": fmt_time(b["startMs"])} for b in result["bins"]]
        return table(rows, [("FROM", "start"), ("TIMERS", "timers"), ("LEVELS", "levels")]) + (
            f"\npending: timers {result['timers']}, level-delayed {result['levels']}"
        )
    lines = [
        f"{r['outcome']}: {r['msgId']} of {r['topic']} ({r['kind']}, was due "
        f"{fmt_time(r['dueMs'])})"
        + (f" -> due {fmt_time(r['newDueMs'])}, ref {r['newRef']}" if "newRef" in r else "")
        for r in result["results"]
    ]
    return "\n".join(lines)
