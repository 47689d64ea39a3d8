# cython: language_level=3, boundscheck=True, wraparound=True
"""Native twin of ``service.py``'s ``ScheduleService._drain`` (chosen by
``protocol/native.py``; ``service.py`` is the reference and owns every rule of a level's
drain and of its progress).

``drain`` is ``_drain`` step for step: the due head read in growing chunks, units removed
by retention passed over, the records read, recalled ones passed over, the batch handed
to ``Reputs.put_many`` and the delivered ones reported once. When ``recalled`` is
``LevelRecalls.pass_record`` (what the broker wires), its steps run inline on the marks
set, read once per batch (the batch is built before any re-put, as the reference's). Its ``settle`` (the
reference's closure, a Python frame per re-put) is ``_Settle``, a C callable: a SKIP
logged through the service's own ``_skip``, progress moved past a settled record, a DONE
noted for ``on_delivered``.

``on_dispatch`` (``ScheduleService.on_dispatch``) mirrors the reference's common case,
the re-put being made (its properties the in-flight ones, not a replay): the progress
moved past it and its undo noted (the undo twin's ``add`` called as C, ``_undo.ADD``, when
it is the undo log's). Anything else (a request of another class, another
record with an origin, an in-flight pair that is not a tuple of two) is handed to the
reference before anything is changed. ``DISPATCH`` is a capsule of its C function, with
the signature of ``_index.DISPATCH_LIVE`` (the listener's self, the request, its
properties, offset and size): the message-store twin calls it with no Python call for a
listener that is this ``on_dispatch`` bound to a service. (A ``def`` twin of it alone,
measured before, cost more than the interpreter's specialised attribute reads; called
from C it saves the call.)
"""

from cpython.object cimport PyObject, PyTypeObject, Py_TYPE
from cpython.pycapsule cimport PyCapsule_New
from protocol._capsules cimport _c_function
from protocol._slots cimport _field, _slot

from time import time as _time

from types import MethodType

from ..recalls import LevelRecalls
from ..reput import Attempt, Outcome, Reputs
from kairosmq.protocol.naming import SCHEDULE_TOPIC

from ...store.types import DispatchRequest
from . import service as _ref

# ``UndoLog.add`` of the undo twin as a C function (``_undo.ADD``), called in place of the
# method for an undo log whose class's ``add`` is that twin's (else the method is called)
ctypedef object (*_undo_add_t)(object, object, object)
from ...store import undo as _undo_ref  # undo.py chooses its twin (None: the pure core)
cdef _undo_add_t _undo_add = <_undo_add_t>_c_function(_undo_ref._twin, "ADD")
cdef object _undo_twin_add = _undo_ref._twin.add if _undo_add != NULL else None
cdef str _ADD = "add"


cdef extern from "Python.h":
    PyObject* _PyType_Lookup(PyTypeObject* t, object name)  # borrowed, no error set


cdef inline object _undo_note(object undo, object phy, object item):
    """``undo.add(phy, item)``."""
    if _undo_add != NULL and _PyType_Lookup(Py_TYPE(undo), _ADD) == <PyObject*>_undo_twin_add:
        return _undo_add(undo, phy, item)
    return undo.add(phy, item)


cdef object _pure = _ref.reference
cdef object _DONE = Outcome.DONE
cdef object _SKIP = Outcome.SKIP
cdef object _Attempt = Attempt
cdef object _RECALLED = _ref._RECALLED  # the very object: compared by identity
cdef object _FIRST_CHUNK = _ref._FIRST_CHUNK
cdef object _MethodType = MethodType
cdef object _pass_record = LevelRecalls.pass_record
cdef str _SCHEDULE_TOPIC = SCHEDULE_TOPIC
cdef object _Request = DispatchRequest
cdef Py_ssize_t R_TOPIC = _slot(_Request, "topic", False)
cdef Py_ssize_t R_PHY = _slot(_Request, "phy_offset", False)
cdef Py_ssize_t R_REPLAY = _slot(_Request, "replay", False)
cdef Py_ssize_t R_PROPS = _slot(_Request, "properties", False)
cdef object _UNSET = object()  # ``phy`` not given: read from the request when needed
cdef object _Reputs = Reputs  # its fields the listener reads, by offset (its slots)
cdef Py_ssize_t P_IN_FLIGHT = _slot(Reputs, "in_flight", False)
cdef Py_ssize_t P_IN_PROPS = _slot(Reputs, "in_flight_props", False)
cdef Py_ssize_t P_UNDO = _slot(Reputs, "undo", False)


cdef object _marks_of(object recalled):
    """The marks set of ``recalled`` when it is ``LevelRecalls.pass_record`` bound to a
    ``LevelRecalls`` whose marks are a ``set`` (what the broker wires), else None (then
    ``recalled`` itself is called per record)."""
    if type(recalled) is not _MethodType or (<object>recalled).__func__ is not _pass_record:
        return None
    marks = getattr((<object>recalled).__self__, "marks", None)
    return marks if type(marks) is set else None


cdef inline bint _pass(set marks, object phy) except -1:
    """``LevelRecalls.pass_record(phy)``: True (and the mark dropped) if ``phy`` is marked."""
    if phy in marks:
        marks.discard(phy)
        return True
    return False


cdef class _Settle:
    """``_drain``'s ``settle`` closure: called by ``put_many`` after each DONE or SKIP. The
    service's ``progress`` and ``on_delivered`` are read once per batch (nothing rebinds
    them during a drain); an ``Attempt``'s fields are read by index."""

    cdef object service, start, now, progress, on_delivered
    cdef list due
    cdef public list done

    def __cinit__(self, service, list due, start, now):
        self.service = service
        self.due = due
        self.start = start
        self.now = now
        self.progress = service.progress
        self.on_delivered = service.on_delivered
        self.done = []

    def __call__(self, attempt, level, off):
        phy, _size, deliver_ts = self.due[off - self.start]
        if type(attempt) is _Attempt:  # the named tuple's fields by index
            outcome = (<tuple>attempt)[0]
            reason = (<tuple>attempt)[3]
        else:
            outcome = attempt.outcome
            reason = attempt.reason
        if outcome is _SKIP and reason is not _RECALLED:
            self.service._skip(level, off, phy, reason)
            return
        progress = self.progress
        if progress[level] <= off:  # dispatch did not see the origin: never loop
            progress[level] = off + 1
        if outcome is _DONE and self.on_delivered is not None:
            if type(attempt) is _Attempt:
                target = (<tuple>attempt)[2]
                result = (<tuple>attempt)[1]
            else:
                target = attempt.target
                result = attempt.result
            assert target is not None and result is not None
            self.done.append((target, result, level, off, deliver_ts, self.now, _time()))


def drain(self, level, cq):
    """``ScheduleService._drain``."""
    cdef list due = []
    cdef list units
    cdef bint whole
    progress = self.progress
    start = progress[level]
    now = self.clock_ms()
    store = self.store
    log_min = store.commitlog.min_offset
    cap = self._cap.get(level)
    stepped = now + self.levels_ms[level - 1]
    pos, want, chunk = start, self.batch, _FIRST_CHUNK
    while want > 0:
        got = cq.units(pos, min(chunk, want))
        if not got:
            break
        whole = True
        for unit in got:
            due_ts = unit[2]
            if cap is not None and due_ts > stepped:
                due_ts = min(due_ts, cap)
            if due_ts > now:
                want = 0
                whole = False
                break
            if unit[0] < log_min and not due:  # removed by retention: nothing to deliver
                start += 1
                progress[level] = start
                continue
            due.append(unit)
        if whole:
            pos += len(got)
            want -= len(got)
            chunk *= 4
    if not due:
        return True
    records = store.commitlog.read_many([(u[0], u[1]) for u in due])
    if len(records) < len(due):
        due = due[: len(records)]  # a read failed: retry the rest on the next round
    recalled = self.recalled
    marks = _marks_of(recalled)
    if marks is not None:  # ``LevelRecalls.pass_record``'s steps, its marks read once
        batch = [
            (None if _pass(<set>marks, u[0]) else records[i], level, start + i)
            for i, u in enumerate(due)
        ]
    else:
        batch = [
            (None if recalled is not None and recalled(u[0]) else records[i], level, start + i)
            for i, u in enumerate(due)
        ]
    settle = _Settle(self, due, start, now)
    try:
        settled = self.reputs.put_many(batch, _RECALLED, settle)
    finally:
        if settle.done and self.on_delivered is not None:
            self.on_delivered(settle.done)
    return settled == len(batch)  # else a RETRY: the same record on the next round


cdef object _on_dispatch(self, req, props, phy, size):
    """``ScheduleService.on_dispatch`` of a ``DispatchRequest`` whose properties are
    ``props`` (and offset ``phy``, unless ``_UNSET``); ``size`` unused (the shared
    signature)."""
    if _field(req, R_TOPIC, "topic") == _SCHEDULE_TOPIC:
        return None
    reputs = self.reputs
    if type(reputs) is not _Reputs:
        return _pure.on_dispatch(self, req)
    if props is not _field(reputs, P_IN_PROPS, "in_flight_props") or _field(req, R_REPLAY, "replay"):
        return _pure.on_dispatch(self, req)  # another record: the reference parses it
    parsed = _field(reputs, P_IN_FLIGHT, "in_flight")
    if type(parsed) is not tuple or len(<tuple>parsed) != 2:
        return _pure.on_dispatch(self, req)
    level = (<tuple>parsed)[0]
    off = (<tuple>parsed)[1]
    progress = self.progress
    prev = progress[level]
    if prev <= off:
        progress[level] = off + 1
        if not _field(req, R_REPLAY, "replay"):
            if phy is _UNSET:
                phy = _field(req, R_PHY, "phy_offset")
            _undo_note(_field(reputs, P_UNDO, "undo"), phy, (level, prev))
    return None


def on_dispatch(self, req):
    """``ScheduleService.on_dispatch``."""
    if type(req) is not _Request:
        return _pure.on_dispatch(self, req)
    return _on_dispatch(self, req, _field(req, R_PROPS, "properties"), _UNSET, None)


ctypedef object (*_listener_t)(object, object, object, object, object)
cdef _listener_t _on_dispatch_fn = _on_dispatch
# ``on_dispatch`` for the message-store twin, which calls it as a C function for a
# listener that is this module's ``on_dispatch`` bound to a service
DISPATCH = PyCapsule_New(
    <void*>_on_dispatch_fn, b"kairosmq.server.schedule.delay._service.DISPATCH", NULL
)
