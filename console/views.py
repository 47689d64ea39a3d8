"""The console's read-only views that combine several broker calls: the cluster and its
brokers, topics, consumer groups and timer health.

Owns: what each view asks the brokers (stock RocketMQ requests first, so the views work
against Apache RocketMQ 4.9.8 brokers too; kairosmq's own calls, 900-905, only add to
them and are skipped when a broker answers ``REQUEST_CODE_NOT_SUPPORTED``) and the shape
of the answers.

Invariants:
* Requests are built with the protocol's header classes (``protocol/headers.py``) and
  bodies read with its decoders (``cluster_json``, ``decode_mq_table``), as ``kairosmq
  admin`` does: one rule in one place.
* Topics are paged on the console's side (``offset``/``limit``, at most ``MAX_PAGE``):
  one GET_ALL_TOPIC_CONFIG, then GET_TOPIC_STATS_INFO for the page's topics only, so a
  broker with 10,000 topics answers a page in the time of ``limit`` small calls.
* Only addresses from the cluster info are contacted (``Brokers``).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import orjson
from kairosmq.client.admin import RUNTIME_KEYS
from kairosmq.client.admin_view import topic_kind
from kairosmq.protocol.bodies import decode_mq_table
from kairosmq.protocol.codes import RequestCode as R
from kairosmq.protocol.codes import ResponseCode
from kairosmq.protocol.headers import (
    ConsumerGroupRequestHeader,
    GetConsumeStatsRequestHeader,
    TopicRequestHeader,
)
from kairosmq.protocol.pending import PendingHistogramRequestHeader

from .http import HttpError

if TYPE_CHECKING:
    from .api import Brokers

MAX_PAGE = 500
NOT_SUPPORTED = int(ResponseCode.REQUEST_CODE_NOT_SUPPORTED)
ANY = None  # ``Brokers.raw(accept=ANY)``: any answer code comes back (the view reads it)


class BrokerError(Exception):
    """A broker refused a request: its code and remark (answered 422 by the API)."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


def _tps(value: Any) -> float | None:
    """RocketMQ's ``putTps`` is ``"<10 s> <60 s> <600 s>"``; kairosmq's a number."""
    if value is None:
        return None
    try:
        return float(str(value).split()[0])
    except (ValueError, IndexError):
        return None


async def cluster(brokers: Brokers) -> dict[str, Any]:
    """Every broker of the cluster (masters and slaves): role, version, TPS, disk use
    (GET_BROKER_RUNTIME_INFO) and, for kairosmq brokers, the core in use, HA and
    supervised-service state (KAIROS_GET_BROKER_STATUS)."""
    info = await brokers.cluster_info()
    of_cluster = {
        b: c for c, names in info.get("clusterAddrTable", {}).items() for b in sorted(names)
    }
    targets = [
        (of_cluster.get(name, "-"), name, int(bid), str(addr))
        for name, b in sorted(info.get("brokerAddrTable", {}).items())
        for bid, addr in sorted(b.get("brokerAddrs", {}).items(), key=lambda kv: int(kv[0]))
    ]

    async def one(cluster_name: str, name: str, bid: int, addr: str) -> dict[str, Any]:
        row: dict[str, Any] = {
            "cluster": cluster_name,
            "brokerName": name,
            "brokerId": bid,
            "address": addr,
            "role": "master" if bid == 0 else "slave",
        }
        try:  # one broker down or refusing must not hide the others
            resp = await brokers.raw(addr, R.GET_BROKER_RUNTIME_INFO, {})
        except HttpError as err:
            row["error"] = err.message
            return row
        except BrokerError as err:
            row["error"] = err.remark
            return row
        table = orjson.loads(resp.body).get("table", {})
        row["runtime"] = {k: table.get(k) for k in RUNTIME_KEYS if k in table}
        row["version"] = table.get("brokerVersionDesc")
        row["putTps"] = _tps(table.get("putTps"))
        row["getTps"] = _tps(table.get("getTransferedTps"))
        ratio = table.get("commitLogDiskRatio")
        row["diskUsed"] = float(ratio) if ratio not in (None, "") else None
        status = await brokers.raw(addr, R.KAIROS_GET_BROKER_STATUS, {}, accept=ANY)
        row["kairosmq"] = status.code == ResponseCode.SUCCESS
        if row["kairosmq"]:
            st = orjson.loads(status.body)
            row["core"] = st.get("core")
            row["degraded"] = st.get("degraded")
            row["uptimeMs"] = st.get("uptimeMs")
            row["connections"] = st.get("connections")
            if "ha" in st:
                row["ha"] = st["ha"]
        return row

    rows = await asyncio.gather(*(one(*t) for t in targets))
    return {"clusters": sorted(info.get("clusterAddrTable", {})), "brokers": list(rows)}


def _int(q: dict[str, str], name: str, default: int, hi: int) -> int:
    raw = q.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise HttpError(400, f"{name} must be an integer, not {raw[:32]!r}") from None
    if not 0 <= value <= hi:
        raise HttpError(400, f"{name} {value} is not within 0..{hi}")
    return value


async def topics(brokers: Brokers, name: str | None, q: dict[str, str]) -> dict[str, Any]:
    """One page of the broker's topics by name (``contains``, ``kind`` filter), each with
    its queues' offsets (GET_TOPIC_STATS_INFO)."""
    offset = _int(q, "offset", 0, 10**9)
    limit = _int(q, "limit", 50, MAX_PAGE) or 50
    addr = await brokers.address(name)
    table = (await brokers.call(name, R.GET_ALL_TOPIC_CONFIG, {})).get("topicConfigTable", {})
    contains, kind = q.get("contains", ""), q.get("kind", "")
    names = sorted(
        t
        for t in table
        if (not contains or contains.lower() in t.lower()) and (not kind or topic_kind(t) == kind)
    )
    page = names[offset : offset + limit]

    async def one(topic: str) -> dict[str, Any]:
        cfg = table[topic]
        row: dict[str, Any] = {
            "topic": topic,
            "kind": topic_kind(topic),
            "readQueues": cfg.get("readQueueNums"),
            "writeQueues": cfg.get("writeQueueNums"),
            "perm": cfg.get("perm"),
            "order": cfg.get("order", False),
        }
        resp = await brokers.raw(
            addr, R.GET_TOPIC_STATS_INFO, TopicRequestHeader(topic).to_ext_fields(), accept=ANY
        )
        if resp.code != ResponseCode.SUCCESS:
            row["error"] = resp.remark or f"code {resp.code}"
            return row
        offsets, _ = decode_mq_table(resp.body, "offsetTable")
        queues = [
            {
                "queueId": mq.queue_id,
                "minOffset": v.get("minOffset", 0),
                "maxOffset": v.get("maxOffset", 0),
                "lastUpdateTimestamp": v.get("lastUpdateTimestamp", 0),
            }
            for mq, v in sorted(offsets.items(), key=lambda kv: kv[0].queue_id)
        ]
        row["queues"] = queues
        row["messages"] = sum(x["maxOffset"] - x["minOffset"] for x in queues)
        row["lastUpdateTimestamp"] = max((x["lastUpdateTimestamp"] for x in queues), default=0)
        return row

    rows = await asyncio.gather(*(one(t) for t in page))
    nxt = offset + limit if offset + limit < len(names) else None
    return {"total": len(names), "offset": offset, "rows": list(rows), "nextOffset": nxt}


async def groups(brokers: Brokers, name: str | None) -> dict[str, Any]:
    """The broker's consumer groups: its subscription-group table (201) and, on a kairosmq
    broker, the groups with offsets or clients and their total lag (900)."""
    addr = await brokers.address(name)
    out: dict[str, dict[str, Any]] = {}
    sub = await brokers.call(name, R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {})
    for g, cfg in sub.get("subscriptionGroupTable", {}).items():
        out[g] = {
            "group": g,
            "online": None,
            "lag": None,
            "consumeEnable": cfg.get("consumeEnable"),
            "retryMaxTimes": cfg.get("retryMaxTimes"),
        }
    resp = await brokers.raw(addr, R.KAIROS_GET_CONSUMER_GROUPS, {}, accept=ANY)
    if resp.code == ResponseCode.SUCCESS:
        for g in orjson.loads(resp.body).get("groups", []):
            row = out.setdefault(g["group"], {"group": g["group"]})
            row.update(
                online=g.get("online"),
                lag=g.get("lag"),
                dlq=g.get("dlq"),
                messageModel=g.get("messageModel"),
            )
    return {"groups": [out[g] for g in sorted(out)]}


async def group(brokers: Brokers, name: str | None, group_name: str) -> dict[str, Any]:
    """One group's lag per queue (GET_CONSUME_STATS, 208) and its connections
    (GET_CONSUMER_CONNECTION_LIST, 203; none when the group is not online)."""
    addr = await brokers.address(name)
    stats = await brokers.raw(
        addr, R.GET_CONSUME_STATS, GetConsumeStatsRequestHeader(group_name).to_ext_fields()
    )
    table, extra = decode_mq_table(stats.body, "offsetTable")
    queues = [
        {
            "topic": mq.topic,
            "brokerName": mq.broker_name,
            "queueId": mq.queue_id,
            "brokerOffset": v.get("brokerOffset", 0),
            "consumerOffset": v.get("consumerOffset", 0),
            "lag": max(0, v.get("brokerOffset", 0) - max(0, v.get("consumerOffset", 0))),
            "lastTimestamp": v.get("lastTimestamp", 0),
        }
        for mq, v in sorted(table.items(), key=lambda kv: (kv[0].topic, kv[0].queue_id))
    ]
    conns = await brokers.raw(
        addr,
        R.GET_CONSUMER_CONNECTION_LIST,
        ConsumerGroupRequestHeader(group_name).to_ext_fields(),
        accept=ANY,
    )
    connections: list[dict[str, Any]] = []
    if conns.code == ResponseCode.SUCCESS:
        body = orjson.loads(conns.body)
        connections = [
            {
                "clientId": c.get("clientId"),
                "clientAddr": c.get("clientAddr"),
                "language": c.get("language"),
                "version": c.get("version"),
            }
            for c in body.get("connectionSet", [])
        ]
    return {
        "group": group_name,
        "consumeTps": extra.get("consumeTps"),
        "lag": sum(x["lag"] for x in queues),
        "queues": queues,
        "connections": connections,
    }


async def timer_health(brokers: Brokers, name: str | None) -> dict[str, Any]:
    """Per delay level and for timers: pending, next due, the oldest overdue (how long the
    earliest due message is past its time). From KAIROS_GET_SCHEDULE_BACKLOG (902) and
    KAIROS_GET_TIMER_STATUS (905), the live timer count from KAIROS_PENDING_HISTOGRAM
    (908); on a broker without them, the levels' backlog from
    GET_BROKER_RUNTIME_INFO's ``scheduleMessageOffset_<level>`` (delivered, stored).
    ``onTime`` per level, for timers and in all: the share fired within 10 and 100 ms of
    due, from the lateness histograms 902 and 905 carry."""
    addr = await brokers.address(name)
    backlog = await brokers.raw(addr, R.KAIROS_GET_SCHEDULE_BACKLOG, {}, accept=(NOT_SUPPORTED,))
    if backlog.code == ResponseCode.SUCCESS:
        data = orjson.loads(backlog.body)
        now = int(data["nowMs"])
        levels = [
            {
                "level": lv["level"],
                "delayMs": lv.get("delayMs"),
                "pending": lv.get("pending", 0),
                "nextDueMs": lv.get("nextDueMs"),
                "oldestOverdueMs": _overdue(now, lv.get("pending", 0), lv.get("nextDueMs")),
                "scheduled": lv.get("scheduled"),
                "delivered": lv.get("delivered"),
                "onTime": on_time(lv.get("lateness")),
            }
            for lv in data.get("levels", [])
        ]
        ts = await brokers.call(name, R.KAIROS_GET_TIMER_STATUS, {})
        # live timers (908 without a topic: no scan budget); 905's entries per hour also
        # count the entries a reschedule or recall left behind
        hist = await brokers.call(
            name,
            R.KAIROS_PENDING_HISTOGRAM,
            PendingHistogramRequestHeader(unit="day", kind="timer").to_ext_fields(),
        )
        pending = int(hist.get("timers", 0))
        timers: dict[str, Any] | None = {
            "pending": pending,
            "nextDueMs": ts.get("nextDueMs"),
            "oldestOverdueMs": _overdue(now, pending, ts.get("nextDueMs")),
            "scheduled": ts.get("scheduled"),
            "fired": ts.get("fired"),
            "meanLatenessMs": ts.get("meanLatenessMs"),
            "entriesPerHour": ts.get("entriesPerHour", []),
            "onTime": on_time(ts.get("lateness")),
        }
        hists = [lv.get("lateness") for lv in data.get("levels", [])] + [ts.get("lateness")]
        return {
            "nowMs": now,
            "kairosmq": True,
            "levels": levels,
            "timers": timers,
            "onTime": on_time(_sum_histograms(hists)),
        }
    table = (await brokers.call(name, R.GET_BROKER_RUNTIME_INFO, {})).get("table", {})
    levels = []
    for key, value in table.items():
        if not key.startswith("scheduleMessageOffset_"):
            continue
        done, _, stored = str(value).partition(",")
        try:
            level, d, s = int(key.rsplit("_", 1)[1]), int(done), int(stored or done)
        except ValueError:
            continue
        levels.append({"level": level, "pending": max(0, s - d), "nextDueMs": None})
    return {
        "nowMs": None,
        "kairosmq": False,
        "levels": sorted(levels, key=lambda x: x["level"]),
        "timers": None,
        "onTime": None,
    }


ON_TIME_MS = (10, 100)  # the on-time shares shown: fired within 10 ms and 100 ms of due


def on_time(hist: Any) -> dict[str, Any] | None:
    """From a status's lateness histogram (``boundsMs``, ``counts``: ``counts[i]`` fired
    at most ``boundsMs[i]`` ms late): how many fired and the percentage within each of
    ``ON_TIME_MS``; None without a histogram (an older broker) or when none fired."""
    if not isinstance(hist, dict):
        return None
    bounds, counts = hist.get("boundsMs"), hist.get("counts")
    if not isinstance(bounds, list) or not isinstance(counts, list):
        return None
    total = sum(int(c) for c in counts)
    out: dict[str, Any] = {"fired": total}
    for ms in ON_TIME_MS:
        within = sum(int(c) for b, c in zip(bounds, counts, strict=False) if float(b) <= ms)
        out[f"within{ms}ms"] = round(100.0 * within / total, 2) if total else None
    return out


def _sum_histograms(hists: list[Any]) -> dict[str, Any] | None:
    """One histogram of several with the same bounds (the levels' and the timers')."""
    have = [h for h in hists if isinstance(h, dict) and isinstance(h.get("counts"), list)]
    if not have:
        return None
    counts = [0] * len(have[0]["counts"])
    for h in have:
        if h.get("boundsMs") != have[0].get("boundsMs"):
            return None
        for i, c in enumerate(h["counts"]):
            counts[i] += int(c)
    return {"boundsMs": have[0]["boundsMs"], "counts": counts}


def _overdue(now: int, pending: int, next_due: int | None) -> int:
    if not pending or next_due is None or next_due <= 0:
        return 0
    return max(0, now - int(next_due))
