# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``reput.py``'s restores and of ``Reputs.put_many`` (chosen by
``protocol/native.py``; ``reput.py`` is the reference and owns every rule of a re-put).

``restore_delayed_view`` and ``restore_timer_view`` read the record's layout (the
record twin) and build the properties to store in one pass over the properties' text,
with no Python frame of their own and no dict of every property first (``_stripped``:
``decode_properties``' split, the strip table applied as each pair is read, the values
of the kept and target names noted; a text of one byte per character is read in
place, the names records usually hold matched against a table built at import instead
of being made, hashed and looked up per pair; the origin and ``TIMER_OUT_MS`` written
in C): the strip table, the kept names, the origin and the target's REAL_TOPIC/REAL_QID
check mirrored from ``reput.py``. A record
that cannot be read, a REAL_QID that is not a queue id or REAL_TOPIC/REAL_QID that do
not name a queue go to the reference, which raises its ``RequeueError``.

``put_many`` is ``Reputs.put_many``'s loop step for step (the origin in flight around
each write, the outcome of each attempt, ``settle`` right after each DONE or SKIP, the
stop at the first RETRY), its ``Attempt`` and ``Target`` made without their Python
constructors' frames, ``Reputs``' and ``Target``'s fields read and written in their slots,
and the restore and the store put called as C functions when they are this module's
restores and the store twin's ``put_patched`` bound to a store (``_message_store.
PUT_PATCHED``; ``c_calls`` says whether it was found); any other restore or put (a test's
wrapper) is called as Python. A ``Reputs`` of another class, or with a field unset, goes to
the reference.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.method cimport PyMethod_Check, PyMethod_GET_FUNCTION, PyMethod_GET_SELF
from cpython.pycapsule cimport PyCapsule_GetPointer
from cpython.ref cimport PyObject
from cpython.set cimport PySet_Contains
from libc.string cimport memchr, memcmp
from cpython.unicode cimport PyUnicode_DecodeUTF8, PyUnicode_GET_LENGTH, PyUnicode_Substring
from protocol._slots cimport _at, _put, _slot

from sys import modules as _sys_modules

cdef extern from "Python.h":
    object PyUnicode_DecodeASCII(const char* s, Py_ssize_t size, const char* errors)
    Py_ssize_t PyUnicode_FindChar(object s, Py_UCS4 ch, Py_ssize_t start, Py_ssize_t end,
                                  int direction) except -2
    int PyUnicode_KIND(object s)
    void* PyUnicode_DATA(object s)
    int PyUnicode_1BYTE_KIND

from kairosmq.protocol.errors import MessageDecodeError
from kairosmq.protocol.message import RecordView, view_record
from kairosmq.protocol import properties as _properties
from kairosmq.protocol.properties import (
    INT32_DIGITS,
    REAL_QID,
    REAL_TOPIC,
    SCHEDULE_ORIGIN,
    TIMER_ORIGIN,
)
from kairosmq.protocol.timer import TIMER_OUT_MS

from ..store.types import PutResult
from . import reput as _ref

cdef object _pure = _ref.reference
cdef frozenset _INTERNAL = frozenset(_ref.INTERNAL_PROPERTIES)
cdef frozenset _TIMER_STRIP = frozenset(_ref._TIMER_STRIP)
cdef tuple _KEEP = _ref._KEEP_ON_REPUT
cdef Py_ssize_t _QID_DIGITS = INT32_DIGITS
cdef extern from *:
    """
    /* tuple.__new__(type, (a, b, c, d)) for a tuple subclass: its tuple_subtype_new's
       steps (the type's tp_alloc of 4 items, each item referenced) without the call */
    static PyObject* kairos_tuple4(PyObject* type, PyObject* a, PyObject* b, PyObject* c,
                                   PyObject* d) {
        PyTypeObject* tp = (PyTypeObject*)type;
        PyObject* t = tp->tp_alloc(tp, 4);
        if (t == NULL) return NULL;
        Py_INCREF(a); PyTuple_SET_ITEM(t, 0, a);
        Py_INCREF(b); PyTuple_SET_ITEM(t, 1, b);
        Py_INCREF(c); PyTuple_SET_ITEM(t, 2, c);
        Py_INCREF(d); PyTuple_SET_ITEM(t, 3, d);
        return t;
    }
    /* object.__new__(type): object's tp_new with no arguments, without the call */
    static PyObject* kairos_object_new(PyObject* type) {
        PyObject* none = PyTuple_New(0);
        PyObject* o;
        if (none == NULL) return NULL;
        o = PyBaseObject_Type.tp_new((PyTypeObject*)type, none, NULL);
        Py_DECREF(none);
        return o;
    }
    """
    object kairos_tuple4(object type, object a, object b, object c, object d)
    object kairos_object_new(object type)


# ``reput.py`` loads this module before it defines ``Attempt``, ``Target`` and ``Reputs``:
# they are looked up at the first ``put_many`` (``_shapes``)
cdef object _Attempt = None
cdef object _Target = None
cdef object _Reputs = None
cdef int _SHAPES = 0  # 0: not looked up yet, 1: the twin makes them, -1: the reference does
# ``Reputs``' fields ``put_many`` reads and writes, by offset (its slots)
cdef Py_ssize_t P_RESTORE = 0, P_PUT = 0, P_IN_FLIGHT = 0, P_IN_PROPS = 0, P_LAST_RETRY = 0
# ``Target``'s fields, by offset (its slots), and the result's status (``PutResult``'s)
cdef Py_ssize_t T_TOPIC = 0, T_QID = 0, T_PROPS = 0, T_RECONSUME = 0
cdef object _PutResult = PutResult
cdef Py_ssize_t RES_STATUS = _slot(PutResult, "status", False)
cdef Py_ssize_t V_RECONSUME = RecordView._fields.index("reconsume_times")
# the store twin's ``put_patched`` (``_message_store.PUT_PATCHED``): a ``put_patched`` that
# is it bound to a store is called as this C function
ctypedef object (*_put_patched_t)(object, object, object, object, object, object)
cdef _put_patched_t _put_patched_c = NULL
cdef object _put_patched_twin = None
cdef str _STORE_TWIN = "kairosmq.server.store._message_store"


cdef int _shapes() except -1:
    """Look ``Attempt``, ``Target`` and ``Reputs`` up; the twin makes them only in the
    shapes it knows (else ``put_many`` is the reference's). The store twin's
    ``PUT_PATCHED`` is looked up too (missing: ``put_patched`` is called as Python)."""
    global _Attempt, _Target, _Reputs, _SHAPES, _put_patched_c, _put_patched_twin
    global P_RESTORE, P_PUT, P_IN_FLIGHT, P_IN_PROPS, P_LAST_RETRY
    global T_TOPIC, T_QID, T_PROPS, T_RECONSUME
    _Attempt, _Target = _ref.Attempt, _ref.Target
    known = (
        issubclass(_Attempt, tuple)
        and len(_Attempt._fields) == 4
        and _Target.__new__ is object.__new__
        and _Target.__init__.__code__.co_varnames[1:5]
        == ("topic", "queue_id", "properties", "reconsume_times")
    )
    try:
        P_RESTORE = _slot(_ref.Reputs, "restore")
        P_PUT = _slot(_ref.Reputs, "put_patched")
        P_IN_FLIGHT = _slot(_ref.Reputs, "in_flight")
        P_IN_PROPS = _slot(_ref.Reputs, "in_flight_props")
        P_LAST_RETRY = _slot(_ref.Reputs, "last_retry")
        T_TOPIC = _slot(_Target, "topic")
        T_QID = _slot(_Target, "queue_id")
        T_PROPS = _slot(_Target, "properties")
        T_RECONSUME = _slot(_Target, "reconsume_times")
        if _Target.__mro__ != (_Target, object):
            known = False
    except ImportError:
        known = False
    else:
        _Reputs = _ref.Reputs
    twin = _sys_modules.get(_STORE_TWIN)
    if twin is not None:
        try:
            _put_patched_c = <_put_patched_t>PyCapsule_GetPointer(
                twin.PUT_PATCHED, b"kairosmq.server.store._message_store.PUT_PATCHED"
            )
            _put_patched_twin = twin.put_patched
        except (AttributeError, ValueError):
            _put_patched_c = NULL
    _SHAPES = 1 if known else -1
    return 0


def c_calls():
    """The C calls ``put_many`` makes in place of Python calls (after its first call):
    the store twin's ``put_patched`` when it was found."""
    return frozenset(["MessageStore.put_patched"] if _put_patched_c != NULL else [])


cdef inline object _attempt(object outcome, object result, object target, object reason):
    """``Attempt(outcome, result, target, reason)``: ``tuple.__new__`` of the named tuple
    (what its ``__new__`` runs), made in C."""
    return kairos_tuple4(_Attempt, outcome, result, target, reason)


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
# the wanted names in the order ``_stripped`` notes their values (a list by index, in place
# of a dict per record), and where the restores find theirs
cdef tuple _DELAYED_NAMES = tuple(dict.fromkeys((REAL_TOPIC, REAL_QID, *_KEEP)))
cdef tuple _TIMER_NAMES = (REAL_TOPIC, REAL_QID)
cdef Py_ssize_t _D_TOPIC = _DELAYED_NAMES.index(REAL_TOPIC)
cdef Py_ssize_t _D_QID = _DELAYED_NAMES.index(REAL_QID)
cdef tuple _KEEP_AT = tuple(_DELAYED_NAMES.index(k) for k in _KEEP)
cdef object _MISSING = object()  # a wanted name not seen
if len(_DELAYED_NAMES) != 3 or len(_TIMER_NAMES) != 2:
    raise ImportError("the restores' wanted names are not the ones their lists hold")
# whether a wanted name may be one the strip table keeps (then each kept name is checked)
cdef bint _DELAYED_CHECK = not _DELAYED_WANTED <= _INTERNAL
cdef bint _TIMER_CHECK = not _TIMER_WANTED <= _TIMER_STRIP


# ``_stripped``'s table of the names records usually hold (the strip tables, the wanted
# names and the protocol's property names), each with its answers for the delayed and the
# timer restore's ``strip`` and ``wanted`` sets, asked once here
cdef enum:
    _MAX_NAMES = 96
    _MAX_NAME_LEN = 40
cdef int _STRIP = 1, _WANTED = 2, _DELAYED = 0, _TIMER = 4
cdef const char* _NAME_DATA[_MAX_NAMES]
cdef Py_ssize_t _NAME_LEN[_MAX_NAMES]
cdef PyObject* _NAME_OBJ[_MAX_NAMES]
cdef int _NAME_FLAGS[_MAX_NAMES]
cdef int _NAME_WANT[_MAX_NAMES][2]  # its index in _DELAYED_NAMES / _TIMER_NAMES, or -1
cdef Py_ssize_t _BY_LEN[_MAX_NAME_LEN + 2]  # names of length L: _BY_LEN[L] .. _BY_LEN[L+1]
cdef list _NAMES_HELD = []  # the str and bytes the table points into


cdef void _names() except *:
    cdef Py_ssize_t i, size
    names = {
        v
        for k, v in vars(_properties).items()
        if k.isupper() and type(v) is str and v.isascii() and v.isprintable()
    }
    names.update(_INTERNAL, _TIMER_STRIP, _DELAYED_WANTED, _TIMER_WANTED, (TIMER_OUT_MS,))
    ordered = sorted(
        (n for n in names if 0 < len(n) <= _MAX_NAME_LEN and "\x01" not in n and "\x02" not in n),
        key=lambda n: (len(n), n),
    )[:_MAX_NAMES]
    for i in range(_MAX_NAME_LEN + 2):
        _BY_LEN[i] = 0
    for i, name in enumerate(ordered):
        raw = name.encode("latin-1")
        _NAMES_HELD.append((name, raw))
        size = len(raw)
        _NAME_DATA[i] = PyBytes_AS_STRING(raw)
        _NAME_LEN[i] = size
        _NAME_OBJ[i] = <PyObject*>name
        _NAME_WANT[i][0] = _DELAYED_NAMES.index(name) if name in _DELAYED_NAMES else -1
        _NAME_WANT[i][1] = _TIMER_NAMES.index(name) if name in _TIMER_NAMES else -1
        _NAME_FLAGS[i] = (
            ((_STRIP if name in _INTERNAL else 0) | (_WANTED if name in _DELAYED_WANTED else 0))
            << _DELAYED
        ) | (
            ((_STRIP if name in _TIMER_STRIP else 0) | (_WANTED if name in _TIMER_WANTED else 0))
            << _TIMER
        )
    # _BY_LEN[L]: the first name of length >= L (the list is sorted by length)
    size = len(ordered)
    for i in range(_MAX_NAME_LEN + 2):
        _BY_LEN[i] = size
    for i in range(size - 1, -1, -1):
        _BY_LEN[_NAME_LEN[i]] = i
    for i in range(_MAX_NAME_LEN, -1, -1):
        if _BY_LEN[i] > _BY_LEN[i + 1]:
            _BY_LEN[i] = _BY_LEN[i + 1]


_names()


cdef inline int _known(const char* s, Py_ssize_t size) noexcept:
    """``_NAMES``' entry for the name ``s[:size]`` (one byte per character): its index
    shifted by 8, or'ed with its flags; -1 when it is not one of them."""
    cdef Py_ssize_t i
    if size > _MAX_NAME_LEN:
        return -1
    for i in range(_BY_LEN[size], _BY_LEN[size + 1]):
        if memcmp(_NAME_DATA[i], s, size) == 0:
            return (<int>i << 8) | _NAME_FLAGS[i]
    return -1


cdef inline char* _digits(long long x, char* end) noexcept:
    """``str(x)`` written backwards ending at ``end``; the first character's address."""
    cdef unsigned long long u = <unsigned long long>(-(x + 1)) + 1 if x < 0 else <unsigned long long>x
    while True:
        end -= 1
        end[0] = <char>(48 + u % 10)
        u //= 10
        if u == 0:
            break
    if x < 0:
        end -= 1
        end[0] = b'-'
    return end


cdef str _origin(object a, object b):
    """``f"{a}:{b}"``: two ``int`` written in C, anything else by the f-string."""
    cdef long long x, y
    cdef char buf[48]
    cdef char* first
    if type(a) is int and type(b) is int:
        try:
            x = a
            y = b
        except OverflowError:
            return f"{a}:{b}"
        first = _digits(y, buf + 48)
        first -= 1
        first[0] = b':'
        first = _digits(x, first)
        return PyUnicode_DecodeASCII(first, buf + 48 - first, NULL)
    return f"{a}:{b}"


cdef str _decimal(object a):
    """``str(a)``: an ``int`` written in C, anything else by ``str``."""
    cdef long long x
    cdef char buf[24]
    cdef char* first
    if type(a) is int:
        try:
            x = a
        except OverflowError:
            return str(a)
        first = _digits(x, buf + 24)
        return PyUnicode_DecodeASCII(first, buf + 24 - first, NULL)
    return str(a)


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


cdef inline Py_ssize_t _want_at(object k, tuple names) except -2:
    """The index of the name ``k`` in ``names``, or -1."""
    cdef Py_ssize_t j
    for j in range(len(names)):
        if k == names[j]:
            return j
    return -1


cdef dict _stripped(str text, frozenset strip, tuple names, bint check_kept, list seen,
                    int mode):
    """``stripped(decode_properties(text), strip)`` in one pass over ``text`` (no dict of
    every property first), and in ``seen`` (by their index in ``names``) the values of the
    wanted names, as the decoded dict would hold them. The decode is
    ``decode_properties``' (pairs split at ``\\x02``, name and value at the first
    ``\\x01``, each non-empty, a later value of a name kept at the name's first place): a
    name left in keeps that place and the last value, as the reference's dict
    comprehension over the decoded dict gives.

    A text of one byte per character (``mode``: ``_DELAYED`` or ``_TIMER``, the table of
    ``strip`` and ``names``) is read in place: a name of ``_NAMES`` is that very string
    and its answers for ``strip`` and ``names`` were asked once, at import (no string
    made, hashed and looked up per pair); any other name is made and asked as here."""
    cdef dict new = {}
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text), start = 0, end, nv, w
    cdef const char* data
    cdef const char* p
    cdef int flags, which = 0 if mode == _DELAYED else 1
    if n == 0:
        return new
    if PyUnicode_KIND(text) == PyUnicode_1BYTE_KIND:
        data = <const char*>PyUnicode_DATA(text)
        while start <= n:
            p = <const char*>memchr(data + start, 0x02, n - start)
            end = n if p == NULL else p - data
            p = <const char*>memchr(data + start, 0x01, end - start)
            nv = -1 if p == NULL else p - data
            if nv > start and nv + 1 < end:
                flags = _known(data + start, nv - start)
                if flags >= 0:
                    k = <object>_NAME_OBJ[flags >> 8]
                    w = _NAME_WANT[flags >> 8][which]
                    flags = (flags >> mode) & 0x0F
                else:
                    k = PyUnicode_Substring(text, start, nv)
                    w = _want_at(k, names)
                    flags = _STRIP if PySet_Contains(strip, k) else 0
                if flags & _STRIP:
                    if w >= 0:
                        seen[w] = PyUnicode_Substring(text, nv + 1, end)
                else:
                    v = PyUnicode_Substring(text, nv + 1, end)
                    new[k] = v
                    if check_kept and w >= 0:
                        seen[w] = v
            start = end + 1
        return new
    while start <= n:
        end = PyUnicode_FindChar(text, 0x02, start, n, 1)
        if end < 0:
            end = n
        nv = PyUnicode_FindChar(text, 0x01, start, end, 1)
        if nv > start and nv + 1 < end:
            k = PyUnicode_Substring(text, start, nv)
            if PySet_Contains(strip, k):
                w = _want_at(k, names)
                if w >= 0:
                    seen[w] = PyUnicode_Substring(text, nv + 1, end)
            else:
                v = PyUnicode_Substring(text, nv + 1, end)
                new[k] = v
                if check_kept:
                    w = _want_at(k, names)
                    if w >= 0:
                        seen[w] = v
        start = end + 1
    return new


def restore_delayed_view(record, level, schedule_offset):
    """``reput.restore_delayed_view``."""
    return _restore_delayed(record, level, schedule_offset)


cdef tuple _restore_delayed(record, level, schedule_offset):
    """``restore_delayed_view``'s body (``put_many`` calls it for that restore)."""
    cdef list seen = [_MISSING, _MISSING, _MISSING]
    cdef dict new
    cdef Py_ssize_t j
    if type(record) is not bytes:
        return _pure.restore_delayed_view(record, level, schedule_offset)
    got = _read(<bytes>record)
    if got is None:
        return _pure.restore_delayed_view(record, level, schedule_offset)
    view, text = got
    new = _stripped(<str>text, _INTERNAL, _DELAYED_NAMES, _DELAYED_CHECK, seen, _DELAYED)
    raw = seen[_D_QID]
    qid = _qid("0" if raw is _MISSING else raw)
    if qid is None:
        return _pure.restore_delayed_view(record, level, schedule_offset)
    topic = seen[_D_TOPIC]
    if topic is _MISSING:
        topic = view.topic
    for j in range(len(_KEEP)):
        v = seen[<Py_ssize_t>_KEEP_AT[j]]
        if v is not _MISSING:
            new[_KEEP[j]] = v
    new[SCHEDULE_ORIGIN] = _origin(level, schedule_offset)
    return view, topic, qid, new


def restore_timer_view(record, due, phy):
    """``reput.restore_timer_view``."""
    return _restore_timer(record, due, phy)


cdef tuple _restore_timer(record, due, phy):
    """``restore_timer_view``'s body (``put_many`` calls it for that restore)."""
    cdef list seen = [_MISSING, _MISSING]
    cdef dict new
    if type(record) is not bytes:
        return _pure.restore_timer_view(record, due, phy)
    got = _read(<bytes>record)
    if got is None:
        return _pure.restore_timer_view(record, due, phy)
    view, text = got
    new = _stripped(<str>text, _TIMER_STRIP, _TIMER_NAMES, _TIMER_CHECK, seen, _TIMER)
    topic = seen[0]
    if topic is _MISSING:
        topic = ""
    raw = seen[1]
    qid = _qid("0" if raw is _MISSING else raw)
    if not topic or qid is None:
        return _pure.restore_timer_view(record, due, phy)
    new[TIMER_OUT_MS] = _decimal(due)
    new[TIMER_ORIGIN] = _origin(due, phy)
    return view, topic, qid, new


cdef object _restore_delayed_def = restore_delayed_view
cdef object _restore_timer_def = restore_timer_view


def put_many(reputs, items, unread, settle):
    """``reput.Reputs.put_many``."""
    cdef Py_ssize_t i = 0
    cdef int kind  # the restore: 1 this module's delayed, 2 its timer, 0 another
    cdef bint direct
    if _SHAPES <= 0:
        if _SHAPES == 0:
            _shapes()
        if _SHAPES < 0:
            return _pure.put_many(reputs, items, unread, settle)
    if type(reputs) is not _Reputs or _at(reputs, P_RESTORE) == NULL or _at(reputs, P_PUT) == NULL:
        return _pure.put_many(reputs, items, unread, settle)  # a subclass, an unset field
    Outcome = _ref.Outcome
    RequeueError, ok, permanent = _ref.RequeueError, _ref.PutStatus.PUT_OK, _ref.PERMANENT
    DONE, SKIP, RETRY = Outcome.DONE, Outcome.SKIP, Outcome.RETRY
    restore = <object>_at(reputs, P_RESTORE)
    put_patched = <object>_at(reputs, P_PUT)
    kind = 1 if restore is _restore_delayed_def else 2 if restore is _restore_timer_def else 0
    direct = (
        _put_patched_c != NULL
        and PyMethod_Check(put_patched)
        and PyMethod_GET_FUNCTION(put_patched) == <PyObject*>_put_patched_twin
    )
    for record, a, b in items:
        if record is None:
            settle(_attempt(SKIP, None, None, unread), a, b)
            i += 1
            continue
        _put(reputs, P_IN_FLIGHT, (a, b))
        try:
            if kind == 1:
                view, topic, queue_id, props = _restore_delayed(record, a, b)
            elif kind == 2:
                view, topic, queue_id, props = _restore_timer(record, a, b)
            else:
                view, topic, queue_id, props = restore(record, a, b)
            _put(reputs, P_IN_PROPS, props)
            if direct:
                result = _put_patched_c(
                    <object>PyMethod_GET_SELF(put_patched), record, view, topic, queue_id, props
                )
            else:
                result = put_patched(record, view, topic, queue_id, props)
        except RequeueError as err:
            reason = f"cannot restore the message: {err}"
            settle(_attempt(SKIP, None, None, reason), a, b)
            i += 1
            continue
        finally:
            _put(reputs, P_IN_FLIGHT, None)
            _put(reputs, P_IN_PROPS, None)
        target = kairos_object_new(_Target)  # Target.__init__'s four fields, in its slots
        _put(target, T_TOPIC, topic)
        _put(target, T_QID, queue_id)
        _put(target, T_PROPS, props)
        _put(
            target,
            T_RECONSUME,
            (<tuple>view)[V_RECONSUME] if type(view) is _RecordView else view.reconsume_times,
        )
        if type(result) is _PutResult and _at(result, RES_STATUS) != NULL:
            status = <object>_at(result, RES_STATUS)
        else:
            status = result.status
        if status is ok:
            settle(_attempt(DONE, result, target, ""), a, b)
        elif status in permanent:
            reason = f"the re-put was refused: {result.remark or status.value}"
            settle(_attempt(SKIP, result, target, reason), a, b)
        else:
            _put(reputs, P_LAST_RETRY, _attempt(RETRY, result, target, ""))
            return i
        i += 1
    return i
