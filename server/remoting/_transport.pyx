# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``transport.py``'s per-request steps (chosen by ``protocol/native.py``;
``transport.py`` is the reference and owns every rule of the remoting server).

``Connection.data_received``, ``_process``, ``send`` and ``flush_out`` and
``RemotingServer.dispatch``, ``mark_dirty`` and ``_tick`` compiled as the reference
writes them, step for step, with the per-request property calls read in place: the
command's ``is_response`` / ``is_oneway`` flag bits, and for the broker's store as the
ack guard (a ``MessageStore``) its write guard's ``appends`` and ack token
(``MessageStore.appends`` / ``ack_token``), and ``ack_problem``'s common answer (no
rollback since the token, its end written: no problem). ``_process`` calls this
module's ``dispatch`` body in C when the server's ``dispatch`` is it, and ``dispatch``
reads the handler table as a ``dict`` when it is one.

In C rather than through Python: ``Connection`` and ``RemotingServer`` are slotted, so
their per-frame fields (and the ``MessageStore`` / ``WriteGuard`` / ``CommitLog`` ones the
ack check reads) are read and written by offset (``protocol/_slots.pxd``, offsets taken at import:
a class not laid out so fails the import and the pure core runs); this module's own
steps call each other in C (``data_received`` -> ``_process`` -> ``dispatch`` ->
``send`` -> ``mark_dirty``, ``_tick`` -> ``flush_out``) when the object's method is this
module's function (its class's, no instance attribute of the name), else through Python.
The reader's ``feed`` and ``buffered`` are the codec twin's C functions (``_codec.FEED`` /
``BUFFERED``) when the reader is exactly its ``FrameReader``.
An object that is not a ``Connection`` / ``RemotingServer`` (or a subclass) is handed to
the reference. A handler that is ``ingress.guarded``'s wrapper (the handler table's
wrapping: its ``run`` closure, told by its code object) has its body made here: the
wrapped handler (the closure's cell) called, a ``HeaderError`` answered by
``ingress.refuse``.

Anything else is handed to the reference before anything is changed: a response frame
(a broker -> client call's answer), a request while an ACL check is installed
(``auth``: the hook runs in Python, once), a code without a handler; any other ack guard
is asked through its methods, and an ack whose records were rolled back or are not
written yet through ``ack_problem``.
"""

from cpython.object cimport Py_TYPE, PyObject, PyTypeObject

from asyncio import get_running_loop
from types import FunctionType

from kairosmq.protocol import codec as _codec
from kairosmq.protocol.codec import encode_command
from kairosmq.protocol.codes import FLAG_ONEWAY, FLAG_RESPONSE, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.errors import ProtocolError

from protocol._capsules cimport _c_function
from protocol._slots cimport _field, _get, _own_slot, _put, _slot

from ..store.commitlog import CommitLog
from ..store.guard import WriteGuard
from ..store.message_store import MessageStore
from . import ingress as _ingress
from . import transport as _ref

cdef object _ref_dispatch = _ref.reference.dispatch
cdef type _RemotingCommand = RemotingCommand
cdef object _MessageStore = MessageStore
cdef object _SYSTEM_ERROR = ResponseCode.SYSTEM_ERROR
cdef long long _RESPONSE = FLAG_RESPONSE
cdef long long _ONEWAY = FLAG_ONEWAY
cdef Py_ssize_t _FRAMES_PER_TURN = _ref.FRAMES_PER_TURN
# the codec twin's ``FrameReader.feed`` and ``buffered`` as C functions (``_codec.FEED``,
# ``_codec.BUFFERED``), used for a reader that is exactly its ``FrameReader``
ctypedef int (*_feed_t)(object, object) except -1
ctypedef Py_ssize_t (*_buffered_t)(object) noexcept
cdef _feed_t _feed_c = <_feed_t>_c_function(_codec._twin, "FEED")
cdef _buffered_t _buffered_c = <_buffered_t>_c_function(_codec._twin, "BUFFERED")
cdef object _Reader = (
    _codec._twin.FrameReader if _feed_c != NULL and _buffered_c != NULL else None
)


cdef inline int _feed(object reader, object data) except -1:
    """``reader.feed(data)``."""
    if type(reader) is _Reader:
        return _feed_c(reader, data)
    reader.feed(data)
    return 0


cdef inline object _buffered(object reader):
    """``reader.buffered``."""
    if type(reader) is _Reader:
        return _buffered_c(reader)
    return reader.buffered


# ------------------------------------------------------------------ slots

cdef type _Connection = _ref.Connection
cdef type _RemotingServer = _ref.RemotingServer
cdef type _WriteGuard = WriteGuard
cdef type _CommitLog = CommitLog


# Connection
cdef Py_ssize_t C_SERVER = _own_slot(_Connection, "server")
cdef Py_ssize_t C_HANDLERS = _own_slot(_Connection, "handlers")
cdef Py_ssize_t C_READER = _own_slot(_Connection, "reader")
cdef Py_ssize_t C_TRANSPORT = _own_slot(_Connection, "transport")
cdef Py_ssize_t C_OUT = _own_slot(_Connection, "_out")
cdef Py_ssize_t C_ACKS = _own_slot(_Connection, "_acks")
cdef Py_ssize_t C_BUSY = _own_slot(_Connection, "_busy")
cdef Py_ssize_t C_WRITE_PAUSED = _own_slot(_Connection, "_write_paused")
cdef Py_ssize_t C_READING_PAUSED = _own_slot(_Connection, "_reading_paused")
cdef Py_ssize_t C_CLOSED = _own_slot(_Connection, "closed")
cdef Py_ssize_t C_ACTIVE = _own_slot(_Connection, "active")
cdef Py_ssize_t C_FRAMES_IN = _own_slot(_Connection, "frames_in")
cdef Py_ssize_t C_BYTES_IN = _own_slot(_Connection, "bytes_in")
cdef Py_ssize_t C_AUTHORIZED = _own_slot(_Connection, "authorized")
cdef Py_ssize_t C_COUNTED = _own_slot(_Connection, "counted")
# RemotingServer
cdef Py_ssize_t S_ACK_GUARD = _own_slot(_RemotingServer, "ack_guard")
cdef Py_ssize_t S_AUTH = _own_slot(_RemotingServer, "auth")
cdef Py_ssize_t S_REPLICATED = _own_slot(_RemotingServer, "replicated")
cdef Py_ssize_t S_TASKS = _own_slot(_RemotingServer, "tasks")
cdef Py_ssize_t S_DIRTY = _own_slot(_RemotingServer, "_dirty")
cdef Py_ssize_t S_TICK_SCHEDULED = _own_slot(_RemotingServer, "_tick_scheduled")
cdef Py_ssize_t S_BEFORE_WRITE = _own_slot(_RemotingServer, "before_write")
# the store's write guard and commit log (the ack guard's common case)
cdef Py_ssize_t G_APPENDS = _own_slot(_WriteGuard, "appends")
cdef Py_ssize_t G_END = _own_slot(_WriteGuard, "_end")
cdef Py_ssize_t G_EPOCH = _own_slot(_WriteGuard, "_epoch")
cdef Py_ssize_t G_ROLLBACKS = _own_slot(_WriteGuard, "_rollbacks")
cdef Py_ssize_t L_WRITTEN = _own_slot(_CommitLog, "_written")
# MessageStore (the ack guard): its write guard and commit log
cdef Py_ssize_t M_GUARD = _own_slot(_MessageStore, "guard")
cdef Py_ssize_t M_COMMITLOG = _own_slot(_MessageStore, "commitlog")
# RemotingCommand (a request's flag and code)
cdef Py_ssize_t R_FLAG = _own_slot(_RemotingCommand, "flag")
cdef Py_ssize_t R_CODE = _own_slot(_RemotingCommand, "code")
# ingress.guarded's wrapper (``run``, a closure over handler, log, stats): made here
cdef type _FunctionType = FunctionType
cdef object _RUN_CODE = _ingress.guarded(lambda conn, cmd: None, None, None).__code__
if _RUN_CODE.co_freevars != ("handler", "log", "stats"):
    raise ImportError(f"ingress.guarded's run closes over {_RUN_CODE.co_freevars}")


cdef extern from "Python.h":
    PyObject* _PyType_Lookup(PyTypeObject* t, object name)
    object PyObject_GenericGetDict(object obj, void* context)
    object _bound "PyMethod_New"(object func, object self)
    PyObject* PyFunction_GET_CODE(object f)
    PyObject* PyFunction_GET_CLOSURE(object f)
    PyObject* PyCell_GET(PyObject* cell)
    PyObject* PyTuple_GET_ITEM(PyObject* t, Py_ssize_t i)


cdef bint _ours(object obj, str name, object fn) except -1:
    """``obj.<name>`` is ``fn`` bound to ``obj``: its class's attribute (the cached type
    lookup) and no instance attribute of that name; then the twin calls it in C."""
    cdef PyObject* m = _PyType_Lookup(Py_TYPE(obj), name)
    if m == NULL or <object>m is not fn:
        return False
    if (<PyTypeObject*>Py_TYPE(obj)).tp_dictoffset == 0:
        return True
    return name not in <dict>PyObject_GenericGetDict(obj, NULL)


cdef inline bint _is_conn(object obj) noexcept:
    """A ``Connection`` (or a subclass: the same slots at the same offsets)."""
    return isinstance(obj, _Connection)


cdef inline bint _is_server(object obj) noexcept:
    return isinstance(obj, _RemotingServer)


# ------------------------------------------------------------------ Connection


def data_received(self, data):
    """``Connection.data_received``."""
    if not _is_conn(self):
        return _ref.reference.data_received(self, data)
    if _field(self, C_CLOSED, "closed"):  # refused or aborted: nothing more of it is read
        return
    _put(self, C_ACTIVE, True)
    _put(self, C_BYTES_IN, _field(self, C_BYTES_IN, "bytes_in") + len(data))
    reader = _field(self, C_READER, "reader")
    _feed(reader, data)
    if not _field(self, C_BUSY, "_busy") and not _field(self, C_WRITE_PAUSED, "_write_paused"):
        if _ours(self, "_process", _process_fn):
            _proc(self)
        else:
            self._process()
    if _buffered(reader) != _field(self, C_COUNTED, "counted"):
        _field(self, C_SERVER, "server").account(self)


def _process(self):
    """``Connection._process``."""
    if not _is_conn(self):
        return _ref.reference.process(self)
    _proc(self)


cdef object _process_fn = _process


cdef _proc(self):
    """``_process``'s body (``data_received`` calls it without the Python call)."""
    cdef Py_ssize_t n = 0
    _put(self, C_BUSY, False)
    if _field(self, C_CLOSED, "closed") or _field(self, C_WRITE_PAUSED, "_write_paused"):
        self._update_reading()
        return
    server = _field(self, C_SERVER, "server")
    # this module's dispatch (the server's class not overriding it): called in C
    direct = _is_server(server) and _ours(server, "dispatch", _dispatch_fn)
    dispatch = None if direct else server.dispatch
    reader = _field(self, C_READER, "reader")
    frames = iter(reader)
    try:
        for cmd in frames:
            if direct:
                _dispatch(server, self, cmd)
            else:
                dispatch(self, cmd)
            n += 1
            if n >= _FRAMES_PER_TURN:
                break
    except ProtocolError as err:
        _put(self, C_FRAMES_IN, _field(self, C_FRAMES_IN, "frames_in") + n)
        server.log.warning(
            "frame.rejected",
            peer=self.peer,
            conn_id=self.conn_id,
            error=f"{type(err).__name__}: {err}",
        )
        self.abort(f"protocol error: {err}")
        return
    finally:
        frames.close()  # drops the frames handled (the native twin: on close, not on release)
    _put(self, C_FRAMES_IN, _field(self, C_FRAMES_IN, "frames_in") + n)
    closed = _field(self, C_CLOSED, "closed")
    if n >= _FRAMES_PER_TURN and _buffered(reader) and not closed:
        _put(self, C_BUSY, True)
        get_running_loop().call_soon(self._process)
    # _update_reading, its "nothing to change" case read in place
    if (
        _field(self, C_BUSY, "_busy") or _field(self, C_WRITE_PAUSED, "_write_paused")
    ) != _field(self, C_READING_PAUSED, "_reading_paused"):
        self._update_reading()
        closed = _field(self, C_CLOSED, "closed")
    if _buffered(reader) != _field(self, C_COUNTED, "counted") and not closed:
        server.account(self)


def send(self, cmd, request=None, ack=None):
    """``Connection.send``."""
    if not _is_conn(self):
        return _ref.reference.send(self, cmd, request, ack)
    _send(self, cmd, request, ack)


cdef _send(self, cmd, request, ack):
    """``send``'s body (``_dispatch`` calls it without the Python call)."""
    if _field(self, C_CLOSED, "closed"):
        return
    out = _field(self, C_OUT, "_out")
    if not out:
        server = _field(self, C_SERVER, "server")
        if _is_server(server) and _ours(server, "mark_dirty", _mark_dirty_fn):
            _mark_dirty(server, self)
        else:
            server.mark_dirty(self)
    out.append(encode_command(cmd))
    if ack is not None and request is not None:
        _field(self, C_ACKS, "_acks").append((len(out) - 1, ack, request))


cdef bint _no_problem(guard, token):
    """``guard.ack_problem(token) is None`` for the broker's store, read in place: True
    when no rollback came after the token and its end is written; else False (then the
    guard is asked); ``guard`` is a ``MessageStore``."""
    g = _field(guard, M_GUARD, "guard")
    end, epoch = token
    if type(g) is _WriteGuard:
        if len(_field(g, G_ROLLBACKS, "_rollbacks")) > epoch:
            return False
    elif len(g._rollbacks) > epoch:
        return False
    log = _field(guard, M_COMMITLOG, "commitlog")
    written = _field(log, L_WRITTEN, "_written") if type(log) is _CommitLog else log._written
    if end > written:
        return False
    return True


def flush_out(self):
    """``Connection.flush_out``, with ``_check_acks``."""
    if not _is_conn(self):
        return _ref.reference.flush_out(self)
    _flush_out(self)


cdef object _flush_out_fn = flush_out


cdef _flush_out(self):
    """``flush_out``'s body (``_tick`` calls it without the Python call)."""
    acks = _field(self, C_ACKS, "_acks")
    if acks:
        guard = _field(_field(self, C_SERVER, "server"), S_ACK_GUARD, "ack_guard")
        if guard is None or type(guard) is not _MessageStore:
            self._check_acks()
        else:
            for item in acks:
                if not _no_problem(guard, (<tuple>item)[1]):
                    self._check_acks()  # the reference decides, over all of them
                    break
            else:
                _put(self, C_ACKS, [])
    out = _field(self, C_OUT, "_out")
    if out:
        transport = _field(self, C_TRANSPORT, "transport")
        if transport is not None and not _field(self, C_CLOSED, "closed"):
            data = b"".join(out) if len(out) > 1 else out[0]
            if type(out) is list:
                del (<list>out)[:]  # out.clear()
            else:
                out.clear()
            _put(self, C_ACTIVE, True)
            transport.write(data)


# ------------------------------------------------------------------ RemotingServer


def dispatch(self, conn, cmd):
    """``RemotingServer.dispatch``."""
    _dispatch(self, conn, cmd)


cdef object _dispatch_fn = dispatch


cdef _dispatch(self, conn, cmd):
    """``dispatch``'s body (``_process`` calls it without the Python call)."""
    if not _is_server(self) or not _is_conn(conn):
        return _ref_dispatch(self, conn, cmd)
    cdef bint plain = type(cmd) is _RemotingCommand  # its fields read in their slots
    cdef long long flag = _field(cmd, R_FLAG, "flag") if plain else cmd.flag
    if flag & _RESPONSE or _field(self, S_AUTH, "auth") is not None:
        return _ref_dispatch(self, conn, cmd)
    handlers = _field(conn, C_HANDLERS, "handlers")
    code = _field(cmd, R_CODE, "code") if plain else cmd.code
    if type(handlers) is dict:
        handler = (<dict>handlers).get(code)
    else:
        handler = handlers.get(code)
    if handler is None:
        return _ref_dispatch(self, conn, cmd)
    _put(conn, C_AUTHORIZED, True)
    guard = _field(self, S_ACK_GUARD, "ack_guard")
    store_guard = _field(guard, M_GUARD, "guard") if type(guard) is _MessageStore else None
    if type(store_guard) is not _WriteGuard:
        store_guard = None
    if store_guard is not None:
        appends = _field(store_guard, G_APPENDS, "appends")
    else:
        appends = guard.appends if guard is not None else 0
    cdef PyObject* cells
    cdef PyObject* inner = NULL
    if type(handler) is _FunctionType and PyFunction_GET_CODE(handler) == <PyObject*>_RUN_CODE:
        cells = PyFunction_GET_CLOSURE(handler)  # handler, log, stats (checked at import)
        inner = PyCell_GET(PyTuple_GET_ITEM(cells, 0))
    try:
        if inner != NULL:  # ingress.guarded's run, its body here
            try:
                result = (<object>inner)(conn, cmd)
            except _ingress.HeaderError as err:
                result = _guarded_refusal(cells, conn, cmd, err)
        else:
            result = handler(conn, cmd)
    except Exception as err:  # every failure becomes an answer
        result = self.failure_answer(conn, cmd, err)
    if result is None:
        return
    if store_guard is not None:
        ack = (
            (_field(store_guard, G_END, "_end"), _field(store_guard, G_EPOCH, "_epoch"))
            if _field(store_guard, G_APPENDS, "appends") != appends
            else None
        )
    else:
        ack = guard.ack_token() if guard is not None and guard.appends != appends else None
    if _field(self, S_REPLICATED, "replicated") is not None and (
        ack is not None or not isinstance(result, _RemotingCommand)
    ):
        result = self._when_replicated(cmd, result, ack, appends)
    if isinstance(result, _RemotingCommand):
        if not flag & _ONEWAY:
            if _ours(conn, "send", _send_fn):
                _send(conn, result, cmd, ack)
            else:
                conn.send(result, cmd, ack)
        return
    task = get_running_loop().create_task(self._finish(conn, cmd, result, ack))
    tasks = _field(self, S_TASKS, "tasks")
    tasks.add(task)
    task.add_done_callback(tasks.discard)


cdef object _guarded_refusal(PyObject* cells, conn, cmd, err):
    """``run``'s ``except HeaderError`` (``refuse``, as ingress names it now)."""
    cdef PyObject* log = PyCell_GET(PyTuple_GET_ITEM(cells, 1))
    cdef PyObject* stats = PyCell_GET(PyTuple_GET_ITEM(cells, 2))
    if stats == NULL or log == NULL:  # an emptied cell: the name fails as in ``run``
        raise NameError("free variable referenced before assignment in enclosing scope")
    return _ingress.refuse(<object>stats, <object>log, conn, cmd, err.response_code, str(err))


def mark_dirty(self, conn):
    """``RemotingServer.mark_dirty``."""
    if not _is_server(self):
        return _ref.reference.mark_dirty(self, conn)
    _mark_dirty(self, conn)


cdef _mark_dirty(self, conn):
    """``mark_dirty``'s body (``send`` calls it without the Python call)."""
    _field(self, S_DIRTY, "_dirty").append(conn)
    if not _field(self, S_TICK_SCHEDULED, "_tick_scheduled"):
        _put(self, S_TICK_SCHEDULED, True)
        # self._tick, bound without the attribute lookup when it is this module's
        tick = _bound(_tick_fn, self) if _ours(self, "_tick", _tick_fn) else self._tick
        get_running_loop().call_soon(tick)


cdef object _tick_fn  # _tick (set below it)


def _tick(self):
    """``RemotingServer._tick``."""
    if not _is_server(self):
        return _ref.reference.tick(self)
    _put(self, S_TICK_SCHEDULED, False)
    _field(self, S_BEFORE_WRITE, "before_write")()
    dirty = _field(self, S_DIRTY, "_dirty")
    _put(self, S_DIRTY, [])
    for conn in dirty:
        if _is_conn(conn) and _ours(conn, "flush_out", _flush_out_fn):
            _flush_out(conn)
        else:
            conn.flush_out()


cdef object _send_fn = send
cdef object _mark_dirty_fn = mark_dirty
_tick_fn = _tick
