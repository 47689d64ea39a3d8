"""Generate N synthetic broker log events in the catalogue's JSON-lines format (Spark bench).

Each message goes through the broker's steps: ``message.stored`` (or ``message.scheduled`` ->
(``message.due`` with ``--due``) -> ``message.delivered`` for a delayed one), then per group
``message.pulled``; a failed attempt is ``message.redelivered`` -> scheduled/due/delivered on
``%RETRY%<group>`` at level 3 + reconsume_times -> pulled again, until success or
``message.dead_lettered``. Every event's keys are checked against ``server/observe/logs.py`` at
start. Lines are in the broker's current log format (``logs.record``: format 2), or with
``--format 1`` in the old one (ISO ``timestamp``, ``level``, ``component`` and the fields
format 2 dropped). Files are written in parallel, one msg-id range and time slice per file;
``--gzip`` compresses all but the last file (like the sink's rotated files).

    python bench/gen_events.py --events 1000000 --out /tmp/kmq-1m
    python bench/gen_events.py --replicate /tmp/kmq-10m --copies 10 --out /tmp/kmq-100m
"""

from __future__ import annotations

import argparse
import gzip
import math
import multiprocessing
import random
import time
from pathlib import Path

import orjson
from kairosmq.server.observe.logs import CATALOGUE, COMMON, FORMAT_1_FIELDS, LEAN_EVENTS, record

LEVELS_MS = [
    1000,
    5000,
    10000,
    30000,
    60000,
    120000,
    180000,
    240000,
    300000,
    360000,
    420000,
    480000,
    540000,
    600000,
    1200000,
    1800000,
    3600000,
    7200000,
]
EVENTS_PER_MSG = 3.1  # measured average with the defaults, to lay files out in time
FIELDS = {
    "message.stored": (
        "msg_id",
        "offset_msg_id",
        "topic",
        "queue_id",
        "queue_offset",
        "phy_offset",
        "size",
        "store_ts",
        "born_ts",
        "tags",
        "keys",
        "reconsume_times",
        "producer_group",
    ),
    "message.scheduled": (
        "msg_id",
        "offset_msg_id",
        "real_topic",
        "real_queue_id",
        "delay_level",
        "queue_offset",
        "phy_offset",
        "store_ts",
        "deliver_ts",
        "reconsume_times",
        "tags",
    ),
    "message.due": ("msg_id", "delay_level", "queue_offset", "deliver_ts", "wake_lag_ms"),
    "message.delivered": (
        "msg_id",
        "topic",
        "queue_id",
        "queue_offset",
        "phy_offset",
        "delay_level",
        "deliver_ts",
        "lateness_ms",
        "reconsume_times",
    ),
    "message.pulled": (
        "msg_id",
        "group",
        "topic",
        "queue_id",
        "queue_offset",
        "store_ts",
        "born_ts",
        "reconsume_times",
    ),
    "message.redelivered": (
        "msg_id",
        "group",
        "topic",
        "origin_topic",
        "origin_msg_id",
        "reconsume_times",
        "delay_level",
    ),
    "message.dead_lettered": (
        "msg_id",
        "group",
        "topic",
        "origin_topic",
        "origin_msg_id",
        "reconsume_times",
    ),
}
for _event, _keys in FIELDS.items():  # the generator must speak the catalogue, nothing else
    _known = set(CATALOGUE[_event]) | set(LEAN_EVENTS.get(_event, ()))
    assert set(_keys) <= _known, (_event, set(_keys) - _known)
    assert set(LEAN_EVENTS.get(_event, ())) <= set(FORMAT_1_FIELDS)
assert set(COMMON) == {"ts", "v", "event", "level", "component"}


class Writer:
    def __init__(self, path: Path, gz: bool, fmt: int = 2) -> None:
        self.fmt = fmt
        self.due = False
        self.f = gzip.open(str(path) + ".gz", "wb", compresslevel=1) if gz else open(path, "wb")  # noqa: SIM115
        self.buf: list[bytes] = []
        self.n = 0
        self._sec = -1
        self._prefix = ""
        self.last_deliver = 0.0  # time the last _delay() made its message visible

    def iso(self, ms: float) -> str:
        sec = int(ms // 1000)
        if sec != self._sec:
            self._sec, self._prefix = sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        return f"{self._prefix}.{int((ms - sec * 1000) * 1000):06d}Z"

    def emit(self, ts: float, event: str, component: str, **fields: object) -> None:
        if self.fmt == 1:
            rec = {
                "timestamp": self.iso(ts),
                "level": "info",
                "event": event,
                "component": component,
                **fields,
            }
        else:
            rec = record(event, {"component": component, **fields}, int(ts))
        self.buf.append(orjson.dumps(rec))
        self.n += 1
        if len(self.buf) >= 20000:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            self.f.write(b"\n".join(self.buf) + b"\n")
            self.buf = []

    def close(self) -> None:
        self.flush()
        self.f.close()


def _file(task: tuple[int, int, argparse.Namespace]) -> int:
    idx, n_events, a = task
    rng = random.Random(a.seed * 1000 + idx)
    gz = a.gzip and idx < a.files - 1
    w = Writer(Path(a.out) / f"broker-{idx:04d}.jsonl", gz, a.format)
    w.due = a.due
    topics = [f"Topic{t}" for t in range(a.topics)]
    groups = [f"group{g}" for g in range(a.groups)]
    t0 = a.start_ms + idx * (n_events / EVENTS_PER_MSG) / a.rate * 1000
    seq, off = 0, 0
    while w.n < n_events:
        born = t0 + seq / a.rate * 1000
        mid = f"{idx:04X}{seq:020X}"
        seq += 1
        off += 1
        topic = rng.choice(topics)
        base = dict(
            msg_id=mid, offset_msg_id=f"0A000001{off:016X}", queue_offset=off, phy_offset=off * 300
        )
        store = born + rng.uniform(0.2, 2.0)
        if rng.random() < a.delayed:
            level = min(18, int(rng.expovariate(0.35)) + 1)
            _delay(w, rng, base, store, level, topic, 0)
            visible = w.last_deliver
        else:
            w.emit(
                store,
                "message.stored",
                "store",
                topic=topic,
                queue_id=off % 4,
                size=300,
                store_ts=int(store),
                born_ts=int(born),
                tags="TagA",
                keys=f"k{seq}",
                reconsume_times=0,
                producer_group="pg",
                **base,
            )
            visible = store
        for g in groups:
            _consume(w, rng, a, base, mid, topic, g, int(born), int(store), visible)
    w.close()
    return w.n


def _delay(
    w: Writer, rng: random.Random, base: dict, store: float, level: int, topic: str, rt: int
) -> None:
    deliver = store + LEVELS_MS[level - 1]
    lag = rng.expovariate(1 / 0.8)
    late = lag + rng.expovariate(1 / 1.5) + (rng.uniform(50, 400) if rng.random() < 1e-3 else 0)
    w.emit(
        store,
        "message.scheduled",
        "schedule",
        real_topic=topic,
        real_queue_id=0,
        delay_level=level,
        store_ts=int(store),
        deliver_ts=int(deliver),
        reconsume_times=rt,
        tags="TagA",
        **base,
    )
    if w.due:  # debug level: only with the broker's --log-level debug
        w.emit(
            deliver + lag,
            "message.due",
            "schedule",
            msg_id=base["msg_id"],
            delay_level=level,
            queue_offset=base["queue_offset"],
            deliver_ts=int(deliver),
            wake_lag_ms=round(lag, 3),
        )
    w.emit(
        deliver + late,
        "message.delivered",
        "schedule",
        topic=topic,
        queue_id=0,
        delay_level=level,
        deliver_ts=int(deliver),
        lateness_ms=round(late, 3),
        reconsume_times=rt,
        msg_id=base["msg_id"],
        queue_offset=base["queue_offset"],
        phy_offset=base["phy_offset"],
    )
    w.last_deliver = deliver + late


def _consume(
    w: Writer,
    rng: random.Random,
    a: argparse.Namespace,
    base: dict,
    mid: str,
    topic: str,
    group: str,
    born: int,
    store: int,
    visible: float,
) -> None:
    rt, cur_topic = 0, topic
    while True:
        t = visible + rng.expovariate(1 / 3.0)
        w.emit(
            t,
            "message.pulled",
            "pull",
            msg_id=mid,
            group=group,
            topic=cur_topic,
            queue_id=0,
            queue_offset=base["queue_offset"],
            store_ts=store,
            born_ts=born,
            reconsume_times=rt,
        )
        if rng.random() >= a.fail:
            return
        if rt >= a.max_reconsume:
            w.emit(
                t + 5,
                "message.dead_lettered",
                "retry",
                msg_id=mid,
                group=group,
                topic=f"%DLQ%{group}",
                origin_topic=topic,
                origin_msg_id=mid,
                reconsume_times=rt,
            )
            return
        rt += 1
        cur_topic = f"%RETRY%{group}"
        w.emit(
            t + 5,
            "message.redelivered",
            "retry",
            msg_id=mid,
            group=group,
            topic=cur_topic,
            origin_topic=topic,
            origin_msg_id=mid,
            reconsume_times=rt,
            delay_level=2 + rt,
        )
        _delay(w, rng, base, t + 6, min(18, 2 + rt), cur_topic, rt)
        visible = w.last_deliver


def replicate(src: Path, out: Path, copies: int) -> int:
    """Write the uncompressed ``*.jsonl`` files of ``src`` ``copies`` times into ``out``; copy
    ``c`` renames every ``msg_id`` whose first two hex digits are ``00`` (the generator's
    file index, below 256 files) to ``c``: distinct messages with the same mix and times, at
    disk speed instead of the generator's. Returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = 0
    for c in range(copies):
        tag = f'msg_id":"{c:02X}'.encode()
        for f in sorted(src.glob("broker-*.jsonl")):
            with open(f, "rb") as fi, open(out / f"broker-c{c:02d}-{f.name[7:]}", "wb") as fo:
                rest = b""
                while chunk := fi.read(64 << 20):
                    chunk = rest + chunk
                    nl = chunk.rfind(b"\n") + 1
                    fo.write(chunk[:nl].replace(b'msg_id":"00', tag))
                    rest = chunk[nl:]
                fo.write(rest.replace(b'msg_id":"00', tag))
            written += 1
    return written


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--out", required=True)
    p.add_argument("--files", type=int, default=0, help="default: one per million events")
    p.add_argument("--jobs", type=int, default=multiprocessing.cpu_count())
    p.add_argument("--gzip", action="store_true", help="gzip all files but the last")
    p.add_argument("--topics", type=int, default=4)
    p.add_argument("--groups", type=int, default=1)
    p.add_argument("--delayed", type=float, default=0.5, help="fraction of delayed sends")
    p.add_argument("--fail", type=float, default=0.1, help="chance a consume attempt fails")
    p.add_argument("--max-reconsume", type=int, default=3)
    p.add_argument("--rate", type=float, default=2000.0, help="sends per second")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--due",
        action="store_true",
        help="also write message.due (debug level; the broker logs it only with --log-level debug)",
    )
    p.add_argument(
        "--format",
        type=int,
        choices=(1, 2),
        default=2,
        help="log line format: 2 (current broker) or 1 (before the lean format)",
    )
    p.add_argument(
        "--replicate",
        metavar="SRC",
        default=None,
        help="instead of generating: copy SRC's files --copies times with distinct "
        "msg_ids (e.g. 100M events from a 10M set)",
    )
    p.add_argument("--copies", type=int, default=10)
    a = p.parse_args(argv)
    if a.replicate:
        t = time.perf_counter()
        n = replicate(Path(a.replicate), Path(a.out), a.copies)
        print(f"{n} file(s) under {a.out} ({time.perf_counter() - t:.1f} s)")
        return
    a.files = a.files or max(1, math.ceil(a.events / 1_000_000))
    a.start_ms = 1_767_225_600_000.0  # 2026-01-01T00:00:00Z
    Path(a.out).mkdir(parents=True, exist_ok=True)
    per = [a.events // a.files + (i < a.events % a.files) for i in range(a.files)]
    t = time.perf_counter()
    with multiprocessing.Pool(max(1, min(a.jobs, a.files))) as pool:
        total = sum(pool.map(_file, [(i, n, a) for i, n in enumerate(per)]))
    print(f"{total:,} events in {a.files} file(s) under {a.out} ({time.perf_counter() - t:.1f} s)")


if __name__ == "__main__":
    main()
