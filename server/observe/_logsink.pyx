# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``logsink.py``'s ``BufferedSink.write`` (chosen by
``protocol/native.py``; ``logsink.py`` is the reference and owns the sinks' rules).

``write`` appends the line to the pending list and counts it under the sink's lock, as
the reference does, without a Python frame: the hot-path log writer calls it once per
logged message (``WRITE``: the same as a C function, which ``_logs.pyx``'s
``LineEmitter`` calls for a sink whose ``write`` is this one). The lock (a
``threading.Lock``: its ``with`` is ``acquire()`` then ``release()``) is taken by those
two calls, without looking up ``__enter__`` and ``__exit__`` and calling the latter with
three Nones. For a sink of the classes ``logsink.py`` defines (``BufferedSink``,
``StreamSink``, ``RotatingJsonSink``) the lock, the pending list and the count are read
and written in their slots (``BufferedSink.__slots__``; the offsets their member
descriptors use, read at import: a field not laid out so fails the import and the pure
core runs); a sink of another class is read through its attributes.
"""

from cpython.object cimport PyObject
from cpython.pycapsule cimport PyCapsule_New
from protocol._slots cimport _get, _put, _slot

from _thread import LockType

from . import logsink as _ref

cdef object _LockType = LockType
cdef object _acquire = LockType.acquire
cdef object _release = LockType.release
cdef object _BufferedSink = _ref.BufferedSink
cdef object _StreamSink = _ref.StreamSink
cdef object _RotatingJsonSink = _ref.RotatingJsonSink
cdef Py_ssize_t S_LOCK = _slot(_BufferedSink, "_lock")
cdef Py_ssize_t S_PENDING = _slot(_BufferedSink, "_pending")
cdef Py_ssize_t S_ENQUEUED = _slot(_BufferedSink, "_enqueued")


def write(self, line):
    """``BufferedSink.write``."""
    _write(self, line)


cdef int _write(object self, object line) except -1:
    """``write``'s body (``WRITE``)."""
    cdef type t = type(self)
    if t is _BufferedSink or t is _StreamSink or t is _RotatingJsonSink:
        lock = _get(self, S_LOCK)
        if type(lock) is _LockType:
            _acquire(lock)
            try:
                pending = _get(self, S_PENDING)
                if type(pending) is list:
                    (<list>pending).append(line)
                else:
                    pending.append(line)
                _put(self, S_ENQUEUED, _get(self, S_ENQUEUED) + 1)
            finally:
                _release(lock)
            return 0
    lock = self._lock
    if type(lock) is not _LockType:  # another lock: its own ``with``
        with lock:
            self._pending.append(line)
            self._enqueued += 1
        return 0
    lock.acquire()
    try:
        self._pending.append(line)
        self._enqueued += 1
    finally:
        lock.release()
    return 0


ctypedef int (*write_fn)(object, object) except -1
cdef write_fn _write_ptr = _write
# ``write`` as a C function for the hot-path log writer (``_logs.pyx``)
WRITE = PyCapsule_New(<void*>_write_ptr, b"kairosmq.server.observe._logsink.WRITE", NULL)
