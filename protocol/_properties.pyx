# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``properties.py``'s string codec (chosen by ``native.py``;
``properties.py`` is the reference and owns the rules and the names).

``name \\x01 value \\x02 ...`` read and written with the string's own search and slice
functions in one pass: no generator, no f-string and no tuple per pair. ``DECODE`` (a
capsule) is ``decode_properties`` as a C function, for the send twin.
``tests/protocol/test_native_properties.py`` holds each function here to the reference.
"""

from cpython.dict cimport PyDict_Next, PyDict_SetItem
from cpython.object cimport PyObject
from cpython.pycapsule cimport PyCapsule_New
from cpython.unicode cimport PyUnicode_GET_LENGTH, PyUnicode_Substring

cdef extern from "Python.h":
    Py_ssize_t PyUnicode_FindChar(object s, Py_UCS4 ch, Py_ssize_t start, Py_ssize_t end,
                                  int direction) except -2

cdef str _NV = "\x01"
cdef str _SEP = "\x02"


def decode_properties(str text):
    """``properties.decode_properties``."""
    return _decode(text)


cdef object _decode_c(object text):
    """``DECODE``: ``decode_properties(text)`` for ``text`` exactly a ``str`` (the caller
    checks; anything else it calls in Python, as before)."""
    return _decode(<str>text)


cdef dict _decode(str text):
    cdef dict out = {}
    if not text:
        return out
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text), start = 0, end, nv
    while start <= n:
        end = PyUnicode_FindChar(text, 0x02, start, n, 1)
        if end < 0:
            end = n
        nv = PyUnicode_FindChar(text, 0x01, start, end, 1)
        # a name, the separator and a value: each non-empty
        if nv > start and nv + 1 < end:
            PyDict_SetItem(
                out, PyUnicode_Substring(text, start, nv), PyUnicode_Substring(text, nv + 1, end)
            )
        start = end + 1
    return out


# ``decode_properties`` as a C function ``object (object text)``: the send twin
# (server/handlers/_send.pyx) calls it without the Python call when its
# ``decode_properties`` is exactly this module's.
DECODE = PyCapsule_New(<void*>_decode_c, b"kairosmq.protocol._properties.DECODE", NULL)


cdef inline bint _add(list parts, object k, object v) except -1:
    if k and v != "":
        parts.append(k if type(k) is str else format(k, ""))  # as the reference's f-string
        parts.append(_NV)
        parts.append(v if type(v) is str else format(v, ""))
        parts.append(_SEP)
    return True


def encode_properties(props):
    """``properties.encode_properties``."""
    if not isinstance(props, dict):  # any mapping (or the reference's error)
        return encode_property_pairs(props.items())
    cdef list parts = []
    cdef Py_ssize_t i = 0
    cdef PyObject* k
    cdef PyObject* v
    while PyDict_Next(<dict>props, &i, &k, &v):
        _add(parts, <object>k, <object>v)
    if parts:
        parts.pop()
    return "".join(parts)


def encode_property_pairs(pairs):
    """``properties.encode_property_pairs``."""
    cdef list parts = []
    for k, v in pairs:
        _add(parts, k, v)
    if parts:
        parts.pop()
    return "".join(parts)
