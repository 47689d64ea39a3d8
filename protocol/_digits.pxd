# cython: language_level=3
"""Integers to and from their decimal text in C, as ``str(int)`` and ``int(str)`` give
them for the common case: what the native twins write into headers and read out of them.

Header-only: compiled into each twin that cimports it (see ``_slots.pxd``). Anything
outside the common case is the caller's to hand to Python: ``_dec`` calls ``str`` itself,
``_ascii_int`` returns False.
"""

from cpython.long cimport PyLong_AsLongLongAndOverflow
from libc.string cimport memcpy


cdef extern from "Python.h":
    object PyUnicode_New(Py_ssize_t size, unsigned int maxchar)
    void* PyUnicode_DATA(object s)
    bint PyUnicode_IS_COMPACT_ASCII(object s)
    Py_ssize_t PyUnicode_GET_LENGTH(object s)


cdef inline str _dec(object v):
    """``str(v)``: an ``int`` within 64 bits as its decimal digits written in C, anything
    else by ``str``."""
    cdef int overflow = 0
    cdef long long x
    cdef unsigned long long u
    cdef char buf[24]
    cdef Py_ssize_t i = 24, n
    if type(v) is not int:
        return str(v)
    x = PyLong_AsLongLongAndOverflow(v, &overflow)
    if overflow:
        return str(v)
    u = (<unsigned long long>0 - <unsigned long long>x) if x < 0 else <unsigned long long>x
    while True:
        i -= 1
        buf[i] = <char>(48 + u % 10)
        u //= 10
        if u == 0:
            break
    if x < 0:
        i -= 1
        buf[i] = 45  # "-"
    n = 24 - i
    s = PyUnicode_New(n, 127)
    memcpy(PyUnicode_DATA(s), buf + i, n)
    return s


cdef inline bint _ascii_int(object s, long long* out) noexcept:
    """``int(s)`` for a ``str`` of 1 to 18 ASCII digits after an optional ``-`` (the
    value put in ``out``, True); False for any other text (the caller asks ``int()``)."""
    cdef Py_ssize_t n, i = 0
    cdef const char* d
    cdef long long v = 0
    cdef bint neg = False
    if type(s) is not str or not PyUnicode_IS_COMPACT_ASCII(s):
        return False
    n = PyUnicode_GET_LENGTH(s)
    d = <const char*>PyUnicode_DATA(s)
    if n and d[0] == 45:  # "-"
        neg = True
        i = 1
    if n - i < 1 or n - i > 18:
        return False
    while i < n:
        if d[i] < 48 or d[i] > 57:
            return False
        v = v * 10 + (d[i] - 48)
        i += 1
    out[0] = -v if neg else v
    return True
