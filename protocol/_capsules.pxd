# cython: language_level=3
"""The C functions the native twins export to each other: each twin that offers one holds
it as a capsule attribute ``NAME`` named ``<its module's name>.NAME`` (``_path.PUT`` is
``kairosmq.server.put._path.PUT``); a caller looks it up once, at its import.

Header-only, as ``_slots.pxd``: compiled into each twin that cimports it, and counted by
``protocol/native.py`` in a twin's staleness.

Invariant: ``_c_function`` gives NULL, never an error, when there is no twin (the pure core
runs it) or no such capsule (an older build): the caller then calls the Python function.
"""

from cpython.pycapsule cimport PyCapsule_GetPointer, PyCapsule_IsValid


cdef inline void* _c_function(object twin, str name) except? NULL:
    """The C function ``twin`` (a twin module, or None) exports as its capsule ``name``,
    or NULL."""
    if twin is None:
        return NULL
    cdef object capsule = getattr(twin, name, None)
    cdef bytes full = f"{twin.__name__}.{name}".encode()
    if capsule is None or not PyCapsule_IsValid(capsule, full):
        return NULL
    return PyCapsule_GetPointer(capsule, full)
