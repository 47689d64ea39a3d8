# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``longpoll.py``'s arrival path (chosen by ``protocol/native.py``;
``longpoll.py`` is the reference and owns every rule of long polling).

``on_dispatch`` and ``notify`` (``ArrivalNotifier.on_dispatch`` / ``notify``: a dict
lookup per stored message, fed by the store's dispatch loop), ``hold`` (a held pull
parked: its ``Held`` allocated and filled in its slots without ``__init__``, its
deadline timer), ``fire`` (``Held.fire``) and ``wake`` (``_wake``: every pull held on a
queue answered in one loop callback, a failed answer reported to the loop and the
others still answered), each step for step the reference's, with no Python frame of
their own: ``Held``'s and the ``DispatchRequest``'s fields read and written in their
slots, the notifier's tables read and written with the ``dict`` C calls when they are
dicts, and ``on_dispatch`` and ``wake`` calling ``notify`` and ``fire`` as C functions.
``DISPATCH`` is a capsule of ``on_dispatch``'s C function: the message-store twin calls
it (no Python call) for a listener that is this ``on_dispatch`` bound to a notifier.
"""

from cpython.dict cimport PyDict_DelItem, PyDict_GetItemWithError, PyDict_SetItem
from cpython.object cimport PyObject
from cpython.pycapsule cimport PyCapsule_New
from protocol._slots cimport OBJECT_NEW, _at, _field, _fresh, _plain, _put, _slot

from asyncio import get_running_loop

from ..store.types import DispatchRequest
from . import longpoll as _ref


cdef object _Held = _ref.Held


cdef Py_ssize_t H_ANSWER = _slot(_Held, "answer")
cdef Py_ssize_t H_KEY = _slot(_Held, "key")
cdef Py_ssize_t H_TIMER = _slot(_Held, "timer")
cdef Py_ssize_t H_DONE = _slot(_Held, "done")
cdef object _Notifier = _ref.ArrivalNotifier  # its tables read in place (the class itself)
cdef Py_ssize_t N_WAITERS = _slot(_Notifier, "_waiters")
cdef Py_ssize_t N_HELD = _slot(_Notifier, "_held")
cdef object _Request = DispatchRequest
cdef Py_ssize_t R_TOPIC = _slot(_Request, "topic", False)
cdef Py_ssize_t R_QID = _slot(_Request, "queue_id", False)
cdef Py_ssize_t R_REPLAY = _slot(_Request, "replay", False)
_plain(_Held, OBJECT_NEW)


cdef object _on_dispatch(self, req, properties, phy, size):
    """``ArrivalNotifier.on_dispatch`` (``properties``, ``phy`` and ``size`` unused: the
    signature every listener exported to the message-store twin shares)."""
    if type(req) is not _Request:
        if not req.replay:
            _notify(self, req.topic, req.queue_id)
        return None
    if not _field(req, R_REPLAY, "replay"):
        _notify(self, _field(req, R_TOPIC, "topic"), _field(req, R_QID, "queue_id"))
    return None


def on_dispatch(self, req):
    """``ArrivalNotifier.on_dispatch``."""
    _on_dispatch(self, req, None, None, None)


ctypedef object (*_listener_t)(object, object, object, object, object)
cdef _listener_t _on_dispatch_fn = _on_dispatch
# ``on_dispatch`` for the message-store twin, which calls it as a C function (the
# signature of ``_index.DISPATCH_LIVE``: listener's self, request, its properties,
# offset and size) for a listener that is this module's ``on_dispatch`` bound to a
# notifier
DISPATCH = PyCapsule_New(
    <void*>_on_dispatch_fn, b"kairosmq.server.remoting._longpoll.DISPATCH", NULL
)


cdef inline object _pop(object table, object key):
    """``table.pop(key, None)``: a ``dict``'s entry taken out with its C calls."""
    cdef PyObject* p
    if type(table) is not dict:
        return table.pop(key, None)
    p = PyDict_GetItemWithError(table, key)
    if p == NULL:
        return None
    value = <object>p
    PyDict_DelItem(table, key)
    return value


cdef object _notify(self, topic, queue_id):
    """``ArrivalNotifier.notify`` (its key made only when something waits: unseen)."""
    if type(self) is _Notifier:
        waiting = _field(self, N_WAITERS, "_waiters")
        parked = _field(self, N_HELD, "_held")
    else:
        waiting = self._waiters
        parked = self._held
    if not waiting and not parked:
        return None
    key = (topic, queue_id)
    if waiting:
        waiters = _pop(waiting, key)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(True)
    if parked:
        held = _pop(parked, key)
        if held and self._loop is not None:
            self._loop.call_soon(wake, held)


def notify(self, topic, queue_id):
    """``ArrivalNotifier.notify``."""
    _notify(self, topic, queue_id)


def hold(self, topic, queue_id, answer, timeout):
    """``ArrivalNotifier.hold``."""
    cdef PyObject* p
    h = _fresh(_Held)  # Held(answer, (topic, queue_id))
    key = (topic, queue_id)
    _put(h, H_ANSWER, answer)
    _put(h, H_KEY, key)
    _put(h, H_TIMER, None)
    _put(h, H_DONE, False)
    if self.closed:
        _fire(h, False)
        return h
    loop = self._loop = self._loop or get_running_loop()
    table = self._held
    if type(table) is dict:  # self._held.setdefault(h.key, {})[h] = None
        p = PyDict_GetItemWithError(table, key)
        if p == NULL:
            parked = {}
            PyDict_SetItem(table, key, parked)
        else:
            parked = <object>p
    else:
        parked = table.setdefault(key, {})
    if type(parked) is dict:
        PyDict_SetItem(parked, h, None)
    else:
        parked[h] = None
    _put(h, H_TIMER, loop.call_later(timeout, self._expire_held, h))
    return h


cdef object _fire(self, notified):
    """``Held.fire`` of a ``Held``."""
    if _field(self, H_DONE, "done"):
        return None
    _put(self, H_DONE, True)
    timer = _field(self, H_TIMER, "timer")
    if timer is not None:
        timer.cancel()
    _field(self, H_ANSWER, "answer")(notified)


def fire(self, notified):
    """``Held.fire``."""
    if type(self) is _Held:
        _fire(self, notified)
        return
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
                _fire(h, notified)
            else:
                h.fire(notified)
        except Exception as err:  # one failed answer must not keep the others
            get_running_loop().call_exception_handler(
                {"message": "a held pull's answer failed", "exception": err}
            )
