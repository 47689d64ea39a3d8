# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``window.py``'s ``TimerWindow.take_due`` (chosen by
``protocol/native.py``; ``window.py`` is the reference and owns the window's rules).

``take_due`` is the reference's loop step for step in C: the same ``heapq.heappop``, the
``(due, phy) <= cursor`` test element by element as a tuple compares (the first pair of
elements that are not equal decides), the recalled marks discarded, the same entries out.
A heap that is not a list, a mark set that is not a set or a cursor that is not a pair
go to the reference.
"""

from cpython.object cimport Py_EQ, Py_LE, PyObject_RichCompareBool

import heapq

from . import window as _ref

cdef object _pure = _ref.reference
cdef object _heappop = heapq.heappop


cdef inline bint _at_or_below(object due, object phy, tuple cursor) except -1:
    """``(due, phy) <= cursor`` (a 2-tuple), as tuple comparison decides it."""
    c0 = cursor[0]
    if not PyObject_RichCompareBool(due, c0, Py_EQ):
        return PyObject_RichCompareBool(due, c0, Py_LE)
    c1 = cursor[1]
    if not PyObject_RichCompareBool(phy, c1, Py_EQ):
        return PyObject_RichCompareBool(phy, c1, Py_LE)
    return True


def take_due(self, now, Py_ssize_t limit, cursor, cancelled):
    """``TimerWindow.take_due``."""
    cdef list out, heap
    heap_o = self.heap
    if (
        type(heap_o) is not list
        or type(cancelled) is not set
        or type(cursor) is not tuple
        or len(<tuple>cursor) != 2
    ):
        return _pure.take_due(self, now, limit, cursor, cancelled)
    heap = heap_o
    out = []
    while heap and heap[0][0] <= now and len(out) < limit:
        e = _heappop(heap)
        phy = e[1]
        if _at_or_below(e[0], phy, <tuple>cursor) or phy in <set>cancelled:
            (<set>cancelled).discard(phy)
            continue
        out.append(e)
    return out
