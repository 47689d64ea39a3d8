"""Shared helpers of the store fault tests (test_store_faults, test_store_write_faults).

Owns: a small-segment ``MessageStore`` on real files (``open_store``), the message
builder (``make_msg``), reading a queue's bodies back (``bodies_of``) and a restart that
replays the whole log (``reopen``: no checkpoint, the kill -9 case).

Invariants: every store here is opened for real (``open()``) with 64 KiB segments and
100 units per consume-queue file unless a test says otherwise; nothing is mocked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kairosmq.protocol.message import decode_records
from kairosmq.server.store import MessageInner, MessageStore

SEG = 64 * 1024
HOST = (b"\x7f\x00\x00\x01", 10911)
V6 = (bytes(range(1, 17)), 4242)


def open_store(root: Path, **kw: Any) -> MessageStore:
    kw.setdefault("segment_size", SEG)
    kw.setdefault("units_per_file", 100)
    s = MessageStore(root, store_host=HOST, **kw)
    s.open()
    return s


def make_msg(body: bytes, topic: str = "T", qid: int = 0, **kw: Any) -> MessageInner:
    return MessageInner(
        topic=topic,
        queue_id=qid,
        body=body,
        properties=kw.pop("props", {}),
        born_timestamp=1_700_000_000_000,
        **kw,
    )


def bodies_of(s: MessageStore, topic: str = "T", qid: int = 0) -> list[bytes]:
    res = s.get(topic, qid, 0, 1000, max_bytes=1 << 30)
    return [m.body for m in decode_records(b"".join(res.chunks))]


def reopen(
    s: MessageStore, root: Path, *, drop_checkpoint: bool = True, **kw: Any
) -> tuple[MessageStore, dict[str, Any]]:
    """Close and open again, replaying the whole log (no checkpoint: the kill -9 case)."""
    s.close()
    if drop_checkpoint:
        (root / "checkpoint.json").unlink(missing_ok=True)
    kw.setdefault("segment_size", SEG)
    kw.setdefault("units_per_file", 100)
    s2 = MessageStore(root, store_host=HOST, **kw)
    return s2, s2.open()
