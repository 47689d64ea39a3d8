# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``headers.py``'s generated codecs (chosen by ``native.py``;
``headers.py`` is the reference and owns the header classes and the rules).

``compile_codec(cls, v2)`` returns what the reference's ``_compile`` returns, a
``(from_ext, to_ext)`` pair for one header class, as two objects that walk a C array of
the class's fields (wire key, attribute, kind, required, default) instead of generated
Python: a header is read with one dict lookup and one conversion per field and built
without running the dataclass ``__init__`` (its slots are set directly, defaults
included), then written back with one attribute read per field. A number that does not
parse and a missing required field go to the reference's own helpers, which raise the
same ``HeaderError``. ``tests/protocol/test_native_headers.py`` holds every header class's
pair to the reference's.
"""

import dataclasses

from cpython.dict cimport PyDict_GetItem, PyDict_SetItem
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport PyObject
from libc.stdint cimport int64_t

from .headers import _missing, _parse_int

cdef enum Kind:
    K_STR = 0
    K_INT = 1
    K_BOOL = 2

cdef object _REQ = dataclasses.MISSING
cdef object _new = object.__new__
cdef str _EMPTY = ""
cdef str _TRUE = "true"
cdef str _FALSE = "false"


cdef class _Fields:
    cdef object cls
    cdef list keys  # wire keys (the V2 short ones when asked for)
    cdef list names  # long wire names (the error text)
    cdef list attrs  # attribute names
    cdef list defaults
    cdef int n
    cdef int* kinds
    cdef bint* required
    cdef bint direct  # set the slots directly (no __post_init__, no factories)

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
    return s


cdef inline object _int(object key, object raw):
    # Java's Long.parseLong range; anything else is the reference's HeaderError
    cdef int64_t v
    if type(raw) is str:
        try:
            v = int(raw)
            return v
        except (ValueError, OverflowError):
            pass
    return _parse_int(key, raw)


cdef class FromExt:
    cdef _Fields s

    def __call__(self, dict ext not None):
        cdef _Fields s = self.s
        cdef int i
        cdef PyObject* p
        cdef object raw, value
        cdef list values = [None] * s.n
        cdef dict kw
        cdef bint empty
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
        if s.direct:
            obj = _new(s.cls)
            for i in range(s.n):
                setattr(obj, s.attrs[i], values[i])
            return obj
        kw = {}
        for i in range(s.n):
            if values[i] is not s.defaults[i] or s.required[i]:
                kw[s.attrs[i]] = values[i]
        return s.cls(**kw)


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
