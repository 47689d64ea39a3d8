"""The one restart-and-verify check every hostile test ends with.

Owns: ``HostileBroker`` (a real ``kairosmq broker`` process plus a ledger of every message
it acknowledged) and ``verify_after_kill9`` (SIGKILL, restart on the same data, then check
that each acked message is served exactly once, with its body, delayed ones not early,
that the broker takes new sends, and that a bystander group's offsets survived).

Invariants the check enforces (issue 10, "acked means stored"):
* Every SUCCESS answer to a send is a promise: the message is in the ledger and must be
  pulled back exactly once after ``kill -9`` and restart, with the same body.
* A delayed message is pulled from its real topic with a store time no earlier than its
  send time plus its level's delay (never early), and it is delivered after the restart.
* Bodies of refused requests never show up anywhere.
* A bystander group's offsets, once the broker wrote them to disk, come back unchanged.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kairosmq.protocol.codes import RequestCode, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.message import MessageExt, decode_records
from kairosmq.server.schedule.delay.levels import parse_delay_levels

from tests.helpers import FAST_LEVELS, pull, send
from tests.integration.procs import BrokerProcess
from tests.wire import RawPeer

LEVEL_MS = dict(enumerate(parse_delay_levels(FAST_LEVELS), start=1))
BYSTANDER_GROUP = "HostileBystander"
BYSTANDER_TOPIC = "HostileKeep"
BYSTANDER_OFFSETS = {0: 1, 1: 2, 2: 3, 3: 2}
QUEUES = 4
# the broker writes offsets with each checkpoint; the suite runs it every 0.3 s
CHECKPOINT_INTERVAL = "0.3"
OFFSETS_PERSIST_TIMEOUT = 4.0


@dataclass
class Acked:
    key: str
    topic: str
    queue_id: int
    body: bytes
    delay_ms: int
    sent_ms: int  # wall clock before the send went out (a lower bound of its store time)
    msg_id: str = ""  # the broker's offset msg id (commit-log offset inside)


@dataclass
class Ledger:
    acked: dict[str, Acked] = field(default_factory=dict)
    refused_bodies: set[bytes] = field(default_factory=set)
    watch: set[str] = field(default_factory=set)  # topics a refused body could land in

    def topics(self) -> set[str]:
        return {a.topic for a in self.acked.values()} | self.watch


def now_ms() -> int:
    return int(time.time() * 1000) - 1


def is_error(r: RemotingCommand) -> bool:
    """A refusal the way a RocketMQ client sees it: a non-success code and a remark."""
    return r.code != ResponseCode.SUCCESS and bool(r.remark)


def describe(r: RemotingCommand) -> str:
    return f"code={r.code} remark={r.remark!r}"


class HostileBroker:
    """One broker process on ``data_dir`` and the ledger of what it acknowledged."""

    def __init__(self, data_dir: Path, *extra: str, nofile: int | None = None) -> None:
        # Small segments: segments are allocated for real (no sparse files), and the
        # default 1 GiB per broker would fill a shared CI disk. The free-space watermark
        # is not under test here: a disk filled by other jobs must not refuse these sends.
        # ``nofile``: the open-file limit of the process, restarts included.
        self.proc = BrokerProcess(
            data_dir,
            "--checkpoint-interval",
            CHECKPOINT_INTERVAL,
            "--segment-size-mb",
            "16",
            "--disk-max-used-ratio",
            "0.995",
            *extra,
            nofile=nofile,
        )
        self.ledger = Ledger()
        self.bystander_offsets = dict(BYSTANDER_OFFSETS)
        self.peers: list[RawPeer] = []
        self._seq = itertools.count()

    @property
    def address(self) -> str:
        return self.proc.address

    async def start(self) -> None:
        await self.proc.start()

    async def connect(self) -> RawPeer:
        peer = await RawPeer.connect(self.proc.address)
        self.peers.append(peer)
        return peer

    async def close_peers(self) -> None:
        for p in self.peers:
            await p.close()
        self.peers.clear()

    def stop_process(self) -> None:
        """Kill the process if it is still running (test teardown)."""
        p = self.proc.proc
        if p is not None and p.poll() is None:
            self.proc.kill()

    def graceful_stop(self) -> None:
        """SIGTERM after the hostile traffic: the broker must exit 0 within 20 s."""
        p = self.proc.proc
        assert p is not None and p.poll() is None, "the broker is not running"
        try:
            rc = self.proc.terminate()
        except Exception:  # noqa: BLE001 - a hang is the failure reported
            self.proc.kill()
            raise AssertionError("the broker did not stop within 20 s of SIGTERM") from None
        assert rc == 0, f"the broker exited with {rc} on SIGTERM"

    # ------------------------------------------------------------ sends

    async def good_send(
        self,
        peer: RawPeer,
        topic: str,
        *,
        delay_level: int = 0,
        queue_id: int | None = None,
        tag: str = "good",
    ) -> Acked:
        """An ordinary send that must be acked; it joins the ledger."""
        n = next(self._seq)
        key = f"HK{n:06d}{tag}"
        qid = n % QUEUES if queue_id is None else queue_id
        props = {"UNIQ_KEY": key}
        if delay_level:
            props["DELAY"] = str(delay_level)
        body = f"{tag}-{n}-{topic}".encode()
        sent = now_ms()
        r = await send(peer, topic, body, props, queue_id=qid)
        assert r.code == ResponseCode.SUCCESS, f"good send refused: {describe(r)}"
        a = Acked(
            key, topic, qid, body, LEVEL_MS.get(delay_level, 0), sent, r.ext_fields.get("msgId", "")
        )
        self.ledger.acked[key] = a
        return a

    async def good_sends(
        self, peer: RawPeer, topic: str, n: int, *, delay_level: int = 0, tag: str = "good"
    ) -> list[Acked]:
        return [
            await self.good_send(peer, topic, delay_level=delay_level, tag=tag) for _ in range(n)
        ]

    def record_outcome(
        self,
        r: RemotingCommand,
        topic: str,
        body: bytes,
        key: str,
        queue_id: int,
        delay_ms: int,
        sent_ms: int,
    ) -> bool:
        """Book a hostile send's answer: acked joins the ledger (it must then be served
        like any other), refused must carry a remark and its body must never appear."""
        if r.code == ResponseCode.SUCCESS:
            self.ledger.acked[key] = Acked(key, topic, queue_id, body, delay_ms, sent_ms)
            return True
        assert r.remark, f"a refusal must say why: {describe(r)}"
        self.ledger.refused_bodies.add(body)
        return False

    # ------------------------------------------------------------ bystander offsets

    async def setup_bystander(self, peer: RawPeer) -> None:
        """Messages on every queue of the bystander topic and committed offsets for a
        bystander group: after the restart both must be intact."""
        for q in range(QUEUES):
            for _ in range(3):
                await self.good_send(peer, BYSTANDER_TOPIC, queue_id=q, tag="keep")
        await self.commit_bystander(peer)

    async def commit_bystander(self, peer: RawPeer) -> None:
        for q, off in self.bystander_offsets.items():
            r = await peer.call(
                RequestCode.UPDATE_CONSUMER_OFFSET,
                {
                    "consumerGroup": BYSTANDER_GROUP,
                    "topic": BYSTANDER_TOPIC,
                    "queueId": q,
                    "commitOffset": off,
                },
            )
            assert r.code == ResponseCode.SUCCESS, describe(r)

    def persisted_offsets(self) -> dict[int, int] | None:
        path = self.proc.data_dir / "config" / "consumerOffset.json"
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        qs = raw.get(BYSTANDER_GROUP, {}).get(BYSTANDER_TOPIC)
        return {int(q): int(o) for q, o in qs.items()} if qs else None

    async def wait_bystander_persisted(self) -> None:
        deadline = time.monotonic() + OFFSETS_PERSIST_TIMEOUT
        while time.monotonic() < deadline:
            if self.persisted_offsets() == self.bystander_offsets:
                return
            await asyncio.sleep(0.1)
        raise AssertionError(
            f"the broker never wrote the bystander group's offsets to disk within "
            f"{OFFSETS_PERSIST_TIMEOUT} s (file has {self.persisted_offsets()})"
        )


async def drain(peer: RawPeer, topic: str, group: str = "HostileVerifier") -> list[MessageExt]:
    """Every message of every queue of ``topic`` from offset 0 (no long polling)."""
    out: list[MessageExt] = []
    for q in range(QUEUES):
        off = 0
        while True:
            r = await pull(peer, topic, queue_id=q, offset=off, group=group, max_n=32)
            if r.code != ResponseCode.SUCCESS:
                break
            msgs = decode_records(r.body)
            nxt = int(r.ext_fields["nextBeginOffset"])
            out += msgs
            if nxt <= off:
                break
            off = nxt
    return out


def check_served(
    ledger: Ledger, served: dict[str, list[MessageExt]], *, copies_allowed: bool = False
) -> None:
    """Each acked message exactly once with its body (delayed ones not early), and no
    refused body anywhere.

    ``copies_allowed``: the traffic included requests that legitimately copy a stored
    message back into its topic (CONSUMER_SEND_MSG_BACK at its offset, then a DLQ
    resend: the fuzz run sends both); such copies carry ``ORIGIN_MESSAGE_ID`` and are
    not counted, the original must still be served exactly once.
    """
    counts: Counter[str] = Counter()
    by_key: dict[str, MessageExt] = {}
    for msgs in served.values():
        for m in msgs:
            if copies_allowed and "ORIGIN_MESSAGE_ID" in m.properties:
                continue
            assert m.body not in ledger.refused_bodies, (
                f"a refused request's body was stored and served: {m.body[:60]!r} in {m.topic}"
            )
            k = m.properties.get("UNIQ_KEY", "")
            if k in ledger.acked:
                counts[k] += 1
                by_key[k] = m
    lost = [k for k in ledger.acked if counts[k] == 0]
    dup = [k for k, c in counts.items() if c > 1]
    assert not lost, f"{len(lost)} acked messages lost after kill -9, e.g. {lost[:5]}"
    if dup:
        copies = [
            (m.topic, m.queue_offset, m.commit_log_offset, m.properties)
            for ms in served.values()
            for m in ms
            if m.properties.get("UNIQ_KEY") in dup[:2]
        ]
        raise AssertionError(f"acked messages served twice: {dup[:5]}: {copies}")
    for k, a in ledger.acked.items():
        m = by_key[k]
        assert m.topic == a.topic and m.body == a.body, f"{k} came back altered: {m}"
        if a.delay_ms:
            assert m.store_timestamp >= a.sent_ms + a.delay_ms, (
                f"{k} delivered early: stored {m.store_timestamp}, due no earlier than "
                f"{a.sent_ms + a.delay_ms}"
            )


async def verify_after_kill9(
    hb: HostileBroker,
    *,
    offsets: bool = True,
    before_kill: Callable[[RawPeer], Awaitable[None]] | None = None,
    copies_allowed: bool = False,
) -> RawPeer:
    """SIGKILL, restart on the same data, and check the ledger (module docstring).

    ``offsets``: the bystander group was set up; wait until its offsets are on disk before
    the kill, then expect them back. ``before_kill`` runs right before the kill (after the
    offsets are on disk), e.g. delayed hostile sends that must still be pending at the
    kill; then three delayed good sends (levels 16-18) are made, so every test restarts
    with delayed messages pending. ``copies_allowed``: see ``check_served``. Returns a
    connected peer to the restarted broker.
    """
    if offsets:
        await hb.wait_bystander_persisted()
    peer = hb.peers[0] if hb.peers else await hb.connect()
    if before_kill is not None:
        await before_kill(peer)
    for level in (16, 17, 18):
        await hb.good_send(peer, "HostileTail", delay_level=level, tag="tail")
    pending_until = max((a.sent_ms + a.delay_ms for a in hb.ledger.acked.values()), default=0)
    hb.proc.kill()
    await hb.close_peers()
    await hb.start()
    peer = await hb.connect()
    # every delayed message is due (with a margin for the restart's replay)
    wait = (pending_until - now_ms()) / 1000 + 0.4
    if wait > 0:
        await asyncio.sleep(wait)
    served: dict[str, list[MessageExt]] = {}
    for _attempt in range(20):
        served = {t: await drain(peer, t) for t in sorted(hb.ledger.topics())}
        got = {m.properties.get("UNIQ_KEY") for ms in served.values() for m in ms}
        if set(hb.ledger.acked) <= got:
            break
        await asyncio.sleep(0.25)  # a delayed one may still be on its way
    check_served(hb.ledger, served, copies_allowed=copies_allowed)
    # the broker takes new sends and serves them
    fresh = await hb.good_send(peer, BYSTANDER_TOPIC, queue_id=0, tag="after-restart")
    back = [m for m in await drain(peer, BYSTANDER_TOPIC) if m.body == fresh.body]
    assert len(back) == 1, "a send after the restart is not served exactly once"
    if offsets:
        for q, off in hb.bystander_offsets.items():
            r = await peer.call(
                RequestCode.QUERY_CONSUMER_OFFSET,
                {"consumerGroup": BYSTANDER_GROUP, "topic": BYSTANDER_TOPIC, "queueId": q},
            )
            assert r.code == ResponseCode.SUCCESS, describe(r)
            assert int(r.ext_fields["offset"]) == off, (
                f"bystander offset of queue {q} is {r.ext_fields['offset']}, was {off}"
            )
    return peer


def ext_of(r: RemotingCommand) -> dict[str, Any]:
    return dict(r.ext_fields)
