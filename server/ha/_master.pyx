# cython: language_level=3
"""Native twin of ``master.py``'s dispatch listener (chosen by ``protocol/native.py``;
``master.py`` is the reference and owns every rule of HA).

``on_dispatch`` (``HAService.on_dispatch``, called for every stored record) mirrors the
reference step for step with no Python frame of its own: the connections' writers woken
(``asyncio.Event.set``, whose only case with work, an event not set yet, is left to the
event itself: an event already set is read in place of the call), then on SYNC_MASTER a
live record handed to the confirm gate. An event of another class is always asked.
``DISPATCH`` is a capsule of its C function: the message-store twin calls it (no Python
call) for a listener that is this ``on_dispatch`` bound to an HA service.
"""

from cpython.pycapsule cimport PyCapsule_New

from asyncio import Event

cdef object _Event = Event


cdef object _on_dispatch(self, req, properties, phy, size):
    """``HAService.on_dispatch`` (``properties``, ``phy`` and ``size`` unused: the
    signature every listener exported to the message-store twin shares)."""
    data = self._data
    if type(data) is not _Event or not data._value:  # Event.set: nothing to do when set
        data.set()
    gate = self.gate
    if gate is not None and not req.replay:
        gate.dispatched(req)
    return None


def on_dispatch(self, req):
    """``HAService.on_dispatch``."""
    _on_dispatch(self, req, None, None, None)


ctypedef object (*_listener_t)(object, object, object, object, object)
cdef _listener_t _on_dispatch_fn = _on_dispatch
# ``on_dispatch`` for the message-store twin, which calls it as a C function (the
# signature of ``_index.DISPATCH_LIVE``) for a listener that is this module's
# ``on_dispatch`` bound to an HA service
DISPATCH = PyCapsule_New(<void*>_on_dispatch_fn, b"kairosmq.server.ha._master.DISPATCH", NULL)
