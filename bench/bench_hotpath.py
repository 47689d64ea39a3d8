"""CPU µs per operation of the broker's per-message steps, old way against new (issue 12).

Each figure is the best of several timed loops of process CPU time (``time.process_time``),
so other processes on the box inflate it far less than wall-clock rates:

* ``frame decode``: one inbound SEND_MESSAGE_V2 frame (1 KiB body) through
  ``codec.decode_payload`` - the envelope and binary header parsed by the compiled
  construct declarations after the lengths are validated - against the hand-written
  ``struct`` reader it replaced (kept below, only as the measuring stick);
* ``re-put``: one due schedule record moved to its real topic in a real store:
  decode -> MessageInner -> encode (``restore_delayed`` + ``MessageStore.put``) against
  the byte patch (``restore_delayed_view`` + ``MessageStore.put_patched``);
* ``log event``: one ``message.delivered`` line through ``MessageLog`` into a file sink.

    .venv/bin/python bench/bench_hotpath.py
"""

from __future__ import annotations

import asyncio
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from kairosmq.protocol import codec
from kairosmq.protocol.codes import LanguageCode, SerializeType
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.errors import MalformedFrame
from kairosmq.protocol.properties import (
    DELAY,
    DELIVER_TIME,
    REAL_QID,
    REAL_TOPIC,
    TAGS,
    UNIQ_KEY,
)
from kairosmq.server.observe.logs import MessageLog, close_sinks, configure_logging
from kairosmq.server.schedule.reput import restore_delayed, restore_delayed_view
from kairosmq.server.store import MessageInner, MessageStore

_U32 = struct.Struct(">I")
_BIN_FIXED = struct.Struct(">hBhii")


def best_us(fn: Callable[[], object], n: int = 2000, repeat: int = 7) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, (time.process_time() - t0) / n * 1e6)
    return best


# ------------------------------------------------------------------ the replaced reader


def struct_decode_payload(payload: bytes) -> RemotingCommand:
    """The struct envelope + binary-header reader that codec.py had before construct ran
    at runtime (the measuring stick; JSON headers went to the same orjson path)."""
    (word,) = _U32.unpack_from(payload, 0)
    stype, hlen = word >> 24, word & 0xFFFFFF
    if hlen > len(payload) - 4:
        raise MalformedFrame("header length exceeds the frame")
    raw, body = bytes(payload[4 : 4 + hlen]), bytes(payload[4 + hlen :])
    if stype == SerializeType.JSON:
        return codec._decode_json_header(raw, body)
    n = len(raw)
    code, lang, version, opaque, flag = _BIN_FIXED.unpack_from(raw, 0)
    pos = _BIN_FIXED.size
    (rlen,) = _U32.unpack_from(raw, pos)
    pos += 4
    remark = raw[pos : pos + rlen].decode() if rlen else None
    pos += rlen
    (elen,) = _U32.unpack_from(raw, pos)
    pos += 4
    end = pos + elen
    if end != n:
        raise MalformedFrame("extFields length")
    fields: dict[str, str] = {}
    while pos < end:
        kstart = pos + 2
        kend = kstart + ((raw[pos] << 8) | raw[pos + 1])
        vstart = kend + 4
        vend = vstart + int.from_bytes(raw[kend:vstart], "big")
        if vend > end:
            raise MalformedFrame("truncated extFields value")
        fields[raw[kstart:kend].decode()] = raw[vstart:vend].decode()
        pos = vend
    return RemotingCommand(
        code=code,
        opaque=opaque,
        flag=flag,
        language=LanguageCode(lang),
        version=version,
        remark=remark,
        ext_fields=fields,
        body=body,
        serialize_type=SerializeType.ROCKETMQ,
    )


def send_frame(stype: SerializeType) -> bytes:
    ext = {
        "producerGroup": "bench_pg",
        "topic": "bench_topic",
        "defaultTopic": "TBW102",
        "defaultTopicQueueNums": "4",
        "queueId": "2",
        "sysFlag": "0",
        "bornTimestamp": "1700000000000",
        "flag": "0",
        "properties": "UNIQ_KEY\x017F000001ABCD0000000000000001\x02DELAY\x011\x02WAIT\x01true",
        "reconsumeTimes": "0",
        "unitMode": "false",
        "batch": "false",
    }
    short = {
        "a": ext["producerGroup"],
        "b": ext["topic"],
        "c": ext["defaultTopic"],
        "d": "4",
        "e": "2",
        "f": "0",
        "g": ext["bornTimestamp"],
        "h": "0",
        "i": ext["properties"],
        "j": "0",
        "k": "false",
        "m": "false",
    }
    cmd = RemotingCommand(
        code=310, opaque=12345, ext_fields=short, body=b"x" * 1024, serialize_type=stype
    )
    return codec.encode_command(cmd)[4:]


# ------------------------------------------------------------------ re-put


def reput_figures(tmp: Path) -> tuple[float, float]:
    async def run() -> tuple[float, float]:
        stores = {}
        for name in ("object", "patch"):
            s = MessageStore(
                tmp / name,
                store_host=(b"\x7f\0\0\1", 10911),
                segment_size=1 << 30,
                units_per_file=300_000,
            )
            s.open()
            stores[name] = s
        sched = MessageInner(
            topic="SCHEDULE_TOPIC_XXXX",
            queue_id=0,
            body=b"x" * 1024,
            properties={
                UNIQ_KEY: "7F000001ABCD0000000000000001",
                TAGS: "t",
                DELAY: "1",
                REAL_TOPIC: "bench_topic",
                REAL_QID: "2",
                DELIVER_TIME: "1700000001000",
                "CLUSTER": "DefaultCluster",
            },
            born_host=(b"\x7f\0\0\1", 50000),
            born_timestamp=1_700_000_000_000,
        )
        r = stores["object"].put(sched)
        record = stores["object"].read(r.phy_offset, r.size)
        assert record is not None
        obj, patch = stores["object"], stores["patch"]

        def by_object() -> None:
            obj.put(restore_delayed(record, 1, 0))

        def by_patch() -> None:
            view, topic, qid, props = restore_delayed_view(record, 1, 0)
            patch.put_patched(record, view, topic, qid, props)

        figures = []
        for fn, s in ((by_object, obj), (by_patch, patch)):
            best = float("inf")
            for _ in range(7):
                t0 = time.process_time()
                for _ in range(500):
                    fn()
                best = min(best, (time.process_time() - t0) / 500 * 1e6)
                s.write_out()
            figures.append(best)
        for s in stores.values():
            s.close()
        return figures[0], figures[1]

    return asyncio.run(run())


def log_figure(tmp: Path) -> float:
    configure_logging(json=True, log_dir=tmp / "logs", stdout=False)
    log = MessageLog("broker")
    try:
        return best_us(
            lambda: log.info(
                "message.delivered",
                msg_id="7F000001ABCD0000000000000001",
                topic="bench_topic",
                queue_id=2,
                queue_offset=12345,
                phy_offset=987654321,
                delay_level=1,
                deliver_ts=1_700_000_001_000,
                lateness_ms=1.234,
                reconsume_times=0,
            )
        )
    finally:
        close_sinks()


def main() -> None:
    print("CPU µs per operation (best of 7 loops of process time)")
    for stype in (SerializeType.JSON, SerializeType.ROCKETMQ):
        payload = send_frame(stype)
        assert struct_decode_payload(payload).ext_fields == codec.decode_payload(payload).ext_fields
        old = best_us(lambda p=payload: struct_decode_payload(p))
        new = best_us(lambda p=payload: codec.decode_payload(p))
        print(
            f"frame decode ({stype.name} header): struct {old:6.2f}  construct {new:6.2f}"
            f"  (+{new - old:.2f} µs/frame)"
        )
    with tempfile.TemporaryDirectory() as d:
        old, new = reput_figures(Path(d))
        print(
            f"re-put (1 KiB):                  object {old:6.2f}  patch     {new:6.2f}"
            f"  ({new - old:+.2f} µs/message)"
        )
        print(f"log event message.delivered:     {log_figure(Path(d)):6.2f}")


if __name__ == "__main__":
    main()
