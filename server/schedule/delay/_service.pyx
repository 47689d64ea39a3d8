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
noted for ``on_delivered``. (``on_dispatch`` stays the reference's: measured, a twin of
it cost more than the interpreter's specialised attribute reads.)
"""

from time import time as _time

from types import MethodType

from ..recalls import LevelRecalls
from ..reput import Attempt, Outcome
from . import service as _ref

cdef object _pure = _ref.reference
cdef object _DONE = Outcome.DONE
cdef object _SKIP = Outcome.SKIP
cdef object _Attempt = Attempt
cdef object _RECALLED = _ref._RECALLED  # the very object: compared by identity
cdef object _FIRST_CHUNK = _ref._FIRST_CHUNK
cdef object _MethodType = MethodType
cdef object _pass_record = LevelRecalls.pass_record


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
