# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``headers.py``'s generated codecs (chosen by ``native.py``;
``headers.py`` is the reference and owns the header classes and the rules).

``compile_codec(cls, v2)`` returns what the reference's ``_compile`` returns, a
``(from_ext, to_ext)`` pair for one header class, as two objects that walk a C array of
the class's fields (wire key, attribute, kind, required, default) instead of generated
Python: a header is read with one dict lookup and one conversion per field and built
without running the dataclass ``__init__`` (its slots are set directly through their
member descriptors as each value is read, defaults included), then written back with
one attribute read per field. ASCII decimal text of at most 18 digits is read as a
number in place, ASCII text as a boolean in place (what ``int()`` and ``.lower()`` give
for it); any other text, a number that does not parse and a missing required field go
to ``int()``/``.lower()`` and the reference's own helpers, which raise the same
``HeaderError``. ``tests/protocol/test_native_headers.py`` holds every header class's
pair to the reference's. ``FROM_EXT`` (a capsule) is a decoder's call as a C function,
for the handler twins to decode a request header without the Python call.
"""

import dataclasses

import types

from cpython.dict cimport PyDict_GetItem, PyDict_SetItem
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport Py_TYPE, PyObject, PyTypeObject
from cpython.pycapsule cimport PyCapsule_New
from cpython.unicode cimport PyUnicode_DATA, PyUnicode_GET_LENGTH
from libc.stdint cimport int64_t, uint8_t

cdef extern from "Python.h":
    bint PyUnicode_IS_COMPACT_ASCII(object o)

from .headers import _missing, _parse_int

cdef enum Kind:
    K_STR = 0
    K_INT = 1
    K_BOOL = 2

cdef object _REQ = dataclasses.MISSING
cdef object _new = object.__new__
cdef tuple _NO_ARGS = ()
cdef str _EMPTY = ""
cdef str _TRUE = "true"
cdef str _FALSE = "false"


cdef class _Fields:
    cdef object cls
    cdef list keys  # wire keys (the V2 short ones when asked for)
    cdef list names  # long wire names (the error text)
    cdef list attrs  # attribute names
    cdef list defaults
    cdef list slots  # each attribute's member descriptor (``direct`` only)
    cdef int n
    cdef int* kinds
    cdef bint* required
    cdef bint direct  # set the slots directly (no __post_init__, no factories)
    cdef bint object_new  # cls.__new__ is object.__new__

    def __dealloc__(self):
        PyMem_Free(self.kinds)
        PyMem_Free(self.required)


cdef _Fields _fields(object cls, bint v2):
    cdef _Fields s = _Fields.__new__(_Fields)
    fs = dataclasses.fields(cls)
    s.cls = cls
    s.n = len(fs)
    s.keys, s.names, s.attrs, s.defaults = [], [], [], []
    s.kinds = <int*>PyMem_Malloc(max(s.n, 1) * sizeof(int))
    s.required = <bint*>PyMem_Malloc(max(s.n, 1) * sizeof(bint))
    s.direct = not hasattr(cls, "__post_init__")
    cdef int i = 0
    for f in fs:
        name, short = f.metadata["wire"], f.metadata["v2"]
        s.keys.append(short if (v2 and short) else name)
        s.names.append(name)
        s.attrs.append(f.name)
        s.defaults.append(f.default)
        kind = str(f.type).split("|")[0].strip()
        s.kinds[i] = {"str": K_STR, "int": K_INT, "bool": K_BOOL}[kind]
        s.required[i] = f.default is _REQ
        if f.default_factory is not _REQ or not f.init:
            s.direct = False
        i += 1
    if s.direct:  # what setattr finds and calls: the first class in the MRO holding it
        s.slots = []
        for attr in s.attrs:
            slot = next((k.__dict__[attr] for k in cls.__mro__ if attr in k.__dict__), None)
            if type(slot) is not types.MemberDescriptorType:
                s.direct = False
            s.slots.append(slot)
        if cls.__setattr__ is not object.__setattr__:
            s.direct = False
    s.object_new = cls.__new__ is object.__new__
    return s


cdef inline int _set(object slot, object obj, object value) except -1:
    """``setattr(obj, name, value)`` for the slot ``name`` (its member descriptor)."""
    return (<PyTypeObject*>Py_TYPE(slot)).tp_descr_set(slot, obj, value)


cdef inline object _int(object key, object raw):
    # Java's Long.parseLong range; anything else is the reference's HeaderError
    cdef int64_t v = 0
    cdef const uint8_t* d
    cdef Py_ssize_t n, i = 0
    if type(raw) is str and PyUnicode_IS_COMPACT_ASCII(raw):
        # int()'s common case in place: ASCII digits, a minus sign, at most 18 digits
        n = PyUnicode_GET_LENGTH(raw)
        d = <const uint8_t*>PyUnicode_DATA(raw)
        if n and d[0] == 0x2D:
            i = 1
        if 0 < n - i <= 18:
            while i < n and 0x30 <= d[i] <= 0x39:
                v = v * 10 + (d[i] - 0x30)
                i += 1
            if i == n:
                return -v if d[0] == 0x2D else v
    if type(raw) is str:
        try:
            v = int(raw)
            return v
        except (ValueError, OverflowError):
            pass
    return _parse_int(key, raw)


cdef inline bint _is_empty(object raw) except -1:
    """``raw == ""``."""
    if type(raw) is str:
        return PyUnicode_GET_LENGTH(raw) == 0
    return raw == _EMPTY


cdef object _bool(object raw):
    """``raw.lower() in ("true", "1")``, in place for ASCII text."""
    cdef const uint8_t* d
    cdef Py_ssize_t n
    if type(raw) is str and PyUnicode_IS_COMPACT_ASCII(raw):
        n = PyUnicode_GET_LENGTH(raw)
        d = <const uint8_t*>PyUnicode_DATA(raw)
        if n == 1:
            return d[0] == 0x31
        return n == 4 and (
            (d[0] | 0x20) == 0x74
            and (d[1] | 0x20) == 0x72
            and (d[2] | 0x20) == 0x75
            and (d[3] | 0x20) == 0x65
        )
    return raw.lower() in ("true", "1")


cdef object _direct(_Fields s, dict ext):
    """``FromExt`` of a class whose fields are all slots: each value set as it is read
    (the same checks, in the same order, so the same first error)."""
    cdef int i
    cdef PyObject* p
    cdef object raw, value
    if s.object_new:  # object.__new__(cls) is cls's tp_new
        obj = (<PyTypeObject*>s.cls).tp_new(s.cls, <PyObject*>_NO_ARGS, NULL)
    else:
        obj = _new(s.cls)
    for i in range(s.n):
        p = PyDict_GetItem(ext, s.keys[i])
        if p == NULL or <object>p is None or (s.kinds[i] != K_STR and _is_empty(<object>p)):
            if s.required[i]:
                _missing(s.keys[i], s.names[i])
            value = s.defaults[i]
        else:
            raw = <object>p
            if s.kinds[i] == K_INT:
                value = _int(s.keys[i], raw)
            elif s.kinds[i] == K_BOOL:
                value = _bool(raw)
            else:
                value = raw
        _set(s.slots[i], obj, value)
    return obj


cdef object _from_ext(FromExt f, dict ext):
    """``FromExt.__call__``'s body (also the ``FROM_EXT`` C entry point's)."""
    cdef _Fields s = f.s
    cdef int i
    cdef PyObject* p
    cdef object raw, value
    cdef list values
    cdef dict kw
    cdef bint empty
    if s.direct:
        return _direct(s, ext)
    values = [None] * s.n
    for i in range(s.n):
        key = s.keys[i]
        p = PyDict_GetItem(ext, key)
        if p == NULL:
            empty = True
            raw = None
        else:
            raw = <object>p
            empty = raw is None or (s.kinds[i] != K_STR and raw == _EMPTY)
        if empty:
            if s.required[i]:
                _missing(key, s.names[i])
            values[i] = s.defaults[i]
            continue
        if s.kinds[i] == K_INT:
            value = _int(key, raw)
        elif s.kinds[i] == K_BOOL:
            value = raw.lower() in ("true", "1")
        else:
            value = raw
        values[i] = value
    kw = {}
    for i in range(s.n):
        if values[i] is not s.defaults[i] or s.required[i]:
            kw[s.attrs[i]] = values[i]
    return s.cls(**kw)


cdef class FromExt:
    cdef _Fields s

    def __call__(self, dict ext not None):
        return _from_ext(self, ext)


cdef object _from_ext_c(object f, object ext):
    """``FROM_EXT``: ``f(ext)`` for ``f`` exactly a ``FromExt`` and ``ext`` exactly a dict
    (the caller checks both; anything else it calls in Python, as before)."""
    return _from_ext(<FromExt>f, <dict>ext)


# ``FromExt.__call__`` as a C function ``object (object f, object ext)``: the handler twins
# (handlers/_send.pyx, handlers/_pull.pyx) call a decoder through it, without the Python
# call, when the decoder is exactly this module's ``FromExt``.
FROM_EXT = PyCapsule_New(<void*>_from_ext_c, b"kairosmq.protocol._headers.FROM_EXT", NULL)


cdef class ToExt:
    cdef _Fields s

    def __call__(self, obj):
        cdef _Fields s = self.s
        cdef dict out = {}
        cdef int i
        for i in range(s.n):
            v = getattr(obj, s.attrs[i])
            if not s.required[i] and v is None:
                continue
            if s.kinds[i] == K_INT:
                v = str(v)
            elif s.kinds[i] == K_BOOL:
                v = _TRUE if v else _FALSE
            PyDict_SetItem(out, s.keys[i], v)
        return out


def compile_codec(cls, bint v2):
    """``headers._compile``: the ``(from_ext, to_ext)`` pair of one header class."""
    cdef _Fields s = _fields(cls, v2)
    cdef FromExt f = FromExt.__new__(FromExt)
    cdef ToExt t = ToExt.__new__(ToExt)
    f.s = s
    t.s = s
    return f, t
