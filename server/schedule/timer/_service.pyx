# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``service.py``'s fire path: ``TimerService._fire`` and ``._settle``
(chosen by ``protocol/native.py``; ``service.py`` is the reference and owns every rule of
the timers).

* ``_fire`` is the reference's turn step for step in one C frame: ``take_due``, one
  ``read_many`` of the sized entries, the batch (each timer once, in ``(due, phy)``
  order, its record or None when it cannot be read or names another offset, by
  ``record_check.stored_physical_offset``), ``Reputs.put_many`` with ``_settle``, the
  turn's ``on_fired`` and the RETRY's entries back at the head.
* ``_settle`` mirrors a DONE (the cursor past it, the ``Fired`` row with the wall clock
  read right then); a SKIP, or a DONE without its target or result, goes to the
  reference.

``on_dispatch`` (``TimerService.on_dispatch``) mirrors the reference's fired-copy case
only, the fire being made (the request's properties the in-flight ones, not a replay): the
cursor moved to its ``(due, phy)`` when that is past it, and its undo noted (the undo twin's ``add`` called as C, ``_undo.ADD``, when
it is the undo log's). Anything else
(a record of the timer topic: a timer, a recall; another record with an origin; a
``Reputs`` of another class, an in-flight pair that is not a tuple of two) is handed to the
reference before anything is changed. ``DISPATCH`` is a capsule of its C function (the
signature of ``_index.DISPATCH_LIVE``): the message-store twin calls it with no Python
call for a listener that is this ``on_dispatch`` bound to a service. (A ``def`` twin
alone, called as Python, measured ~1.2k instructions more per timer than the
interpreter's specialised attribute reads; called from C it saves the frame.)
"""

from cpython.object cimport Py_EQ, Py_LE, Py_LT, PyObject, PyObject_RichCompareBool, PyTypeObject, Py_TYPE
from cpython.pycapsule cimport PyCapsule_New
from protocol._capsules cimport _c_function
from protocol._slots cimport _field, _slot

import time

from kairosmq.protocol.naming import TIMER_TOPIC

from ...store.record_check import stored_physical_offset
from ...store.types import DispatchRequest
from ..reput import Outcome, Reputs
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
cdef object _SKIP = Outcome.SKIP
cdef object _time = time.time
cdef object _stored_phy = stored_physical_offset
cdef object _tuple_new = tuple.__new__
cdef str _UNREAD = _ref._UNREAD
cdef object _Attempt = _ref.Attempt


cdef inline bint _pair_lt(object a0, object a1, object b0, object b1) except -1:
    """``(a0, a1) < (b0, b1)``, as tuple comparison decides it."""
    if not PyObject_RichCompareBool(a0, b0, Py_EQ):
        return PyObject_RichCompareBool(a0, b0, Py_LT)
    if not PyObject_RichCompareBool(a1, b1, Py_EQ):
        return PyObject_RichCompareBool(a1, b1, Py_LT)
    return False


cdef inline bint _pair_le(object a0, object a1, object b0, object b1) except -1:
    """``(a0, a1) <= (b0, b1)``, as tuple comparison decides it."""
    if not PyObject_RichCompareBool(a0, b0, Py_EQ):
        return PyObject_RichCompareBool(a0, b0, Py_LE)
    if not PyObject_RichCompareBool(a1, b1, Py_EQ):
        return PyObject_RichCompareBool(a1, b1, Py_LE)
    return True


def _settle(self, attempt, due, phy):
    """``TimerService._settle``."""
    cdef tuple a
    if type(attempt) is not _Attempt:
        return _pure._settle(self, attempt, due, phy)
    a = <tuple>attempt
    on_fired = self.on_fired
    if a[0] is _SKIP or (on_fired is not None and (a[2] is None or a[1] is None)):
        return _pure._settle(self, attempt, due, phy)
    cursor = self.cursor
    if type(cursor) is tuple and len(<tuple>cursor) == 2:
        behind = _pair_lt((<tuple>cursor)[0], (<tuple>cursor)[1], due, phy)
    else:
        behind = cursor < (due, phy)
    if behind:  # dispatch did not see the origin: never loop
        self.cursor = (due, phy)
    if on_fired is not None:
        (<list>self._fired).append((a[2], a[1], due, _time()))


def _fire(self, now):
    """``TimerService._fire``."""
    cdef Py_ssize_t fired = 0, batch_n, settled, i, n
    cdef list due_now, sized, batch, read
    cdef dict recs
    cdef tuple e
    if type(self._fired) is not list:
        return _pure._fire(self, now)
    batch_n = self.batch
    window = self.window
    store = self.store
    reputs = self.reputs
    settle = self._settle
    while fired < batch_n:
        due_now = window.take_due(now, batch_n - fired, self.cursor, self._cancelled)
        if not due_now:
            break
        sized = []
        for e in due_now:
            if e[2] > 0:
                sized.append((e[1], e[2]))
        read = store.commitlog.read_many(sized)
        recs = {}
        n = min(len(sized), len(read))
        for i in range(n):
            recs[(<tuple>sized[i])[0]] = read[i]
        batch = []
        last_due, last_phy = self.cursor
        for e in due_now:
            due, phy, size = e
            if _pair_le(due, phy, last_due, last_phy):
                continue
            last_due, last_phy = due, phy
            rec = recs.get(phy) if size > 0 else store.read_at(phy)
            if rec is not None and _stored_phy(rec) != phy:
                rec = None
            batch.append((rec, due, phy))
        try:
            settled = reputs.put_many(batch, _UNREAD, settle)
        finally:
            if self._fired:
                done = self._fired
                self._fired = []
                on_fired = self.on_fired
                if on_fired is not None:
                    on_fired(done)
        fired += settled
        if settled < len(batch):  # a RETRY: it and the rest back at the head
            cursor = self.cursor
            for e in due_now:  # nothing overtakes them
                if not _pair_le(e[0], e[1], cursor[0], cursor[1]):
                    window.push(e)
            return False
    return True


cdef str _TIMER_TOPIC = TIMER_TOPIC
cdef object _Request = DispatchRequest
cdef Py_ssize_t R_TOPIC = _slot(DispatchRequest, "topic", False)
cdef Py_ssize_t R_REPLAY = _slot(DispatchRequest, "replay", False)
cdef Py_ssize_t R_PROPS = _slot(DispatchRequest, "properties", False)
cdef Py_ssize_t R_PHY = _slot(DispatchRequest, "phy_offset", False)
cdef object _Reputs = Reputs  # its fields the listener reads, by offset (its slots)
cdef Py_ssize_t P_IN_FLIGHT = _slot(Reputs, "in_flight", False)
cdef Py_ssize_t P_IN_PROPS = _slot(Reputs, "in_flight_props", False)
cdef Py_ssize_t P_UNDO = _slot(Reputs, "undo", False)


cdef object _on_dispatch(self, req, props, phy, size):
    """``TimerService.on_dispatch`` of a live ``DispatchRequest`` whose properties are
    ``props`` and offset ``phy`` (``size`` unused: the shared signature)."""
    cdef tuple pair, cursor
    if (
        _field(req, R_TOPIC, "topic") == _TIMER_TOPIC
        or _field(req, R_REPLAY, "replay")
    ):
        return _pure.on_dispatch(self, req)  # a timer, a recall, a replay: the reference
    reputs = self.reputs
    if (
        type(reputs) is not _Reputs
        or props is not _field(reputs, P_IN_PROPS, "in_flight_props")
    ):
        return _pure.on_dispatch(self, req)  # another record: the reference parses it
    flying = _field(reputs, P_IN_FLIGHT, "in_flight")
    current = self.cursor
    if (
        type(flying) is not tuple or len(<tuple>flying) != 2
        or type(current) is not tuple or len(<tuple>current) != 2
    ):
        return _pure.on_dispatch(self, req)
    pair = <tuple>flying
    cursor = <tuple>current
    if (
        type(pair[0]) is int and type(pair[1]) is int
        and type(cursor[0]) is int and type(cursor[1]) is int
    ):
        ahead = _pair_lt(cursor[0], cursor[1], pair[0], pair[1])  # ``pair > self.cursor``
    else:
        ahead = pair > cursor
    if ahead:
        self.cursor = pair
        _undo_note(_field(reputs, P_UNDO, "undo"), phy, (cursor, (pair[0], pair[1], 0)))
    return None


def on_dispatch(self, req):
    """``TimerService.on_dispatch``."""
    if type(req) is not _Request:
        return _pure.on_dispatch(self, req)
    return _on_dispatch(
        self, req, _field(req, R_PROPS, "properties"), _field(req, R_PHY, "phy_offset"), None
    )


ctypedef object (*_listener_t)(object, object, object, object, object)
cdef _listener_t _on_dispatch_fn = _on_dispatch
# ``on_dispatch`` for the message-store twin, which calls it as a C function for a
# listener that is this module's ``on_dispatch`` bound to a service
DISPATCH = PyCapsule_New(
    <void*>_on_dispatch_fn, b"kairosmq.server.schedule.timer._service.DISPATCH", NULL
)
