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

``on_dispatch`` stays the reference's: measured (callgrind, a fire turn of 1,500 timers),
a twin of its fired-copy branch cost ~1.2k instructions more per timer than the
interpreter's specialised attribute reads, and every timer record's dispatch paid a call
more to reach the reference through it.
"""

from cpython.object cimport Py_EQ, Py_LE, Py_LT, PyObject_RichCompareBool

import time

from ...store.record_check import stored_physical_offset
from ..reput import Outcome
from . import service as _ref

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
