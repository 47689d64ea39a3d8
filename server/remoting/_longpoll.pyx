# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``longpoll.py``'s arrival path (chosen by ``protocol/native.py``;
``longpoll.py`` is the reference and owns every rule of long polling).

``on_dispatch`` and ``notify`` (``ArrivalNotifier.on_dispatch`` / ``notify``: a dict
lookup per stored message, fed by the store's dispatch loop), ``hold`` (a held pull
parked: its ``Held`` filled without its ``__init__`` frame, its deadline timer), ``fire``
(``Held.fire``) and ``wake`` (``_wake``: every pull held on a queue answered in one loop
callback, a failed answer reported to the loop and the others still answered), each
step for step the reference's, with no Python frame of their own.
"""

from asyncio import get_running_loop

from . import longpoll as _ref

cdef object _Held = _ref.Held
cdef object _new = object.__new__


def on_dispatch(self, req):
    """``ArrivalNotifier.on_dispatch``."""
    if not req.replay:
        notify(self, req.topic, req.queue_id)


def notify(self, topic, queue_id):
    """``ArrivalNotifier.notify``."""
    key = (topic, queue_id)
    waiting = self._waiters
    if waiting:
        waiters = waiting.pop(key, None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(True)
    parked = self._held
    if parked:
        held = parked.pop(key, None)
        if held and self._loop is not None:
            self._loop.call_soon(wake, held)


def hold(self, topic, queue_id, answer, timeout):
    """``ArrivalNotifier.hold``."""
    h = _new(_Held)  # Held(answer, (topic, queue_id))
    h.answer = answer
    h.key = key = (topic, queue_id)
    h.timer = None
    h.done = False
    if self.closed:
        fire(h, False)
        return h
    loop = self._loop = self._loop or get_running_loop()
    parked = self._held.get(key)
    if parked is None:
        parked = self._held[key] = {}
    parked[h] = None
    h.timer = loop.call_later(timeout, self._expire_held, h)
    return h


def fire(self, notified):
    """``Held.fire``."""
    if self.done:
        return
    self.done = True
    timer = self.timer
    if timer is not None:
        timer.cancel()
    self.answer(notified)


def wake(held, notified=True):
    """``_wake``."""
    for h in held:
        try:
            if type(h) is _Held:
                fire(h, notified)
            else:
                h.fire(notified)
        except Exception as err:  # one failed answer must not keep the others
            get_running_loop().call_exception_handler(
                {"message": "a held pull's answer failed", "exception": err}
            )
