# cython: language_level=3
"""The fields of a slotted dataclass read and written by offset: what the native twins
use in place of attribute access (a dict lookup and an MRO walk per access).

Header-only: these inline functions are compiled into each twin that cimports them, no
module is imported at run time. ``protocol/native.py`` counts this file in a twin's
staleness, so an edit here runs the pure core until the twins are built again.

Invariants: ``_slot`` accepts only a writable object member of the class (a field of a
``@dataclass(slots=True)``), or raises ImportError so the twin's import fails and the pure
core runs; ``_put`` does what the member descriptor's ``__set__`` does (the new value
held, the old one released); ``_fresh`` is ``object.__new__`` for classes that do not
override it (the caller checks that at import, with ``_plain``).
"""

from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF, Py_XDECREF


cdef extern from "Python.h":
    object PyType_GenericAlloc(PyTypeObject* t, Py_ssize_t n)

cdef extern from "structmember.h":
    ctypedef struct PyMemberDef:
        int type
        Py_ssize_t offset
        int flags
    int T_OBJECT_EX
    int READONLY
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member


cdef inline Py_ssize_t _slot(object cls, str name, bint write=True) except -1:
    """Where instances of ``cls`` (a dataclass with ``slots=True``) hold field ``name``
    (declared by it or a base): the offset its member descriptor reads (and, with
    ``write``, writes). ImportError (the pure core runs) if the class is not laid out so."""
    from types import MemberDescriptorType

    d = None
    for k in cls.__mro__:  # declared by the class or a base
        d = k.__dict__.get(name)
        if d is not None:
            break
    if type(d) is not MemberDescriptorType:
        raise ImportError(f"{cls.__name__}.{name} is not a slot")
    cdef PyMemberDef* m = (<PyMemberDescrObject*><PyObject*>d).d_member
    if m.type != T_OBJECT_EX or (write and m.flags & READONLY):
        raise ImportError(f"{cls.__name__}.{name} is not a writable object slot")
    return m.offset


cdef inline Py_ssize_t _own_slot(object cls, str name) except -1:
    """``_slot`` of a field ``cls`` itself declares (not one of a base's)."""
    if name not in cls.__dict__.get("__slots__", ()):
        raise ImportError(f"{cls.__name__}.{name} is not one of its slots")
    return _slot(cls, name)


cdef enum:  # what ``_plain`` checks (or-ed together)
    BASE_OBJECT = 1  # no base but ``object`` (no field declared or overridden elsewhere)
    OBJECT_NEW = 2  # ``object.__new__`` (the twin allocates instances with ``_fresh``)
    OBJECT_ACCESS = 4  # ``object``'s attribute access (no own ``__getattribute__``/``__setattr__``)


cdef inline int _plain(object cls, int checks, Py_ssize_t fields=-1) except -1:
    """ImportError (the pure core runs) unless a twin may hold ``cls``'s instances in their
    slots as it assumes: each of ``checks`` holds and, with ``fields`` >= 0, ``cls`` has
    exactly that many slots (the twin fills every field)."""
    if checks & BASE_OBJECT and cls.__mro__ != (cls, object):
        raise ImportError(f"{cls.__qualname__} has a base other than object")
    if checks & OBJECT_NEW and cls.__new__ is not object.__new__:
        raise ImportError(f"{cls.__qualname__} has its own __new__: the twin cannot fill it")
    if checks & OBJECT_ACCESS and (
        cls.__getattribute__ is not object.__getattribute__
        or cls.__setattr__ is not object.__setattr__
    ):
        raise ImportError(f"{cls.__qualname__} has its own attribute access")
    if fields >= 0 and len(cls.__slots__) != fields:
        raise ImportError(
            f"{cls.__qualname__} has {len(cls.__slots__)} fields, the twin fills {fields}"
        )
    return 0


cdef inline PyObject* _at(object obj, Py_ssize_t at) noexcept:
    """The value in ``obj``'s slot at offset ``at`` (borrowed; NULL: the field is unset)."""
    return (<PyObject**>((<char*><PyObject*>obj) + at))[0]


cdef inline object _get(object obj, Py_ssize_t at):
    """``obj.<field>`` for the field at offset ``at`` (AttributeError when unset, as its
    descriptor)."""
    cdef PyObject* p = _at(obj, at)
    if p == NULL:
        raise AttributeError("a field is unset")
    return <object>p


cdef inline object _field(object obj, Py_ssize_t at, str name):
    """``obj.<name>`` read in its slot at ``at``; an unset field asks ``getattr`` (its
    AttributeError)."""
    cdef PyObject* p = _at(obj, at)
    if p == NULL:
        return getattr(obj, name)
    return <object>p


cdef inline void _put(object obj, Py_ssize_t at, object value) noexcept:
    """``obj.<field> = value`` for the field at offset ``at``: what its member descriptor's
    ``__set__`` does (the new value held, the old one released), without the lookup."""
    cdef PyObject** p = <PyObject**>((<char*><PyObject*>obj) + at)
    cdef PyObject* old = p[0]
    Py_INCREF(value)
    p[0] = <PyObject*>value
    Py_XDECREF(old)


cdef inline object _fresh(object cls):
    """``object.__new__(cls)`` (its fields unset) without the call: ``tp_alloc``, which is
    all ``object.__new__`` does for a class that does not override ``__new__``."""
    return PyType_GenericAlloc(<PyTypeObject*>cls, 0)
