"""The native puts (server/store/_message_store.pyx) and consume-queue units
(_consumequeue.pyx's ``append`` and ``compute_tags_code``) against the reference
(``message_store.reference``, ``consumequeue.reference``).

Two real stores in their own directories get the same messages, one through the
reference's ``put``/``put_patched``, one through the twin's: the same ``PutResult``, the
same commit-log bytes (segment files, BLANK markers included), the same consume-queue
files and the same ``DispatchRequest`` fed to a listener. The messages are generated
(any topic the store takes or refuses, IPv4 and IPv6 hosts, any body and properties,
due times of any text) and placed so that every case the twin hands to the reference
happens too: a queue's first put, a full queue file, a record that ends a segment, a
refused put (properties too large, a topic too long, a record over the limit, the
operator's switch off), a record that cannot be encoded.
"""

from __future__ import annotations

import dataclasses
import mmap
import struct
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any  # Any: the twins are untyped compiled modules

import pytest
import structlog
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kairosmq.protocol.message import view_record
from kairosmq.protocol.naming import SCHEDULE_TOPIC, TIMER_TOPIC
from kairosmq.protocol.properties import DELIVER_TIME, TAGS
from kairosmq.protocol.timer import TIMER_OUT_MS
from kairosmq.server.store import consumequeue, message_store
from kairosmq.server.store.consumequeue import HOLE, UNIT, ConsumeQueue
from kairosmq.server.store.message_store import MessageStore
from kairosmq.server.store.types import DispatchRequest, MessageInner, PutStatus

from tests.twins import outcome, twin

ref = message_store.reference
cq_ref = consumequeue.reference
PARITY = settings(
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
HOST4 = (b"\x7f\x00\x00\x01", 10911)
HOST6 = (bytes(range(16)), 10911)
SEG = 8 << 10  # small segments: records end them often
UPF = 8  # small queue files: units fill them often
NOW = 1_700_000_000_123


@pytest.fixture(scope="module")
def nat() -> ModuleType:
    return twin("server.store.message_store")


@pytest.fixture(scope="module")
def cq_nat() -> ModuleType:
    return twin("server.store.consumequeue")


class Rig:
    """A real store in its own directory, fixed clock, every dispatch recorded."""

    def __init__(self, root: Path, host: tuple[bytes, int], max_message_size: int) -> None:
        self.store = MessageStore(
            root,
            store_host=host,
            segment_size=SEG,
            units_per_file=UPF,
            clock_ms=lambda: NOW,
            max_message_size=max_message_size,
        )
        self.store.open()
        self.store._write_scheduled = True  # no loop here: written out by hand
        self.seen: list[DispatchRequest] = []
        self.store.dispatchers.append(self.seen.append)

    def state(self) -> tuple[object, ...]:
        s = self.store
        s.commitlog.write_out()
        log = b"".join(seg.path.read_bytes() for seg in s.commitlog.segments)
        queues = {}
        for key, cq in sorted(s.queues.items()):
            queues[key] = (
                cq.max_offset,
                [Path(f.path).read_bytes() for f in cq.files],
            )
        return s.commitlog.max_offset, log, queues, s.guard.appends, s.guard.ack_token()

    def close(self) -> None:
        self.store.close()


def _same_result(a: tuple[object, ...], b: tuple[object, ...]) -> None:
    assert a == b
    if a[0] == "ok" and dataclasses.is_dataclass(a[1]):
        for f in dataclasses.fields(a[1]):
            assert getattr(a[1], f.name) == getattr(b[1], f.name), f.name


_topic = st.one_of(
    st.sampled_from(["T", "TopicA", SCHEDULE_TOPIC, TIMER_TOPIC, "%RETRY%g", "x" * 127]),
    st.sampled_from(["", "x" * 128, "bad/name", "ü" * 70]),  # refused or too long
)
_value = st.one_of(
    st.text(max_size=12),
    st.integers(0, 10**19).map(str),
    st.sampled_from(["", "0", "00012", "1" * 18, "9" * 19, "-5", "٣٤", "12a"]),
)
_props = st.dictionaries(
    st.sampled_from([DELIVER_TIME, TIMER_OUT_MS, TAGS, "UNIQ_KEY", "KEYS", "a", "WAIT"]),
    _value,
    max_size=5,
)
_message = st.builds(
    MessageInner,
    topic=_topic,
    queue_id=st.one_of(st.integers(0, 2), st.sampled_from([-1, 2**31, 2**40])),
    body=st.one_of(st.binary(max_size=300), st.sampled_from([b"\xab" * 3000])),
    properties=_props,
    flag=st.one_of(st.integers(0, 5), st.sampled_from([2**31, -(2**31) - 1])),
    sys_flag=st.integers(0, 3),
    born_timestamp=st.one_of(st.integers(0, 2**45), st.sampled_from([2**63])),
    born_host=st.sampled_from([HOST4, HOST6]),
    reconsume_times=st.integers(0, 16),
    store_timestamp=st.one_of(st.none(), st.integers(0, 2**45)),
)


def _pair(
    host: tuple[bytes, int], max_size: int
) -> tuple[Rig, Rig, tempfile.TemporaryDirectory[str]]:
    d = tempfile.TemporaryDirectory()
    return Rig(Path(d.name) / "ref", host, max_size), Rig(Path(d.name) / "nat", host, max_size), d


@PARITY
@given(
    st.lists(_message, min_size=1, max_size=30),
    st.sampled_from([HOST4, HOST6]),
    st.lists(st.integers(0, 29), max_size=3),
)
def test_puts_write_the_same_bytes(
    nat: ModuleType, msgs: list[MessageInner], host: tuple[bytes, int], switched_off: list[int]
) -> None:
    a, b, d = _pair(host, 2048)
    try:
        for i, m in enumerate(msgs):
            off = i in switched_off  # the operator's switch: refused by the guard
            a.store.writable = b.store.writable = not off
            ra = outcome(ref.put, a.store, dataclasses.replace(m, properties=dict(m.properties)))
            rb = outcome(nat.put, b.store, dataclasses.replace(m, properties=dict(m.properties)))
            _same_result(ra, rb)
            assert a.seen == b.seen
            assert a.state() == b.state()
    finally:
        a.close()
        b.close()
        d.cleanup()


@PARITY
@given(
    st.lists(_message.filter(lambda m: m.queue_id == 0), min_size=1, max_size=12),
    st.lists(st.tuples(_topic, st.integers(0, 2), _props), min_size=1, max_size=12),
)
def test_patched_puts_write_the_same_bytes(
    nat: ModuleType,
    msgs: list[MessageInner],
    targets: list[tuple[str, int, dict[str, str]]],
) -> None:
    """Stored records re-addressed (the scheduler's and the timer's re-put): both stores
    hold the same records (put by the reference), then each core re-puts them."""
    a, b, d = _pair(HOST4, 2048)
    try:
        records = []
        for m in msgs:
            ra = ref.put(a.store, dataclasses.replace(m, properties=dict(m.properties)))
            rb = ref.put(b.store, dataclasses.replace(m, properties=dict(m.properties)))
            assert ra == rb
            if ra.status is PutStatus.PUT_OK:
                a.store.commitlog.write_out()
                records.append(a.store.commitlog.read(ra.phy_offset, ra.size))
        for i, (topic, qid, props) in enumerate(targets):
            if not records:
                break
            src = records[i % len(records)]
            assert src is not None
            view = view_record(src)
            ra = outcome(ref.put_patched, a.store, src, view, topic, qid, dict(props))
            rb = outcome(nat.put_patched, b.store, src, view, topic, qid, dict(props))
            _same_result(ra, rb)
            assert a.seen == b.seen
            assert a.state() == b.state()
    finally:
        a.close()
        b.close()
        d.cleanup()


class _Name(str):
    """A ``str`` subclass: the twin's properties writer hands it to the reference."""


# names and values the properties writer must treat as the reference does: empty ones
# (left out), non-ASCII, a lone surrogate (UTF-8 cannot hold it: the same error), and
# values that are not ``str`` (formatted by the reference)
_odd_text = st.one_of(
    st.text(max_size=6),
    st.sampled_from(["", "ü", "日本", "\U0001f600", "\ud800", "a\ud83dz", "x\x00y"]),
)
_odd_props = st.dictionaries(
    st.one_of(_odd_text, st.sampled_from([TAGS, "UNIQ_KEY"]), _odd_text.map(_Name)),
    st.one_of(_odd_text, st.integers(-5, 10**12), _odd_text.map(_Name), st.none()),
    max_size=6,
)


@PARITY
@given(st.lists(_odd_props, min_size=1, max_size=8), st.booleans())
def test_odd_properties_are_written_alike(
    nat: ModuleType, props_list: list[dict[Any, Any]], patched: bool
) -> None:
    """The twin writes a put's properties straight into bytes: the same bytes as
    ``encode_properties(...).encode()``, or the same error, for any names and values."""
    a, b, d = _pair(HOST4, 2048)
    try:
        src = None
        if patched:
            m = MessageInner("T", 0, b"body", {"UNIQ_KEY": "K"}, born_host=HOST4)
            r = ref.put(a.store, m)
            assert ref.put(b.store, m) == r
            a.store.commitlog.write_out()
            src = a.store.commitlog.read(r.phy_offset, r.size)
            assert src is not None
        for props in props_list:
            if src is not None:
                view = view_record(src)
                ra = outcome(ref.put_patched, a.store, src, view, "T", 1, dict(props))
                rb = outcome(nat.put_patched, b.store, src, view, "T", 1, dict(props))
            else:
                ra = outcome(ref.put, a.store, MessageInner("T", 0, b"x", dict(props)))
                rb = outcome(nat.put, b.store, MessageInner("T", 0, b"x", dict(props)))
            _same_result(ra, rb)
            assert a.seen == b.seen
            assert a.state() == b.state()
    finally:
        a.close()
        b.close()
        d.cleanup()


def test_messages_of_other_shapes_are_put_alike(nat: ModuleType) -> None:
    """The twin reads a ``MessageInner``'s fields from their slots; a message of another
    class, or one with a field never set, goes to the reference: the same outcome."""
    from types import SimpleNamespace

    def shapes() -> list[object]:
        duck = SimpleNamespace(
            **{
                f.name: getattr(MessageInner("T", 0, b"d"), f.name)
                for f in dataclasses.fields(MessageInner)
            }
        )
        unset = object.__new__(MessageInner)
        unset.topic, unset.queue_id, unset.body = "T", 0, b"u"  # the rest never set
        return [duck, unset, MessageInner("T", 0, b"plain", {"a": "b"})]

    a, b, d = _pair(HOST4, 2048)
    try:
        for ma, mb in zip(shapes(), shapes(), strict=True):
            _same_result(outcome(ref.put, a.store, ma), outcome(nat.put, b.store, mb))
            assert a.seen == b.seen
            assert a.state() == b.state()
    finally:
        a.close()
        b.close()
        d.cleanup()


def test_patched_puts_into_same_stores(nat: ModuleType, tmp_path: Path) -> None:
    """The same records re-put through each core into stores that hold the same log: the
    same bytes, including a re-put that ends a segment and one into a new queue."""
    a = Rig(tmp_path / "a", HOST4, 2048)
    b = Rig(tmp_path / "b", HOST4, 2048)
    try:
        srcs = []
        for i in range(6):
            m = MessageInner(
                SCHEDULE_TOPIC,
                0,
                b"\xcd" * (100 + 400 * i),
                {"UNIQ_KEY": f"K{i}", DELIVER_TIME: str(NOW + i), "REAL_TOPIC": "Real"},
                born_host=HOST4,
            )
            ra, rb = ref.put(a.store, m), ref.put(b.store, m)
            assert ra == rb and ra.status is PutStatus.PUT_OK
            a.store.commitlog.write_out()
            srcs.append(a.store.commitlog.read(ra.phy_offset, ra.size))
        for n in range(30):
            src = srcs[n % len(srcs)]
            assert src is not None
            view = view_record(src)
            props = {"UNIQ_KEY": f"K{n}", "KAIROS_SCHEDULE_ORIGIN": f"1:{n}", TAGS: "t" * (n % 3)}
            topic, qid = ("Real", n % 3) if n % 7 else (f"Fresh{n}", 0)
            ra = ref.put_patched(a.store, src, view, topic, qid, dict(props))
            rb = nat.put_patched(b.store, src, view, topic, qid, dict(props))
            assert ra == rb
            assert a.seen == b.seen
            assert a.state() == b.state()
        assert a.store.commitlog.segments[-1].base > 0  # records ended segments
    finally:
        a.close()
        b.close()


def test_the_wall_clock_stamps_a_put(nat: ModuleType, tmp_path: Path) -> None:
    """On the broker's clock (``clock.wall_ms``) the twin reads the time itself."""
    s = MessageStore(tmp_path, store_host=HOST4, segment_size=SEG, units_per_file=UPF)
    s.open()
    s._write_scheduled = True
    try:
        ref.put(s, MessageInner("T", 0, b"first"))  # the queue's first put: its file
        before = int(time.time() * 1000)
        r = nat.put(s, MessageInner("T", 0, b"x"))
        after = int(time.time() * 1000)
        assert r.status is PutStatus.PUT_OK and before <= r.store_timestamp <= after
    finally:
        s.close()


def _listeners(heard: list[str]) -> list[Any]:
    """Three dispatch listeners recording their calls into ``heard``; the middle raises."""

    def bad(req: DispatchRequest) -> None:
        heard.append("bad")
        raise ValueError(f"no {req.topic}")

    return [lambda r: heard.append("first"), bad, lambda r: heard.append("last")]


def test_a_raising_listener_is_logged_and_the_others_are_fed(
    nat: ModuleType, tmp_path: Path
) -> None:
    """Both puts feed every dispatch listener in order; one that raises is counted and
    logged as ``store.dispatch_failed`` (``MessageStore._dispatch_failed``), the message
    stays stored and the listeners after it still hear it."""
    for name, put in (("ref", ref.put), ("nat", nat.put)):
        s = MessageStore(tmp_path / name, store_host=HOST4, segment_size=SEG, units_per_file=UPF)
        s.open()
        s._write_scheduled = True
        heard: list[str] = []
        s.dispatchers[:] = _listeners(heard)
        try:
            ref.put(s, MessageInner("T", 0, b"first"))  # the queue's first put: its file
            heard.clear()
            with structlog.testing.capture_logs() as errors:
                r = put(s, MessageInner("T", 0, b"x"))
            assert r.status is PutStatus.PUT_OK and r.queue_offset == 1, name
            assert heard == ["first", "bad", "last"], name
            assert s.dispatch_failures == 2, name
            assert [e["event"] for e in errors] == ["store.dispatch_failed"], name
            assert errors[0]["error"] == "ValueError: no T", name
            assert "bad" in errors[0]["dispatcher"], name
        finally:
            s.close()


async def test_the_broker_puts_through_the_twin(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """A broker on the native core stores sends and delayed re-puts through the twin."""
    from kairosmq.protocol import native

    from tests.helpers import pull, send
    from tests.wire import RawPeer

    b = await broker_factory()
    peer = await RawPeer.connect(b.address)
    for i in range(5):
        assert (await send(peer, "Twin", b"m%d" % i)).code == 0
    r = await pull(peer, "Twin", 0, 0, max_n=32, suspend_ms=0)
    assert r.code == 0 and r.ext_fields["nextBeginOffset"] == "5"
    if native.chosen().get("kairosmq.server.store.message_store") == "native":
        assert MessageStore.put is nat_put()
    await peer.close()


async def test_the_put_path_calls_the_store_put_it_reads(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """The put-path twin calls the store twin's ``put`` as a C function only while
    ``store.put`` is that twin's bound to the store: the same stored message and result
    either way, and a ``put`` replaced on the store is the one called (as by the
    reference's put path), on both cores."""
    import types

    from kairosmq.server.put import path

    from tests.twins import twin as load

    path_nat = load("server.put.path")
    b = await broker_factory()
    store, pp = b.store, b.put_path
    calls: list[str] = []
    results = []
    for name, put in (("ref", path.reference.put), ("nat", path_nat.put)):
        for replaced in (False, True):
            if replaced:

                def wrapped(msg: MessageInner, name: str = name) -> Any:
                    calls.append(f"{name} {msg.topic}")
                    return nat_put()(store, msg)

                store.put = wrapped
            else:
                store.put = types.MethodType(nat_put(), store)  # the twin's, bound
            try:
                m = MessageInner("PathT", 0, b"%s %s" % (name.encode(), b"b" if replaced else b"a"))
                r = put(pp, m)
            finally:
                del store.put
            results.append((r.status, r.queue_offset, r.size, r.phy_offset))
    assert calls == ["ref PathT", "nat PathT"]
    assert [r[0] for r in results] == [PutStatus.PUT_OK] * 4
    assert [r[1] for r in results] == [0, 1, 2, 3]
    assert len({r[2] for r in results}) == 1
    store.write_out()
    records = [store.commitlog.read(r[3], r[2]) for r in results]
    bodies = [rec[(v := view_record(rec)).body_start : v.body_end] for rec in records]
    assert bodies == [b"ref a", b"ref b", b"nat a", b"nat b"]


def nat_put() -> Any:  # Any: the twin's compiled function
    from kairosmq.server.store import _message_store  # type: ignore[attr-defined]

    return _message_store.put


# ------------------------------------------------------------------ consume-queue units


@PARITY
@given(
    st.sampled_from(["T", SCHEDULE_TOPIC, TIMER_TOPIC, "%RETRY%g"]),
    st.dictionaries(st.sampled_from([DELIVER_TIME, TIMER_OUT_MS, TAGS, "x"]), _value, max_size=3),
)
def test_tags_code(cq_nat: ModuleType, topic: str, props: dict[str, str]) -> None:
    assert outcome(cq_nat.compute_tags_code, topic, props) == outcome(
        cq_ref.compute_tags_code, topic, props
    )


def test_tags_code_of_odd_values(cq_nat: ModuleType) -> None:
    for topic in (SCHEDULE_TOPIC, TIMER_TOPIC):
        for raw in (1, None, b"12", "", "0" * 18, "9" * 18, "1" * 19, "1 ", "\u0663"):
            key = DELIVER_TIME if topic == SCHEDULE_TOPIC else TIMER_OUT_MS
            assert outcome(cq_nat.compute_tags_code, topic, {key: raw}) == outcome(
                cq_ref.compute_tags_code, topic, {key: raw}
            ), raw
    for args in ((1, {}), ("T", None), ("T", {TAGS: 5}), ("T", {TAGS: ""})):
        a, b = outcome(cq_nat.compute_tags_code, *args), outcome(cq_ref.compute_tags_code, *args)
        assert a[:2] == b[:2], args


_unit = st.tuples(
    st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([2**63, -(2**63) - 1])),
    st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from([2**31, True])),
    st.integers(-(2**63), 2**63 - 1),
)


@PARITY
@given(st.lists(st.one_of(_unit, st.just(HOLE)), min_size=1, max_size=30))
def test_units_append_the_same_bytes(cq_nat: ModuleType, units: list[tuple[int, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        qa = ConsumeQueue(Path(d) / "a", "T", 0, UPF)
        qb = ConsumeQueue(Path(d) / "b", "T", 0, UPF)
        try:
            for i, u in enumerate(units):
                if i % 5 == 1:  # as the store does before most appends
                    qa.ensure_room()
                    qb.ensure_room()
                ra, rb = outcome(cq_ref.append, qa, *u), outcome(cq_nat.append, qb, *u)
                assert ra[:2] == rb[:2], u
                assert (qa.max_offset, qa._tail_end) == (qb.max_offset, qb._tail_end)
            assert [Path(f.path).read_bytes() for f in qa.files] == [
                Path(f.path).read_bytes() for f in qb.files
            ]
            assert qa.units(0, len(units)) == qb.units(0, len(units))
        finally:
            qa.close()
            qb.close()


def test_a_unit_lands_in_the_map(cq_nat: ModuleType, tmp_path: Path) -> None:
    q = ConsumeQueue(tmp_path, "T", 0, UPF)
    try:
        q.ensure_room()
        assert cq_nat.append(q, 2**40, 1234, -7) == 0
        f = q.files[-1]
        assert isinstance(f.mm, mmap.mmap)
        assert UNIT.unpack_from(f.mm, 0) == (2**40, 1234, -7)
        with pytest.raises(struct.error):
            cq_nat.append(q, 0, 2**31, 0)  # the reference's error, nothing written
        assert q.max_offset == 1
    finally:
        q.close()


def _interested(heard: list[tuple[str, str, int]]) -> list[Any]:
    """Dispatch listeners with and without a declared interest, recording what they hear."""

    def hear(name: str) -> Any:
        return lambda r: heard.append((name, r.topic, r.queue_offset))

    every = hear("every")
    topic = message_store.interested_in(topics=("A",))(hear("topic"))
    prop = message_store.interested_in(properties=("P",))(hear("prop"))
    both = message_store.interested_in(topics=("B",), properties=("Q", "P"))(hear("both"))
    return [every, topic, prop, both]


@PARITY
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["A", "B", "C"]),
            st.dictionaries(st.sampled_from(["P", "Q", "R"]), st.sampled_from(["", "1"])),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_a_declared_interest_is_kept_alike(nat: ModuleType, puts: list[Any]) -> None:
    """A listener that declares topics or property names (``interested_in``) is fed
    exactly the records ``message_store.wants`` names, by the reference's puts and the
    twin's, in listener order, also after the list changed; one without hears every
    record."""
    got = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, put in (("ref", ref.put), ("nat", nat.put)):
            s = MessageStore(Path(tmp) / name, store_host=HOST4, segment_size=SEG)
            s.open()
            s._write_scheduled = True
            heard: list[tuple[str, str, int]] = []
            s.dispatchers.extend(_interested(heard))
            try:
                for i, (topic, props) in enumerate(puts):
                    r = put(s, MessageInner(topic, 0, b"x", properties=dict(props)))
                    assert r.status is PutStatus.PUT_OK
                    if i == 0:  # the twin's common case from the queue's second put on
                        s.dispatchers.append(s.dispatchers.pop())  # a change: a new plan
                names = dict(zip(s.dispatchers, ["every", "topic", "prop", "both"], strict=True))
                offsets: dict[str, int] = {}
                want = []
                for topic, props in puts:
                    off = offsets[topic] = offsets.get(topic, -1) + 1
                    req = DispatchRequest(topic, 0, 0, 0, 0, off, 0, props)
                    for e in s.dispatchers.plan():
                        if message_store.wants(e, req):
                            want.append((names[e[0]], topic, off))
                assert heard == want, name
                got.append(heard)
            finally:
                s.close()
    assert got[0] == got[1]
    assert sum(h[0] == "every" for h in got[0]) == len(puts)


def test_wants_names_the_declared_topics_and_properties() -> None:
    def req(topic: str, props: dict[str, str]) -> DispatchRequest:
        return DispatchRequest(topic, 0, 0, 0, 0, 0, 0, props)

    every = (print, None, ())
    declared = (print, frozenset({"B"}), ("Q", "P"))
    assert message_store.wants(every, req("C", {}))
    assert message_store.wants(declared, req("B", {}))
    assert message_store.wants(declared, req("C", {"P": ""}))
    assert not message_store.wants(declared, req("C", {"R": "1"}))
    assert not message_store.wants((print, frozenset(), ()), req("B", {"P": "1"}))


# ------------------------------------------------------------------ C calls of other twins


def test_the_twin_found_the_c_functions_it_calls(nat: ModuleType) -> None:
    """On the native core the put calls the consume-queue, index, long-poll and HA
    twins' C functions (``ConsumeQueue.append``, ``ensure_room``'s common case,
    ``KeyIndex.dispatch``, the two ``on_dispatch``) in place of a Python call: all were
    found at import (an import order that hid one would cost every put a Python call,
    silently); the delay and timer services' listeners are found when first heard."""
    assert nat.C_CALLS - {"ScheduleService.on_dispatch", "TimerService.on_dispatch"} == {
        "ConsumeQueue.append",
        "ConsumeQueue.ensure_room",
        "KeyIndex.dispatch",
        "ArrivalNotifier.on_dispatch",
        "HAService.on_dispatch",
    }


_listener_puts = st.lists(
    st.tuples(
        st.sampled_from(["T", "U", SCHEDULE_TOPIC]),
        st.integers(0, 2),  # queue id
        st.booleans(),  # a pull waits on the queue before the put
    ),
    min_size=1,
    max_size=12,
)


@PARITY
@given(_listener_puts, st.booleans())
def test_the_twins_listeners_are_fed_alike(
    nat: ModuleType, puts: list[tuple[str, int, bool]], replaced: bool
) -> None:
    """The long-poll and HA twins' listeners (``ArrivalNotifier.on_dispatch``,
    ``HAService.on_dispatch`` of a SYNC_MASTER, each the twin's function bound to its
    instance: the twin calls them as C functions) among plain listeners: the same
    waiters woken, the same records held by the confirm gate, the same order of calls
    as the reference's put. A notifier whose waiters table holds what is not a list
    raises in its listener: logged as ``store.dispatch_failed`` by both, the listeners
    after it still fed. ``replaced``: the notifier's listener is a wrapper around the
    twin's (called as Python), the same again."""
    import asyncio
    import types

    from kairosmq.server.config import BrokerConfig
    from kairosmq.server.ha.master import HAService
    from kairosmq.server.remoting.longpoll import ArrivalNotifier

    from tests.twins import twin as load

    lp = load("server.remoting.longpoll")
    ha = load("server.ha.master")

    async def run(root: Path, put: Any) -> tuple[Any, ...]:
        s = MessageStore(root, store_host=HOST4, segment_size=SEG, clock_ms=lambda: NOW)
        s.open()
        s._write_scheduled = True
        try:
            cfg = BrokerConfig(data_dir=root, broker_role="SYNC_MASTER")
            notifier = ArrivalNotifier()
            svc = HAService(s, cfg, notifier, structlog.get_logger("ha"))
            bad = ArrivalNotifier()
            bad._waiters = {("U", 1): 5}  # type: ignore[dict-item]  # not a list: raises
            heard: list[tuple[str, str, int]] = []
            on_arrival: Any = types.MethodType(lp.on_dispatch, notifier)
            if replaced:

                def on_arrival(req: DispatchRequest) -> None:
                    heard.append(("wrapped", req.topic, req.queue_id))
                    lp.on_dispatch(notifier, req)

            s.dispatchers.extend(
                [
                    types.MethodType(ha.on_dispatch, svc),
                    on_arrival,
                    types.MethodType(lp.on_dispatch, bad),
                    lambda r: heard.append(("last", r.topic, r.queue_id)),
                ]
            )
            woken = []
            results = []
            with structlog.testing.capture_logs() as logs:
                for topic, qid, waits in puts:
                    fut = None
                    if waits:  # what ``ArrivalNotifier.wait`` registers
                        fut = asyncio.get_running_loop().create_future()
                        notifier._waiters.setdefault((topic, qid), set()).add(fut)
                    results.append(outcome(put, s, MessageInner(topic, qid, b"x")))
                    woken.append(None if fut is None else fut.done())
            pending = None if svc.gate is None else sorted(svc.gate.pending)
            return (
                results,
                woken,
                svc._data.is_set(),
                pending,
                heard,
                s.dispatch_failures,
                [(e["event"], e.get("error")) for e in logs],
                sorted(notifier._waiters),
            )
        finally:
            s.close()

    seen = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, put in (("ref", ref.put), ("nat", nat.put)):
            seen.append(asyncio.run(run(Path(tmp) / name, put)))
    assert seen[0] == seen[1]


_index_value = st.one_of(
    st.text(alphabet=st.characters(codec="ascii"), max_size=10),
    st.sampled_from(["", "k1 k2", " a  b ", "ü", "\ud800", "k " * 40]),
)
_index_props = st.dictionaries(
    st.sampled_from(["UNIQ_KEY", "KEYS", TAGS]),
    st.one_of(_index_value, st.integers(0, 99)),  # an int: the index raises on it
    max_size=3,
)


@PARITY
@given(
    st.lists(st.tuples(st.sampled_from(["T", "U"]), _index_props), min_size=1, max_size=25),
    st.sampled_from([(3, 8), (5, 40), (1, 2)]),
)
def test_a_key_index_listener_is_fed_alike(
    nat: ModuleType, puts: list[tuple[str, dict[str, str]]], shape: tuple[int, int]
) -> None:
    """A key index among the listeners (``KeyIndex.dispatch``, which the twin calls as
    the index twin's C function with the values it put into the request): the same
    index files, counters, dispatch failures and logged events as the reference's put
    (small index files: dispatches fill them and reach their halves; a key UTF-8
    cannot hold is refused by both puts; a key that is not text makes the index raise,
    logged as ``store.dispatch_failed``)."""
    from kairosmq.server.store.index import KeyIndex

    seen = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, put in (("ref", ref.put), ("nat", nat.put)):
            s = MessageStore(
                Path(tmp) / name, store_host=HOST4, segment_size=SEG, clock_ms=lambda: NOW
            )
            s.open()
            s._write_scheduled = True
            ix = KeyIndex(Path(tmp) / name / "index", s, slots=shape[0], capacity=shape[1])
            ix.open()
            heard: list[DispatchRequest] = []
            s.dispatchers.extend([ix.dispatch, heard.append])
            try:
                results = []
                with structlog.testing.capture_logs() as logs:
                    for topic, props in puts:
                        m = MessageInner(topic, 0, b"x", dict(props))
                        results.append(outcome(put, s, m))
                seen.append(
                    (
                        results,
                        heard,
                        [f.path.read_bytes() for f in ix.files],
                        ix.indexed,
                        ix.end_phy,
                        s.dispatch_failures,
                        [(e["event"], e.get("error"), e.get("dispatcher")) for e in logs],
                    )
                )
            finally:
                ix.close()
                s.close()
    assert seen[0] == seen[1]


def test_a_patched_consume_queue_append_is_called(
    nat: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The twin calls the consume-queue twin's C function only while
    ``ConsumeQueue.append`` is that twin's: one replaced on the class is called."""
    s = MessageStore(tmp_path, store_host=HOST4, segment_size=SEG, units_per_file=UPF)
    s.open()
    s._write_scheduled = True
    calls: list[tuple[int, int, int]] = []
    before = ConsumeQueue.append

    def append(cq: ConsumeQueue, phy: int, size: int, code: int) -> int:
        calls.append((phy, size, code))
        return before(cq, phy, size, code)

    try:
        nat.put(s, MessageInner("T", 0, b"first"))  # the queue's first put: its file
        monkeypatch.setattr(ConsumeQueue, "append", append)
        r = nat.put(s, MessageInner("T", 0, b"second"))
        assert r.status is PutStatus.PUT_OK and calls == [(r.phy_offset, r.size, r.tags_code)]
        assert s.queues[("T", 0)].get(1) == (r.phy_offset, r.size, r.tags_code)
    finally:
        s.close()


def test_a_guard_and_log_of_other_classes_are_put_alike(nat: ModuleType, tmp_path: Path) -> None:
    """The twin reads the write guard's and the commit log's fields in their slots only
    for a ``WriteGuard`` and a ``CommitLog`` themselves: stores whose guard and log are
    of subclasses put, refuse and write out what the reference does."""
    from kairosmq.server.store.commitlog import CommitLog
    from kairosmq.server.store.guard import WriteGuard

    class Guard(WriteGuard):
        __slots__ = ()

    class Log(CommitLog):
        __slots__ = ()

    rigs = []
    for name in ("ref", "nat"):
        rig = Rig(tmp_path / name, HOST4, 2048)
        rig.store.guard.__class__ = Guard
        rig.store.commitlog.__class__ = Log
        rigs.append(rig)
    a, b = rigs
    try:
        for i in range(12):
            off = i == 5
            a.store.writable = b.store.writable = not off
            m = MessageInner("T", i % 2, b"\xab" * (100 * i), {"UNIQ_KEY": f"K{i}"})
            _same_result(outcome(ref.put, a.store, m), outcome(nat.put, b.store, m))
            assert a.seen == b.seen
            if i % 3 == 0:
                ref.write_out(a.store)
                nat.write_out(b.store)
                assert a.store.commitlog.written_offset == b.store.commitlog.written_offset
            assert a.state() == b.state()
    finally:
        a.close()
        b.close()
