# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``logsink.py``'s ``BufferedSink.write`` (chosen by
``protocol/native.py``; ``logsink.py`` is the reference and owns the sinks' rules).

``write`` appends the line to the pending list and counts it under the sink's lock, as
the reference does, without a Python frame: the hot-path log writer calls it once per
logged message. The lock (a ``threading.Lock``: its ``with`` is ``acquire()`` then
``release()``) is taken by those two calls, without looking up ``__enter__`` and
``__exit__`` and calling the latter with three Nones.
"""

from _thread import LockType

cdef object _LockType = LockType


def write(self, line):
    """``BufferedSink.write``."""
    lock = self._lock
    if type(lock) is not _LockType:  # another lock: its own ``with``
        with lock:
            self._pending.append(line)
            self._enqueued += 1
        return
    lock.acquire()
    try:
        self._pending.append(line)
        self._enqueued += 1
    finally:
        lock.release()
