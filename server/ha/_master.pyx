# cython: language_level=3
"""Native twin of ``master.py``'s dispatch listener (chosen by ``protocol/native.py``;
``master.py`` is the reference and owns every rule of HA).

``on_dispatch`` (``HAService.on_dispatch``, called for every stored record) mirrors the
reference step for step with no Python frame of its own: the connections' writers woken
(``asyncio.Event.set``, whose only case with work, an event not set yet, is left to the
event itself: an event already set is read in place of the call), then on SYNC_MASTER a
live record handed to the confirm gate. An event of another class is always asked.
"""

from asyncio import Event

cdef object _Event = Event


def on_dispatch(self, req):
    """``HAService.on_dispatch``."""
    data = self._data
    if type(data) is not _Event or not data._value:  # Event.set: nothing to do when set
        data.set()
    gate = self.gate
    if gate is not None and not req.replay:
        gate.dispatched(req)
