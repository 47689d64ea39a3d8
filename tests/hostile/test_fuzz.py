"""A bounded fuzz run: >= 50,000 mutated frames from the golden captures against a real
broker process, while a good client sends and pulls without a single error.

Mutations (seeded; ``KAIROS_FUZZ_SEED`` overrides the default, the seed is printed):
* framing-preserving (most frames): the JSON header parsed and mutated (request code,
  flag, ext-field values replaced by hostile strings and numbers, fields dropped or
  added, hostile properties), sometimes re-encoded as a binary (ROCKETMQ) header; JSON
  bodies (heartbeats, lock batches) with a value replaced or a list multiplied; body bit
  flips. Lengths are recomputed, so the broker decodes and answers each one.
* raw (the last frame of some connections): bit flips anywhere, truncation, length-field
  and header-length-word edits, an unknown serialize type, or a header whose fields have
  the wrong JSON types (extFields not an object, code not an int32).

Each fuzz connection writes its frames, half-closes, reads every answer until the broker
closes, and is replaced by a new one. At the end the broker is alive, every acked good
message is served exactly once, and after ``kill -9`` and restart it is again
(tests/hostile/harness.py).
"""

from __future__ import annotations

import asyncio
import os
import random
import struct
import time

import orjson
import pytest
from kairosmq.protocol.codec import FrameReader
from kairosmq.protocol.codes import RequestCode, ResponseCode

from tests.helpers import pull
from tests.hostile.harness import HostileBroker, check_served, drain, verify_after_kill9
from tests.protocol.captures import frame_bytes, request_entries

pytestmark = pytest.mark.slow

FRAMES = 50_000
BUDGET_S = 55.0
WORKERS = 12
SEED = int(os.environ.get("KAIROS_FUZZ_SEED", "20261122"))

GOLDEN = [frame_bytes(folder, e["file"]) for folder, e in request_entries()]
CODES = [int(c) for c in RequestCode] + [0, -1, 9999, 65535, 1 << 31]
HOSTILE_STRINGS = [
    "",
    "-1",
    "0",
    "99999999999999999999",
    "-9223372036854775808",
    "9223372036854775808",
    "1e9",
    "NaN",
    "true",
    "x" * 300,
    "%RETRY%G",
    "%DLQ%G",
    "SCHEDULE_TOPIC_XXXX",
    "TBW102",
    "../../etc",
    "/abs",
    "a\x00b",
    "abc\n",
    "\u00b2",
    "\ud7ff",
    "ä" * 50,
    "*",
    "||",
    "KAIROS_SCHEDULE_ORIGIN\x01x",
    "DELAY\x01999",
    "TIMER_DELAY_MS\x011000",
    "UNIQ_KEY\x01\x02\x01",
    "REAL_TOPIC\x01SCHEDULE_TOPIC_XXXX\x02REAL_QID\x01-3",
]
HOSTILE_VALUES: list[object] = [None, True, 1.5, -1, 1 << 40, [], {}, ["x"], {"a": 1}]


def _split(frame: bytes) -> tuple[dict[str, object], bytes]:
    (hlen,) = struct.unpack_from(">I", frame, 4)
    return orjson.loads(frame[8 : 8 + (hlen & 0xFFFFFF)]), frame[8 + (hlen & 0xFFFFFF) :]


def _binary_header(h: dict[str, object]) -> bytes:
    def i(v: object, fmt: str) -> bytes:
        try:
            return struct.pack(fmt, int(v))  # type: ignore[call-overload]
        except (TypeError, ValueError, OverflowError, struct.error):
            return struct.pack(fmt, 0)

    ext = h.get("extFields") if isinstance(h.get("extFields"), dict) else {}
    parts = []
    for k, v in ext.items():  # type: ignore[union-attr]
        kb, vb = str(k).encode(errors="replace"), str(v).encode(errors="replace")
        parts.append(struct.pack(">H", len(kb) & 0xFFFF) + kb + struct.pack(">I", len(vb)) + vb)
    extb = b"".join(parts)
    remark = str(h.get("remark") or "").encode(errors="replace")
    return (
        i(h.get("code"), ">h")
        + bytes((random.randrange(16),))
        + i(h.get("version"), ">h")
        + i(h.get("opaque"), ">i")
        + i(h.get("flag"), ">i")
        + struct.pack(">I", len(remark))
        + remark
        + struct.pack(">I", len(extb))
        + extb
    )


class Mutator:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.parsed = [_split(f) for f in GOLDEN]

    def value(self, fatal: bool = False) -> object:
        """A hostile ext-field value: a string (decodes), or any JSON value (``fatal``:
        the decoder may refuse the frame and close the connection)."""
        r = self.rng.random()
        if fatal and r < 0.4:
            return self.rng.choice(HOSTILE_VALUES)
        if r < 0.75:
            return self.rng.choice(HOSTILE_STRINGS)
        return str(self.rng.randint(-(1 << 64), 1 << 64))

    def json_body(self, doc: object, depth: int = 0) -> object:
        """A JSON body (heartbeat, locks...) with one value somewhere replaced."""
        rng = self.rng
        if isinstance(doc, dict) and doc and depth < 6 and rng.random() < 0.8:
            k = rng.choice(list(doc))
            return {**doc, k: self.json_body(doc[k], depth + 1)}
        if isinstance(doc, list) and doc and depth < 6 and rng.random() < 0.8:
            i = rng.randrange(len(doc))
            return doc[:i] + [self.json_body(doc[i], depth + 1)] + doc[i + 1 :]
        if isinstance(doc, list) and rng.random() < 0.3:
            return doc * rng.randint(2, 50)  # more groups/subscriptions than usual
        return rng.choice(HOSTILE_VALUES + HOSTILE_STRINGS)

    def preserving(self, opaque: int, fatal: bool = False) -> bytes:
        """A frame whose lengths are right; unless ``fatal``, one the broker decodes and
        answers (or, oneway, handles silently) without closing the connection."""
        rng = self.rng
        header, body = rng.choice(self.parsed)
        h = dict(header)
        ext = dict(h["extFields"]) if isinstance(h.get("extFields"), dict) else {}
        h["opaque"] = opaque
        for _ in range(rng.randint(1, 4)):
            op = rng.random()
            if op < 0.45 and ext:
                ext[rng.choice(list(ext))] = self.value(fatal)
            elif op < 0.55 and ext:
                del ext[rng.choice(list(ext))]
            elif op < 0.7:
                ext[
                    rng.choice(
                        [
                            "sysFlag",
                            "f",
                            "queueId",
                            "e",
                            "commitOffset",
                            "offset",
                            "group",
                            "topic",
                            "b",
                            "properties",
                            "i",
                            "delayLevel",
                            "maxMsgNums",
                            "suspendTimeoutMillis",
                            "batch",
                            "m",
                            "j",
                            "l",
                            "consumerGroup",
                            "queueOffset",
                        ]
                    )
                ] = self.value(fatal)
            elif op < 0.8:
                h["code"] = rng.choice(CODES[:-1])
            elif op < 0.85:
                h["flag"] = rng.choice([0, 2, 1, 3])  # oneway, and "responses"
            elif op < 0.9:
                h[rng.choice(["language", "remark", "serializeTypeCurrentRPC"])] = self.value(fatal)
            elif op < 0.95 and body[:1] == b"{":
                try:
                    body = orjson.dumps(self.json_body(orjson.loads(body)))
                except orjson.JSONDecodeError:  # fastjson's relaxed JSON: leave it
                    pass
            elif body:
                b = bytearray(body)
                for _ in range(rng.randint(1, 8)):
                    b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
                body = bytes(b)
        h["extFields"] = ext
        if fatal:
            key = rng.choice(["extFields", "code", "flag", "opaque", "version"])
            h[key] = rng.choice(HOSTILE_VALUES + [1 << 33, "x"])
        if rng.random() < 0.15:
            hb, stype = _binary_header(h), 1
        else:
            hb, stype = orjson.dumps(h), 0
        return struct.pack(">II", 4 + len(hb) + len(body), (stype << 24) | len(hb)) + hb + body

    def raw(self, opaque: int) -> bytes:
        rng = self.rng
        frame = bytearray(self.preserving(opaque) if rng.random() < 0.5 else rng.choice(GOLDEN))
        op = rng.random()
        if op < 0.2:
            return self.preserving(opaque, fatal=True)
        if op < 0.35:
            for _ in range(rng.randint(1, 8)):
                frame[rng.randrange(len(frame))] ^= 1 << rng.randrange(8)
        elif op < 0.55:
            del frame[rng.randrange(len(frame)) :]
        elif op < 0.75:
            delta = rng.choice([-8, -4, -1, 1, 4, 1 << 20, 1 << 24, 1 << 31])
            struct.pack_into(">I", frame, 0, (len(frame) - 4 + delta) % (1 << 32))
        elif op < 0.9:
            struct.pack_into(">I", frame, 4, rng.getrandbits(32))
        else:
            frame[4] = rng.choice([2, 7, 0x80, 0xFF])
        return bytes(frame)


async def _fuzz_connection(address: str, frames: list[bytes], answered: list[int]) -> None:
    """Write ``frames``, half-close, count the broker's answers until it closes."""
    host, port = address.rsplit(":", 1)
    try:
        reader, writer = await asyncio.open_connection(host, int(port))
    except OSError:
        return
    got = FrameReader()
    try:
        writer.write(b"".join(frames))
        await writer.drain()
        writer.write_eof()
        while data := await asyncio.wait_for(reader.read(65536), 5.0):
            got.feed(data)
            answered[0] += sum(1 for _ in got)
    except (OSError, TimeoutError):
        pass
    finally:
        writer.close()


async def _fuzzer(
    address: str, mut: Mutator, quota: list[int], answered: list[int], deadline: float
) -> None:
    opaque = 1 << 20
    while quota[0] < FRAMES and time.monotonic() < deadline:
        n = mut.rng.randint(40, 160)
        frames = []
        for _ in range(n):
            opaque += 1
            frames.append(mut.preserving(opaque))
        if mut.rng.random() < 0.6:
            frames.append(mut.raw(opaque + 1))
        quota[0] += len(frames)
        await _fuzz_connection(address, frames, answered)


async def _good_client(hb: HostileBroker, stop: asyncio.Event, errors: list[str]) -> None:
    peer = await hb.connect()
    offsets = dict.fromkeys(range(4), 0)
    i = 0
    while not stop.is_set():
        i += 1
        try:
            await asyncio.gather(
                *(
                    hb.good_send(
                        peer,
                        "FuzzGood",
                        delay_level=(j % 3) + 1 if j % 7 == 0 else 0,
                        tag="fuzzgood",
                    )
                    for j in range(4 * i, 4 * i + 4)
                )
            )
            if i % 5 == 0:
                q = i % 4
                r = await pull(
                    peer,
                    "FuzzGood",
                    queue_id=q,
                    offset=offsets[q],
                    group="FuzzGoodGroup",
                    suspend_ms=0,
                )
                if r.code == ResponseCode.SUCCESS:
                    offsets[q] = int(r.ext_fields["nextBeginOffset"])
                elif r.code != ResponseCode.PULL_NOT_FOUND:
                    errors.append(f"pull answered {r.code}: {r.remark}")
        except (AssertionError, ConnectionError, TimeoutError) as err:
            errors.append(f"good client: {err!r}")
            return


async def test_fuzz_50k_mutated_frames_while_a_good_client_works(hostile, capsys) -> None:
    with capsys.disabled():
        print(f"\nkairosmq fuzz seed: {SEED} (set KAIROS_FUZZ_SEED to replay)")
    hb = await hostile()
    rng = random.Random(SEED)
    stop, errors, quota, answered = asyncio.Event(), [], [0], [0]
    good = asyncio.ensure_future(_good_client(hb, stop, errors))
    t0 = time.monotonic()
    deadline = t0 + BUDGET_S
    await asyncio.gather(
        *(
            _fuzzer(hb.address, Mutator(random.Random(rng.random())), quota, answered, deadline)
            for _ in range(WORKERS)
        )
    )
    elapsed = time.monotonic() - t0
    stop.set()
    await good
    with capsys.disabled():
        print(
            f"kairosmq fuzz: {quota[0]} frames in {elapsed:.1f} s, {answered[0]} answered, "
            f"{len(hb.ledger.acked)} good messages acked"
        )
    assert not errors, errors[:5]
    assert quota[0] >= FRAMES, f"only {quota[0]} frames within {BUDGET_S} s"
    assert len(hb.ledger.acked) > 100, "the good client hardly got through"
    # alive and serving every acked good message
    peer = hb.peers[0]
    r = await peer.call(RequestCode.KAIROS_GET_BROKER_STATUS, {})
    assert r.code == ResponseCode.SUCCESS
    await asyncio.sleep(0.5)  # the last delayed ones (levels 1-3) come due
    # fuzzed CONSUMER_SEND_MSG_BACK (offset "0" is a good message) plus a fuzzed DLQ
    # resend legitimately copy good messages back into FuzzGood: copies are not counted
    check_served(hb.ledger, {"FuzzGood": await drain(peer, "FuzzGood")}, copies_allowed=True)
    await verify_after_kill9(hb, offsets=False, copies_allowed=True)
