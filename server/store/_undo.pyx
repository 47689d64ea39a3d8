# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``undo.py``'s ``UndoLog.add`` (chosen by ``protocol/native.py``;
``undo.py`` is the reference and owns the undo log's rules).

``add`` is the reference's step for step (the append, the amortised trim of the entries
below the written offset and the next trim threshold), in C: the dispatch listeners of
the scheduler and the timers call it once per re-put. It never defers: there is no case
it does not mirror. ``ADD`` is a capsule of it as a C function (``object (object self,
object phy_offset, object item)``): the delay and timer services' listener twins call it
with no Python call for an undo log whose class's ``add`` is this module's.
"""

from cpython.pycapsule cimport PyCapsule_New

from . import undo as _ref

cdef Py_ssize_t _TRIM_AT = _ref.TRIM_AT


def add(self, phy_offset, item):
    """``UndoLog.add``."""
    _add(self, phy_offset, item)


cdef object _add(self, phy_offset, item):
    """``add``'s body (the services' listener twins call it through ``ADD``)."""
    cdef list entries, kept
    cdef Py_ssize_t n
    entries = self._entries
    entries.append((phy_offset, item))
    if len(entries) > self._trim_at:
        written = self._written()
        kept = []
        for e in entries:
            if e[0] >= written:
                kept.append(e)
        self._entries = entries = kept
        n = 2 * len(entries)
        self._trim_at = _TRIM_AT if _TRIM_AT >= n else n
    return None


ctypedef object (*_add_t)(object, object, object)
cdef _add_t _add_fn = _add
ADD = PyCapsule_New(<void*>_add_fn, b"kairosmq.server.store._undo.ADD", NULL)
