# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``reput.py``'s restores and of ``Reputs.put_many`` (chosen by
``protocol/native.py``; ``reput.py`` is the reference and owns every rule of a re-put).

``restore_delayed_view`` and ``restore_timer_view`` read the record's layout (the
record twin) and build the properties to store in one pass over the properties' text,
with no Python frame of their own and no dict of every property first (``_stripped``:
``decode_properties``' split, the strip table applied as each pair is read, the values
of the kept and target names noted): the strip table, the kept names, the origin and
the target's REAL_TOPIC/REAL_QID check mirrored from ``reput.py``. A record
that cannot be read, a REAL_QID that is not a queue id or REAL_TOPIC/REAL_QID that do
not name a queue go to the reference, which raises its ``RequeueError``.

``put_many`` is ``Reputs.put_many``'s loop step for step (the origin in flight around
each write, the outcome of each attempt, ``settle`` right after each DONE or SKIP, the
stop at the first RETRY), its ``Attempt`` and ``Target`` made without their Python
constructors' frames.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.set cimport PySet_Contains
from libc.stdio cimport snprintf
from cpython.unicode cimport PyUnicode_DecodeUTF8, PyUnicode_GET_LENGTH, PyUnicode_Substring

cdef extern from "Python.h":
    object PyUnicode_DecodeASCII(const char* s, Py_ssize_t size, const char* errors)
    Py_ssize_t PyUnicode_FindChar(object s, Py_UCS4 ch, Py_ssize_t start, Py_ssize_t end,
                                  int direction) except -2

from kairosmq.protocol.errors import MessageDecodeError
from kairosmq.protocol.message import RecordView, view_record
from kairosmq.protocol.properties import (
    INT32_DIGITS,
    REAL_QID,
    REAL_TOPIC,
    SCHEDULE_ORIGIN,
    TIMER_ORIGIN,
)
from kairosmq.protocol.timer import TIMER_OUT_MS

from . import reput as _ref

cdef object _pure = _ref.reference
cdef frozenset _INTERNAL = frozenset(_ref.INTERNAL_PROPERTIES)
cdef frozenset _TIMER_STRIP = frozenset(_ref._TIMER_STRIP)
cdef tuple _KEEP = _ref._KEEP_ON_REPUT
cdef Py_ssize_t _QID_DIGITS = INT32_DIGITS
cdef object _tuple_new = tuple.__new__
cdef object _new = object.__new__
cdef object _RecordView = RecordView


cdef object _qid(object raw):
    """``parse_decimal(raw, INT32_DIGITS)``: None unless 1..9 ASCII digits."""
    cdef Py_ssize_t n
    cdef Py_UCS4 c
    cdef long d, v = 0
    if type(raw) is not str:
        return None
    n = len(<str>raw)
    if n == 0 or n > _QID_DIGITS or not (<str>raw).isascii():
        return None
    for c in <str>raw:
        d = <long>c - 48
        if d < 0 or d > 9:
            return None
        v = v * 10 + d
    return v


cdef frozenset _DELAYED_WANTED = frozenset((REAL_TOPIC, REAL_QID, *_KEEP))
cdef frozenset _TIMER_WANTED = frozenset((REAL_TOPIC, REAL_QID))
# whether a wanted name may be one the strip table keeps (then each kept name is checked)
cdef bint _DELAYED_CHECK = not _DELAYED_WANTED <= _INTERNAL
cdef bint _TIMER_CHECK = not _TIMER_WANTED <= _TIMER_STRIP


cdef str _origin(object a, object b):
    """``f"{a}:{b}"``: two ``int`` written in C, anything else by the f-string."""
    cdef long long x, y
    cdef char buf[48]
    cdef int n
    if type(a) is int and type(b) is int:
        try:
            x = a
            y = b
        except OverflowError:
            return f"{a}:{b}"
        n = snprintf(buf, sizeof(buf), "%lld:%lld", x, y)
        return PyUnicode_DecodeASCII(buf, n, NULL)
    return f"{a}:{b}"


cdef tuple _read(bytes record):
    """The record's view and its properties' text, or None (the reference raises)."""
    cdef Py_ssize_t ps, pe
    try:
        view = view_record(record)
        if type(view) is _RecordView:
            # the properties decoded where they lie (no slice copied first): the
            # named tuple's props_start and props_end by index
            ps, pe = (<tuple>view)[10], (<tuple>view)[11]
            if 0 <= ps <= pe <= PyBytes_GET_SIZE(record):
                text = PyUnicode_DecodeUTF8(PyBytes_AS_STRING(record) + ps, pe - ps, NULL)
            else:
                text = record[view.props_start : view.props_end].decode()
        else:
            text = record[view.props_start : view.props_end].decode()
    except (MessageDecodeError, UnicodeDecodeError, OverflowError):
        return None
    if type(text) is not str:
        return None
    return view, text


cdef dict _stripped(str text, frozenset strip, frozenset wanted, bint check_kept, dict seen):
    """``stripped(decode_properties(text), strip)`` in one pass over ``text`` (no dict of
    every property first), and in ``seen`` the values of the ``wanted`` names, as the
    decoded dict would hold them. The decode is ``decode_properties``' (pairs split at
    ``\\x02``, name and value at the first ``\\x01``, each non-empty, a later value of a
    name kept at the name's first place): a name left in keeps that place and the last
    value, as the reference's dict comprehension over the decoded dict gives."""
    cdef dict new = {}
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text), start = 0, end, nv
    if n == 0:
        return new
    while start <= n:
        end = PyUnicode_FindChar(text, 0x02, start, n, 1)
        if end < 0:
            end = n
        nv = PyUnicode_FindChar(text, 0x01, start, end, 1)
        if nv > start and nv + 1 < end:
            k = PyUnicode_Substring(text, start, nv)
            if PySet_Contains(strip, k):
                if PySet_Contains(wanted, k):
                    seen[k] = PyUnicode_Substring(text, nv + 1, end)
            else:
                v = PyUnicode_Substring(text, nv + 1, end)
                new[k] = v
                if check_kept and PySet_Contains(wanted, k):
                    seen[k] = v
        start = end + 1
    return new


def restore_delayed_view(record, level, schedule_offset):
    """``reput.restore_delayed_view``."""
    cdef dict seen = {}, new
    if type(record) is not bytes:
        return _pure.restore_delayed_view(record, level, schedule_offset)
    got = _read(<bytes>record)
    if got is None:
        return _pure.restore_delayed_view(record, level, schedule_offset)
    view, text = got
    new = _stripped(<str>text, _INTERNAL, _DELAYED_WANTED, _DELAYED_CHECK, seen)
    qid = _qid(seen.get(REAL_QID, "0"))
    if qid is None:
        return _pure.restore_delayed_view(record, level, schedule_offset)
    topic = seen.get(REAL_TOPIC)
    if topic is None:
        topic = view.topic
    for k in _KEEP:
        if k in seen:
            new[k] = seen[k]
    new[SCHEDULE_ORIGIN] = _origin(level, schedule_offset)
    return view, topic, qid, new


def restore_timer_view(record, due, phy):
    """``reput.restore_timer_view``."""
    cdef dict seen = {}, new
    if type(record) is not bytes:
        return _pure.restore_timer_view(record, due, phy)
    got = _read(<bytes>record)
    if got is None:
        return _pure.restore_timer_view(record, due, phy)
    view, text = got
    new = _stripped(<str>text, _TIMER_STRIP, _TIMER_WANTED, _TIMER_CHECK, seen)
    topic = seen.get(REAL_TOPIC, "")
    qid = _qid(seen.get(REAL_QID, "0"))
    if not topic or qid is None:
        return _pure.restore_timer_view(record, due, phy)
    new[TIMER_OUT_MS] = str(due)
    new[TIMER_ORIGIN] = _origin(due, phy)
    return view, topic, qid, new


def put_many(reputs, items, unread, settle):
    """``reput.Reputs.put_many``."""
    cdef Py_ssize_t i = 0
    Attempt, Target, Outcome = _ref.Attempt, _ref.Target, _ref.Outcome
    RequeueError, ok, permanent = _ref.RequeueError, _ref.PutStatus.PUT_OK, _ref.PERMANENT
    DONE, SKIP, RETRY = Outcome.DONE, Outcome.SKIP, Outcome.RETRY
    restore, put_patched = reputs.restore, reputs.put_patched
    for record, a, b in items:
        if record is None:
            settle(_tuple_new(Attempt, (SKIP, None, None, unread)), a, b)
            i += 1
            continue
        reputs.in_flight = (a, b)
        try:
            view, topic, queue_id, props = restore(record, a, b)
            reputs.in_flight_props = props
            result = put_patched(record, view, topic, queue_id, props)
        except RequeueError as err:
            reason = f"cannot restore the message: {err}"
            settle(_tuple_new(Attempt, (SKIP, None, None, reason)), a, b)
            i += 1
            continue
        finally:
            reputs.in_flight = None
            reputs.in_flight_props = None
        target = _new(Target)  # Target.__init__'s four fields
        target.topic = topic
        target.queue_id = queue_id
        target.properties = props
        target.reconsume_times = view.reconsume_times
        status = result.status
        if status is ok:
            settle(_tuple_new(Attempt, (DONE, result, target, "")), a, b)
        elif status in permanent:
            reason = f"the re-put was refused: {result.remark or status.value}"
            settle(_tuple_new(Attempt, (SKIP, result, target, reason)), a, b)
        else:
            reputs.last_retry = _tuple_new(Attempt, (RETRY, result, target, ""))
            return i
        i += 1
    return i
