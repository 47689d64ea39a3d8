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

Anything else is handed to the reference before anything is changed: a response frame
(a broker -> client call's answer), a request while an ACL check is installed
(``auth``: the hook runs in Python, once), a code without a handler; any other ack guard
is asked through its methods, and an ack whose records were rolled back or are not
written yet through ``ack_problem``.
"""

from cpython.method cimport PyMethod_Check, PyMethod_GET_FUNCTION

from asyncio import get_running_loop

from kairosmq.protocol.codec import encode_command
from kairosmq.protocol.codes import FLAG_ONEWAY, FLAG_RESPONSE, ResponseCode
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol.errors import ProtocolError

from ..store.message_store import MessageStore
from . import transport as _ref

cdef object _ref_dispatch = _ref.reference.dispatch
cdef object _RemotingCommand = RemotingCommand
cdef object _MessageStore = MessageStore
cdef object _SYSTEM_ERROR = ResponseCode.SYSTEM_ERROR
cdef long long _RESPONSE = FLAG_RESPONSE
cdef long long _ONEWAY = FLAG_ONEWAY
cdef Py_ssize_t _FRAMES_PER_TURN = _ref.FRAMES_PER_TURN


# ------------------------------------------------------------------ Connection


def data_received(self, data):
    """``Connection.data_received``."""
    if self.closed:  # refused or aborted: nothing more of it is read
        return
    self.active = True
    self.bytes_in += len(data)
    reader = self.reader
    reader.feed(data)
    if not self._busy and not self._write_paused:
        self._process()
    if reader.buffered != self.counted:
        self.server.account(self)


def _process(self):
    """``Connection._process``."""
    cdef Py_ssize_t n = 0
    self._busy = False
    if self.closed or self._write_paused:
        self._update_reading()
        return
    server = self.server
    dispatch = server.dispatch
    # this module's dispatch (the server's class not overriding it): called in C
    direct = PyMethod_Check(dispatch) and <object>PyMethod_GET_FUNCTION(dispatch) is _dispatch_fn
    frames = iter(self.reader)
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
        self.frames_in += n
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
    self.frames_in += n
    if n >= _FRAMES_PER_TURN and self.reader.buffered and not self.closed:
        self._busy = True
        get_running_loop().call_soon(self._process)
    # _update_reading, its "nothing to change" case read in place
    if (self._busy or self._write_paused) != self._reading_paused:
        self._update_reading()
    if self.reader.buffered != self.counted and not self.closed:
        server.account(self)


def send(self, cmd, request=None, ack=None):
    """``Connection.send``."""
    if self.closed:
        return
    out = self._out
    if not out:
        self.server.mark_dirty(self)
    out.append(encode_command(cmd))
    if ack is not None and request is not None:
        self._acks.append((len(out) - 1, ack, request))


cdef bint _no_problem(guard, token):
    """``guard.ack_problem(token) is None`` for the broker's store, read in place: True
    when no rollback came after the token and its end is written; else False (then the
    guard is asked)."""
    g = guard.guard
    end, epoch = token
    if len(g._rollbacks) > epoch or end > guard.commitlog._written:
        return False
    return True


def flush_out(self):
    """``Connection.flush_out``, with ``_check_acks``."""
    acks = self._acks
    if acks:
        guard = self.server.ack_guard
        if guard is None or type(guard) is not _MessageStore:
            self._check_acks()
        else:
            for item in acks:
                if not _no_problem(guard, (<tuple>item)[1]):
                    self._check_acks()  # the reference decides, over all of them
                    break
            else:
                self._acks = []
    out = self._out
    if out and self.transport is not None and not self.closed:
        data = b"".join(out) if len(out) > 1 else out[0]
        out.clear()
        self.active = True
        self.transport.write(data)


# ------------------------------------------------------------------ RemotingServer


def dispatch(self, conn, cmd):
    """``RemotingServer.dispatch``."""
    _dispatch(self, conn, cmd)


cdef object _dispatch_fn = dispatch


cdef _dispatch(self, conn, cmd):
    """``dispatch``'s body (``_process`` calls it without the Python call)."""
    cdef long long flag = cmd.flag
    if flag & _RESPONSE or self.auth is not None:
        return _ref_dispatch(self, conn, cmd)
    handlers = conn.handlers
    if type(handlers) is dict:
        handler = (<dict>handlers).get(cmd.code)
    else:
        handler = handlers.get(cmd.code)
    if handler is None:
        return _ref_dispatch(self, conn, cmd)
    conn.authorized = True
    guard = self.ack_guard
    store_guard = guard.guard if type(guard) is _MessageStore else None
    if store_guard is not None:
        appends = store_guard.appends
    else:
        appends = guard.appends if guard is not None else 0
    try:
        result = handler(conn, cmd)
    except Exception as err:  # every failure becomes an answer
        result = self.failure_answer(conn, cmd, err)
    if result is None:
        return
    if store_guard is not None:
        ack = (store_guard._end, store_guard._epoch) if store_guard.appends != appends else None
    else:
        ack = guard.ack_token() if guard is not None and guard.appends != appends else None
    if self.replicated is not None and (
        ack is not None or not isinstance(result, _RemotingCommand)
    ):
        result = self._when_replicated(cmd, result, ack, appends)
    if isinstance(result, _RemotingCommand):
        if not flag & _ONEWAY:
            conn.send(result, cmd, ack)
        return
    task = get_running_loop().create_task(self._finish(conn, cmd, result, ack))
    self.tasks.add(task)
    task.add_done_callback(self.tasks.discard)


def mark_dirty(self, conn):
    """``RemotingServer.mark_dirty``."""
    self._dirty.append(conn)
    if not self._tick_scheduled:
        self._tick_scheduled = True
        get_running_loop().call_soon(self._tick)


def _tick(self):
    """``RemotingServer._tick``."""
    self._tick_scheduled = False
    self.before_write()
    dirty = self._dirty
    self._dirty = []
    for conn in dirty:
        conn.flush_out()
