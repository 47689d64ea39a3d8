# cython: language_level=3, boundscheck=False, wraparound=True
"""Native twin of ``window.py``'s ``TimerWindow.take_due`` (chosen by
``protocol/native.py``; ``window.py`` is the reference and owns the window's rules).

``take_due`` is the reference's loop step for step in C: the earlier of the heap's and
the run's heads, the same ``heapq.heappop`` or ``list.pop``, the ``(due, phy) <= cursor``
test element by element as a tuple compares (the first pair of elements that are not
equal decides), the recalled marks discarded, the same entries out. A heap or run that
is not a list, a mark set that is not a set or a cursor that is not a pair go to the
reference.
"""

from cpython.object cimport Py_EQ, Py_LE, Py_LT, PyObject_RichCompareBool

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
    cdef list out, heap, run
    heap_o, run_o = self.heap, self.run
    if (
        type(heap_o) is not list
        or type(run_o) is not list
        or type(cancelled) is not set
        or type(cursor) is not tuple
        or len(<tuple>cursor) != 2
    ):
        return _pure.take_due(self, now, limit, cursor, cancelled)
    heap, run = heap_o, run_o
    out = []
    while len(out) < limit:
        if heap and (not run or PyObject_RichCompareBool(heap[0], run[-1], Py_LT)):
            if heap[0][0] > now:
                break
            e = _heappop(heap)
        elif run and run[-1][0] <= now:
            e = run.pop()
        else:
            break
        phy = e[1]
        if _at_or_below(e[0], phy, <tuple>cursor) or phy in <set>cancelled:
            (<set>cancelled).discard(phy)
            continue
        out.append(e)
    return out
