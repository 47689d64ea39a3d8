"""The native write-out (server/store/_message_store.pyx's ``write_out``) against the
reference (``message_store.reference.write_out``).

Two real stores in their own directories get the same puts (through the reference's
``put``, so only the write-out differs) and are written out at the same points, one by
the reference, one by the twin: the same segment-file bytes, written end, pending
buffer, last written record, write-guard state and ack answers. The pwrite faults are
injected at the file layer (``os.pwrite`` as the commit log calls it, like
test_store_write_faults.py): a short write that goes on, a write that fails at once or
after some bytes (the rollback), and the write after a held failure (the guard's
recovery).
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any  # Any: the twin is an untyped compiled module

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kairosmq.protocol import native
from kairosmq.server.store import commitlog as commitlog_mod
from kairosmq.server.store import message_store
from kairosmq.server.store.message_store import MessageStore
from kairosmq.server.store.types import MessageInner

from tests.twins import outcome, twin

ref = message_store.reference
PARITY = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=25,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
HOST = (b"\x7f\x00\x00\x01", 10911)
SEG = 8 << 10  # small segments: puts end them often (the reference's BLANK write-outs)
NOW = 1_700_000_000_123


@pytest.fixture(scope="module")
def nat() -> ModuleType:
    return twin("server.store.message_store")


def _store(root: Path) -> MessageStore:
    store = MessageStore(root, store_host=HOST, segment_size=SEG, clock_ms=lambda: NOW)
    store.open()
    store._write_scheduled = True  # no loop here: written out by hand
    return store


def _state(s: MessageStore) -> tuple[object, ...]:
    log = s.commitlog
    files = b"".join(seg.path.read_bytes() for seg in log.segments)
    g = s.guard
    token = g.ack_token()
    return (
        files,
        log._written,
        bytes(log._pending),
        s._last_record,
        s._last_written_record,
        s._write_scheduled,
        g.write_failure,
        g.failures,
        g._rollbacks,
        token,
        g.ack_problem(token, log.written_offset),
    )


def _put(s: MessageStore, i: int, size: int) -> None:
    msg = MessageInner(
        topic="T", queue_id=i % 2, body=bytes([i % 251]) * size, properties={"i": str(i)}
    )
    ref.put(s, msg)


def _pwrite(plan: list[str]) -> Any:  # Any: os.pwrite's buffer argument
    """``os.pwrite`` doing ``plan``'s steps in turn ("ok", "short": half, "fail": EIO),
    then every write whole."""
    real = os.pwrite

    def pwrite(fd: int, data: Any, pos: int) -> int:
        step = plan.pop(0) if plan else "ok"
        if step == "fail":
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        if step == "short" and len(data) > 1:
            return real(fd, bytes(data[: len(data) // 2]), pos)
        return real(fd, data, pos)

    return pwrite


_turns = st.lists(
    st.tuples(
        st.lists(st.integers(1, 3000), max_size=4),  # the puts' body sizes before a write
        st.lists(st.sampled_from(["ok", "short", "fail"]), max_size=3),  # its pwrites
    ),
    min_size=1,
    max_size=8,
)


@PARITY
@given(_turns)
def test_write_outs_leave_the_same_files_counters_and_acks(
    nat: ModuleType, monkeypatch: pytest.MonkeyPatch, turns: list[tuple[list[int], list[str]]]
) -> None:
    with tempfile.TemporaryDirectory() as d:
        a, b = _store(Path(d) / "ref"), _store(Path(d) / "nat")
        try:
            i = 0
            for sizes, plan in turns:
                for size in sizes:
                    for s in (a, b):
                        s.guard.write_failure = None  # a held failure refuses puts
                        s._write_scheduled = True  # no loop here: written out by hand
                        _put(s, i, size)
                    i += 1
                with monkeypatch.context() as m:
                    m.setattr(commitlog_mod.os, "pwrite", _pwrite(list(plan)))
                    ra = outcome(ref.write_out, a)
                with monkeypatch.context() as m:
                    m.setattr(commitlog_mod.os, "pwrite", _pwrite(list(plan)))
                    rb = outcome(nat.write_out, b)
                assert ra == rb
                assert _state(a) == _state(b)
        finally:
            a.close()
            b.close()


def test_a_write_after_a_held_failure_clears_it_alike(nat: ModuleType, tmp_path: Path) -> None:
    a, b = _store(tmp_path / "ref"), _store(tmp_path / "nat")
    try:
        for s, write_out in ((a, ref.write_out), (b, nat.write_out)):
            s.guard.hold("service not available now: held")
            s.guard.write_failure = None  # let one put in, then hold again
            s._write_scheduled = True
            _put(s, 0, 10)
            s.guard.hold("service not available now: held")
            write_out(s)
            assert s.guard.write_failure is None  # the write cleared the hold
        assert _state(a) == _state(b)
    finally:
        a.close()
        b.close()


def test_the_store_writes_out_through_the_chosen_core(nat: ModuleType) -> None:
    chosen = ref.write_out if native.DISABLED else nat.write_out
    assert MessageStore.write_out is chosen


def _nat_put(nat: ModuleType, s: MessageStore, i: int, size: int) -> None:
    msg = MessageInner(
        topic="T", queue_id=i % 2, body=bytes([i % 251]) * size, properties={"i": str(i)}
    )
    nat.put(s, msg)


@PARITY
@given(
    st.lists(
        st.tuples(st.lists(st.integers(1, 6000), max_size=40), st.booleans()),
        min_size=1,
        max_size=6,
    )
)
def test_the_pending_buffer_kept_between_write_outs_holds_the_same_bytes(
    nat: ModuleType, turns: list[tuple[list[int], bool]]
) -> None:
    """Batches of puts (the twin's appends grow the pending buffer's capacity, its
    write-out keeps it for the next batch) against the reference's put and write-out:
    the same files, pending bytes and reads of records not written yet at every step;
    a pending buffer someone else holds across a write-out keeps its bytes (the twin
    renews it in place only when nothing but the log holds it)."""
    with tempfile.TemporaryDirectory() as d:
        a, b = _store(Path(d) / "ref"), _store(Path(d) / "nat")
        try:
            i = 0
            for sizes, hold in turns:
                start = a.commitlog.written_offset
                for size in sizes:
                    a._write_scheduled = b._write_scheduled = True
                    _put(a, i, size)
                    _nat_put(nat, b, i, size)
                    i += 1
                end = a.commitlog.max_offset
                assert b.commitlog.max_offset == end
                assert a.commitlog.read(start, end - start) == b.commitlog.read(start, end - start)
                held = (a.commitlog._pending, b.commitlog._pending) if hold else None
                before = None if held is None else (bytes(held[0]), bytes(held[1]))
                assert outcome(ref.write_out, a) == outcome(nat.write_out, b)
                assert _state(a) == _state(b)
                if held is not None and before is not None:
                    assert (bytes(held[0]), bytes(held[1])) == before
                    if before[1]:  # written out: a fresh buffer, as the reference's
                        assert held[0] is not a.commitlog._pending
                        assert held[1] is not b.commitlog._pending
        finally:
            a.close()
            b.close()


def test_an_append_to_an_exported_pending_buffer_raises_alike(
    nat: ModuleType, tmp_path: Path
) -> None:
    """A view of the pending buffer held during a put: the reference's ``+=`` raises
    BufferError; so does the twin's append, and the buffer keeps its bytes."""
    a, b = _store(tmp_path / "ref"), _store(tmp_path / "nat")
    try:
        _put(a, 0, 100)
        _nat_put(nat, b, 0, 100)
        views = memoryview(a.commitlog._pending), memoryview(b.commitlog._pending)
        ra = outcome(_put, a, 1, 100)
        rb = outcome(_nat_put, nat, b, 1, 100)
        assert ra[0] == rb[0] == "raised" and ra[1] is rb[1] is BufferError
        assert bytes(views[0]) == bytes(views[1])
        for v in views:
            v.release()
    finally:
        a.close()
        b.close()
