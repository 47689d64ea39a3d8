# cython: language_level=3, boundscheck=False, wraparound=False
"""Native twin of ``pull.py``'s PULL_MESSAGE (chosen by ``protocol/native.py``;
``pull.py`` is the reference and owns every rule of a pull).

``handle_pull``, ``answer`` and ``hold`` (``PullMessageProcessor.handle_pull``,
``_answer`` and ``_hold``, whose ``answer`` closure is ``HeldAnswer``) make the common
pull in one C function each, mirroring the reference step for step: the header decoded
by its compiled codec (no ``from_ext_fields`` frames; the header twin's ``FROM_EXT`` C
entry point when the codec is exactly its ``FromExt``) and its fields read in their
slots (so are the processor's, for its class and subclasses that keep its slots), ``check_pull``'s and the group's checks (their passing case read in place, any
other case asked of them), the request-carried TAG expression looked up in the parsed
table, the offset commit of the sysFlag, the read (``reads.get``: when it is the
native twin's, its C function is called directly, ``_reads.GET_CAPI``), the hold
decision, and the answer: the response header's four fields written as
``to_ext_fields`` writes them (an ``int``'s decimal digits written in C), the stats
(a counter already present incremented in place), one ``message.pulled`` event per
record given to the log's hot-path writer (to the native writer as values in a C array
through its ``ROW``, ``PULLED_KEYS`` in the reference's keyword order: no fields dict), and the response command allocated and
filled in its slots without ``__init__``. A held pull's wake (``HeldAnswer``) releases
its admission, reads and answers the same way; ``_hold``'s ``pull.held`` debug event
is not built when the processor's logger drops it unseen (structlog's no-op method).

Anything else goes to the reference, which decides: a filter not in the table
(``_filter``: parsed there, and a SQL92 selector is read by ``_get``), an answer that is
not FOUND or with ``slave_read_enable``, or of objects of other classes (``_answer``).
"""

from cpython.dict cimport PyDict_GetItemWithError, PyDict_SetItem
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.tuple cimport PyTuple_GET_ITEM
from cpython.long cimport PyLong_AsLongLongAndOverflow
from cpython.method cimport PyMethod_Check, PyMethod_GET_FUNCTION, PyMethod_GET_SELF
from cpython.object cimport PyObject
from cpython.pycapsule cimport PyCapsule_GetPointer
from libc.string cimport memcpy
from protocol._capsules cimport _c_function
from protocol._slots cimport OBJECT_NEW, _at, _field, _fresh, _own_slot, _plain, _put, _slot
from protocol._digits cimport _dec

from collections import defaultdict

from kairosmq.protocol.codes import (
    BROKER_VERSION,
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    PERM_READ,
    PULL_COMMIT_OFFSET,
    PULL_SUBSCRIPTION,
    PULL_SUSPEND,
    LanguageCode,
    ResponseCode,
)
from kairosmq.protocol.commands import RemotingCommand
from kairosmq.protocol import headers as _headers_mod
from kairosmq.protocol.headers import PullMessageRequestHeader
from kairosmq.protocol.message import RecordSummary, summarize_records
from kairosmq.protocol.sql92 import Selector

from ..config import BrokerConfig
from ..observe import logs as _logs
from ..observe.stats import BrokerStats
from ..remoting import ingress as _ingress
from ..remoting.ingress import check_pull as _check_pull
from ..remoting.longpoll import PullHolds
from ..store import _reads
from ..tables.clients import ClientRegistry
from ..tables.subscriptions import SubscriptionGroupManager
from ..tables.topics import TopicConfig, TopicConfigManager
from ..store import GetResult, GetStatus
from . import pull as _ref


cdef extern from "Python.h":
    object _PyDict_NewPresized(Py_ssize_t minused)
    PyObject* _PyDict_GetItem_KnownHash(object mp, object key, Py_hash_t hash)
    int _PyDict_SetItem_KnownHash(object mp, object key, object item, Py_hash_t hash) except -1
    PyObject* PyErr_Occurred()
    object PyUnicode_New(Py_ssize_t size, unsigned int maxchar)
    void* PyUnicode_DATA(object s)


cdef inline object _hf(object h, bint exact, Py_ssize_t at, str name):
    """A header field: read in its slot when ``h`` is exactly the header class."""
    if exact:
        return _field(h, at, name)
    return getattr(h, name)


cdef object _add(object counts, object key, Py_ssize_t n):
    """``counts[key] += n``: a ``defaultdict`` holding ``key`` (an ``int``) is updated in
    place, anything else through its ``__getitem__``/``__setitem__``."""
    cdef PyObject* p
    if type(counts) is defaultdict:
        p = PyDict_GetItemWithError(counts, key)
        if p != NULL and type(<object>p) is int:
            PyDict_SetItem(counts, key, <object>p + n)
            return None
    counts[key] += n


cdef tuple _pair = None  # the last (topic, group) key ``_add_pair`` made, and its hash
cdef Py_hash_t _pair_hash = 0


cdef inline bint _same_text(object a, object b):
    """``a == b`` for two exact ``str`` (no Python call)."""
    if a is b:
        return True
    return type(a) is str and type(b) is str and <str>a == <str>b


cdef int _error() except -1:
    """Propagate the error a C call left set."""
    return -1


cdef object _add_pair(object counts, object topic, object group, Py_ssize_t n):
    """``counts[(topic, group)] += n`` (``stats.group_pulled``): the key tuple of the last
    pull of the same topic and group (equal ``str``) reused with its hash, so the
    ``defaultdict`` entry is found without hashing and comparing a new tuple; anything
    else through ``_add``."""
    global _pair, _pair_hash
    cdef PyObject* p
    if type(counts) is not defaultdict or type(topic) is not str or type(group) is not str:
        return _add(counts, (topic, group), n)
    if not (
        _pair is not None
        and _same_text(<object>PyTuple_GET_ITEM(_pair, 0), topic)
        and _same_text(<object>PyTuple_GET_ITEM(_pair, 1), group)
    ):
        key = (topic, group)
        _pair_hash = hash(key)
        _pair = key
    p = _PyDict_GetItem_KnownHash(counts, _pair, _pair_hash)
    if p == NULL and PyErr_Occurred() != NULL:
        _error()
    if p != NULL and type(<object>p) is int:
        _PyDict_SetItem_KnownHash(counts, _pair, <object>p + n, _pair_hash)
        return None
    counts[_pair] += n


# the header's fields
cdef object _Header = PullMessageRequestHeader
cdef Py_ssize_t H_GROUP = _slot(_Header, "consumer_group")
cdef Py_ssize_t H_TOPIC = _slot(_Header, "topic")
cdef Py_ssize_t H_QID = _slot(_Header, "queue_id")
cdef Py_ssize_t H_QOFF = _slot(_Header, "queue_offset")
cdef Py_ssize_t H_MAX = _slot(_Header, "max_msg_nums")
cdef Py_ssize_t H_FLAG = _slot(_Header, "sys_flag")
cdef Py_ssize_t H_COMMIT = _slot(_Header, "commit_offset")
cdef Py_ssize_t H_SUSPEND = _slot(_Header, "suspend_timeout_millis")
cdef Py_ssize_t H_SUB = _slot(_Header, "subscription")
cdef Py_ssize_t H_EXPR = _slot(_Header, "expression_type")
# the command's
cdef object _Command = RemotingCommand
cdef Py_ssize_t C_CODE = _slot(_Command, "code", True)
cdef Py_ssize_t C_OPAQUE = _slot(_Command, "opaque", True)
cdef Py_ssize_t C_FLAG = _slot(_Command, "flag", True)
cdef Py_ssize_t C_LANG = _slot(_Command, "language", True)
cdef Py_ssize_t C_VERSION = _slot(_Command, "version", True)
cdef Py_ssize_t C_REMARK = _slot(_Command, "remark", True)
cdef Py_ssize_t C_EXT = _slot(_Command, "ext_fields", True)
cdef Py_ssize_t C_BODY = _slot(_Command, "body", True)
cdef Py_ssize_t C_SER = _slot(_Command, "serialize_type", True)
_plain(_Command, OBJECT_NEW)
# the read's result
cdef object _Result = GetResult
cdef Py_ssize_t R_STATUS = _slot(_Result, "status")
cdef Py_ssize_t R_NEXT = _slot(_Result, "next_begin_offset")
cdef Py_ssize_t R_MIN = _slot(_Result, "min_offset")
cdef Py_ssize_t R_MAX = _slot(_Result, "max_offset")
cdef Py_ssize_t R_CHUNKS = _slot(_Result, "chunks")
cdef Py_ssize_t R_UNITS = _slot(_Result, "units")
# a topic's config, a record's summary
cdef Py_ssize_t T_PERM = _slot(TopicConfig, "perm")
cdef Py_ssize_t T_READ = _slot(TopicConfig, "read_queue_nums")
cdef Py_ssize_t T_WRITE = _slot(TopicConfig, "write_queue_nums")
cdef object _Summary = RecordSummary
cdef Py_ssize_t S_MSG_ID = _slot(_Summary, "msg_id")
cdef Py_ssize_t S_QOFF = _slot(_Summary, "queue_offset")
cdef Py_ssize_t S_BORN = _slot(_Summary, "born_timestamp")
cdef Py_ssize_t S_RECONSUME = _slot(_Summary, "reconsume_times")

cdef object _pure = _ref.reference
# the processor's fields a pull reads, in place (``_laid_out``)
cdef object _Proc = _ref.PullMessageProcessor
cdef Py_ssize_t P_TOPICS = _slot(_Proc, "topics")
cdef Py_ssize_t P_SUBS = _slot(_Proc, "subscriptions")
cdef Py_ssize_t P_CLIENTS = _slot(_Proc, "clients")
cdef Py_ssize_t P_TAGS = _slot(_Proc, "_tag_filters")
cdef Py_ssize_t P_OFFSETS = _slot(_Proc, "offsets")
cdef Py_ssize_t P_READS = _slot(_Proc, "reads")
cdef Py_ssize_t P_CONFIG = _slot(_Proc, "config")
cdef Py_ssize_t P_STATS = _slot(_Proc, "stats")
cdef Py_ssize_t P_MSGLOG = _slot(_Proc, "msglog")
cdef object _laid_out_type = None  # the last subclass found to read its fields so
# the broker's config and counters, their fields read in their slots (exactly these
# classes; anything else is read through its attributes)
cdef type _Config = BrokerConfig
cdef Py_ssize_t K_PULL_MAX_BYTES = _own_slot(_Config, "pull_max_bytes")
cdef Py_ssize_t K_SLAVE_READ = _own_slot(_Config, "slave_read_enable")
cdef Py_ssize_t K_LOG_MESSAGES = _own_slot(_Config, "log_messages")
cdef type _Stats = BrokerStats
cdef Py_ssize_t N_PULLED = _own_slot(_Stats, "pulled")
cdef Py_ssize_t N_GROUP_PULLED = _own_slot(_Stats, "group_pulled")


cdef inline object _of(object obj, type cls, Py_ssize_t at, str name):
    """``obj.<name>``: read in its slot at ``at`` when ``obj`` is exactly a ``cls``."""
    if type(obj) is cls:
        return _field(obj, at, name)
    return getattr(obj, name)


cdef bint _laid_out(object self) except -1:
    """Whether ``self``'s fields are read in ``PullMessageProcessor``'s slots: an
    instance of it, or of a subclass (its methods replaced, as the parity tests' are)
    whose lookup of each field finds that very slot and which keeps
    ``object.__getattribute__`` (checked once per class, the last such class kept);
    anything else is read through its attributes."""
    global _laid_out_type
    t = type(self)
    if t is _Proc or t is _laid_out_type:
        return True
    if not issubclass(t, _Proc) or t.__getattribute__ is not object.__getattribute__:
        return False
    for name in _Proc.__slots__:
        found = None
        for k in t.__mro__:
            found = k.__dict__.get(name)
            if found is not None:
                break
        if found is not _Proc.__dict__[name]:
            return False
    _laid_out_type = t
    return True


cdef inline object _pf(object self, bint slotted, Py_ssize_t at, str name):
    """A processor field: read in its slot when ``slotted`` (``_laid_out``)."""
    if slotted:
        return _field(self, at, name)
    return getattr(self, name)
cdef object _FOUND = GetStatus.FOUND
cdef object _OVERFLOW_ONE = GetStatus.OFFSET_OVERFLOW_ONE
cdef object _NO_MESSAGE = GetStatus.NO_MESSAGE_IN_QUEUE
cdef object _TOPIC_NOT_EXIST = ResponseCode.TOPIC_NOT_EXIST
cdef object _NO_PERMISSION = ResponseCode.NO_PERMISSION
cdef object _SUCCESS = int(ResponseCode.SUCCESS)
cdef object _RESPONSE = FLAG_RESPONSE
cdef object _VERSION = BROKER_VERSION
cdef object _JAVA = LanguageCode.JAVA
cdef object _MessageLog = _logs.MessageLog
cdef dict _ingress_globals = _ingress.__dict__  # ``_groups`` read as the module does
cdef dict _logs_globals = _logs.__dict__  # ``_info_enabled``/``_fast_emit`` read as the module does
cdef str _MASTER = str(_ref.MASTER_ID)
cdef object _MISS = object()
cdef Py_ssize_t _TAG_CHARS = _ref._TAG_FILTER_CHARS
cdef object _from_ext = None  # PullMessageRequestHeader's compiled decoder (first pull)
# the header twin's ``FromExt`` call as a C function (``_headers.FROM_EXT``), when chosen
ctypedef object (*from_ext_fn)(object, object)
cdef from_ext_fn _from_ext_c = NULL
cdef object _FromExt = None
_from_ext_c = <from_ext_fn>_c_function(_headers_mod._twin, "FROM_EXT")
if _from_ext_c != NULL:
    _FromExt = _headers_mod._twin.FromExt
cdef object _Selector = Selector
# the hot-path log writer's row entry (``_logs.ROW``): ``message.pulled`` written from its
# values in a C array, without the fields dict, when the emitter is exactly the twin's
ctypedef int (*_row_t)(object, object, tuple, PyObject**) except -1
cdef _row_t _row = <_row_t>_c_function(_logs._twin, "ROW")
cdef object _LineEmitter = _logs._twin.LineEmitter if _row != NULL else None
# the keywords ``_answer`` logs ``message.pulled`` with, in its order
PULLED_KEYS = (
    "msg_id", "group", "topic", "queue_id", "queue_offset", "born_ts", "reconsume_times"
)
cdef tuple _PULLED_KEYS = PULLED_KEYS
# ``reads.get`` of the native twin, and its C function (``_reads.GET_CAPI``)
ctypedef object (*GetFn)(object, object, object, object, object, object, object, object)
cdef object _twin_get = _reads.get
cdef object _MAX_SCAN = _reads.MAX_SCAN
cdef GetFn _get_c = <GetFn>PyCapsule_GetPointer(_reads.GET_CAPI, "kairosmq.server.store._reads.get")
cdef object _nop = None  # structlog's method for a level its filtering logger drops
try:
    from structlog._native import _nop
except ImportError:  # another structlog: ``pull.held`` is always given to the logger
    pass


cdef object _checked(topics, h, bint exact):
    """``ingress.check_pull``: a group name already validated, a topic of the table, a
    queue id within its queues and an offset >= 0 read in place; any other request goes
    to ``check_pull``, which refuses it or answers alike."""
    cdef PyObject* p
    group = _hf(h, exact, H_GROUP, "consumer_group")
    if type(group) is not str or group not in _ingress_globals["_groups"].ok:
        return _check_pull(topics, h)
    if type(topics) is not TopicConfigManager:
        return _check_pull(topics, h)
    table = topics.topics
    topic = _hf(h, exact, H_TOPIC, "topic")
    if type(table) is dict and type(topic) is str:
        p = PyDict_GetItemWithError(table, topic)
        cfg = <object>p if p != NULL else None
    else:
        cfg = table.get(topic)
    if type(cfg) is not TopicConfig:
        return _check_pull(topics, h)
    queue_id = _hf(h, exact, H_QID, "queue_id")
    if (
        queue_id < 0
        or queue_id >= max(_field(cfg, T_READ, "read_queue_nums"),
                           _field(cfg, T_WRITE, "write_queue_nums"))  # queue_nums
        or _hf(h, exact, H_QOFF, "queue_offset") < 0
    ):
        return _check_pull(topics, h)
    return cfg


cdef bint _acquired(holds, conn) except -1:
    """``PullHolds.acquire``, read in place (another admission class is asked)."""
    if type(holds) is not PullHolds:
        return holds.acquire(conn)
    n = getattr(conn, "held_pulls", 0)
    if n >= holds.per_connection or holds.held >= holds.limit:
        holds.refused += 1
        return False
    conn.held_pulls = n + 1
    holds.held += 1
    return True


cdef inline bint _is_tag_type(object t):
    """``property_filter.is_tag_type``."""
    return not t or t.upper() == "TAG"


cdef inline object _dict_get(object d, object key, object default):
    """``d.get(key, default)``, a ``dict``'s read in C."""
    cdef PyObject* p
    if type(d) is not dict:
        return d.get(key, default)
    p = PyDict_GetItemWithError(d, key)
    return <object>p if p != NULL else default


def handle_pull(self, conn, cmd):
    """``PullMessageProcessor.handle_pull``."""
    global _from_ext
    cdef long long sys_flag
    cdef bint exact, slotted
    if _from_ext is None:
        _from_ext = PullMessageRequestHeader._codec(False)[0]
    ext = _field(cmd, C_EXT, "ext_fields") if type(cmd) is _Command else cmd.ext_fields
    if _from_ext_c != NULL and type(_from_ext) is _FromExt and type(ext) is dict:
        h = _from_ext_c(_from_ext, ext)
    else:
        h = _from_ext(ext)
    exact = type(h) is _Header
    slotted = _laid_out(self)
    cfg = _checked(_pf(self, slotted, P_TOPICS, "topics"), h, exact)
    subs = _pf(self, slotted, P_SUBS, "subscriptions")
    if subs is not None:  # the group's config first, as RocketMQ does
        group = _hf(h, exact, H_GROUP, "consumer_group")
        clients = _pf(self, slotted, P_CLIENTS, "clients")
        info = (
            _dict_get(clients.consumers, group, None)  # ClientRegistry.group_info
            if type(clients) is ClientRegistry
            else clients.group_info(group)
        )
        model = info.message_model if info is not None else None
        # SubscriptionGroupManager.pull_refusal's "no refusal" read in place: an existing
        # group, consumeEnable, not a broadcast consumer of a group without
        # consumeBroadcastEnable; any other case asks it (it auto-creates the group)
        gcfg = (
            _dict_get(subs.table, group, None) if type(subs) is SubscriptionGroupManager else None
        )
        if (
            gcfg is None
            or not gcfg.consume_enable
            or (model == "BROADCASTING" and not gcfg.consume_broadcast_enable)
        ):
            refused = subs.pull_refusal(group, model)
            if refused is not None:
                return cmd.error(*refused)
    topic = _hf(h, exact, H_TOPIC, "topic")
    if cfg is None:
        return cmd.error(_TOPIC_NOT_EXIST, f"topic {topic} does not exist")
    if not (_field(cfg, T_PERM, "perm") if type(cfg) is TopicConfig else cfg.perm) & PERM_READ:
        return cmd.error(_NO_PERMISSION, f"topic {topic} is not readable")
    sys_flag = _hf(h, exact, H_FLAG, "sys_flag")
    codes = _MISS
    if sys_flag & PULL_SUBSCRIPTION:  # ``_filter``'s table, read in place
        expr = _hf(h, exact, H_SUB, "subscription")
        if expr and len(expr) <= _TAG_CHARS and _is_tag_type(_hf(h, exact, H_EXPR, "expression_type")):
            codes = _dict_get(_pf(self, slotted, P_TAGS, "_tag_filters"), expr, _MISS)
    if codes is _MISS:
        codes = self._filter(h)
    if sys_flag & PULL_COMMIT_OFFSET:
        commit = _hf(h, exact, H_COMMIT, "commit_offset")
        if commit >= 0:
            _pf(self, slotted, P_OFFSETS, "offsets").commit(_hf(h, exact, H_GROUP, "consumer_group"), topic,
                                _hf(h, exact, H_QID, "queue_id"), commit)
    result = _read(self, h, exact, codes)
    status = _field(result, R_STATUS, "status") if type(result) is _Result else result.status
    if (
        (status is _OVERFLOW_ONE or (status is _NO_MESSAGE and _hf(h, exact, H_QOFF, "queue_offset") == 0))
        and sys_flag & PULL_SUSPEND
        and self.config.long_polling
        and self.running()
    ):
        if _acquired(self.holds, conn):
            hold_m = self._hold
            if (
                PyMethod_Check(hold_m)
                and PyMethod_GET_FUNCTION(hold_m) is <PyObject*>hold
                and PyMethod_GET_SELF(hold_m) is <PyObject*>self
            ):
                _hold(self, conn, cmd, h, codes)
            else:
                hold_m(conn, cmd, h, codes)
            return None
    return _answer(self, cmd, h, result)


cdef object _read(self, h, bint exact, codes):
    """``PullMessageProcessor._get``: the tag or no filter read directly (the native
    ``reads.get`` called as a C function)."""
    if codes is not None and type(codes) is not frozenset and isinstance(codes, _Selector):
        return self._get(h, codes)
    max_count = _hf(h, exact, H_MAX, "max_msg_nums")
    max_count = max(1, min(max_count, 512))
    cdef bint slotted = _laid_out(self)
    reads = _pf(self, slotted, P_READS, "reads")
    get = reads.get
    topic = _hf(h, exact, H_TOPIC, "topic")
    queue_id = _hf(h, exact, H_QID, "queue_id")
    offset = _hf(h, exact, H_QOFF, "queue_offset")
    max_bytes = _of(_pf(self, slotted, P_CONFIG, "config"), _Config, K_PULL_MAX_BYTES, "pull_max_bytes")
    if (
        PyMethod_Check(get)
        and PyMethod_GET_FUNCTION(get) is <PyObject*>_twin_get
        and PyMethod_GET_SELF(get) is <PyObject*>reads
    ):
        return _get_c(reads, topic, queue_id, offset, max_count, max_bytes, codes, _MAX_SCAN)
    return get(topic, queue_id, offset, max_count, max_bytes=max_bytes, match=codes)


cdef class HeldAnswer:
    """``_hold``'s ``answer(notified)``: the held pull's release, read and answer."""

    cdef object proc, conn, cmd, h, codes

    def __init__(self, proc, conn, cmd, h, codes):
        self.proc, self.conn, self.cmd, self.h, self.codes = proc, conn, cmd, h, codes

    def __call__(self, notified):
        proc, conn, cmd = self.proc, self.conn, self.cmd
        h = self.h
        holds = proc.holds
        if type(holds) is PullHolds:  # PullHolds.release
            conn.held_pulls -= 1
            holds.held -= 1
        else:
            holds.release(conn)
        try:
            ans = proc._answer
            result = _read(proc, h, type(h) is _Header, self.codes)
            if (
                PyMethod_Check(ans)
                and PyMethod_GET_FUNCTION(ans) is <PyObject*>answer
                and PyMethod_GET_SELF(ans) is <PyObject*>proc
            ):
                response = _answer(proc, cmd, h, result)
            else:
                response = ans(cmd, h, result)
        except Exception as err:  # every failure becomes an answer
            response = conn.server.failure_answer(conn, cmd, err)
        if not (_field(cmd, C_FLAG, "flag") if type(cmd) is _Command else cmd.flag) & FLAG_ONEWAY:
            conn.send(response)


cdef object _copy_request(cmd):
    """``RemotingCommand(code, opaque, flag, language, version, remark, {}, b"",
    serialize_type)`` of ``cmd``, allocated and filled in its slots."""
    held = _fresh(_Command)
    _put(held, C_CODE, _field(cmd, C_CODE, "code"))
    _put(held, C_OPAQUE, _field(cmd, C_OPAQUE, "opaque"))
    _put(held, C_FLAG, _field(cmd, C_FLAG, "flag"))
    _put(held, C_LANG, _field(cmd, C_LANG, "language"))
    _put(held, C_VERSION, _field(cmd, C_VERSION, "version"))
    _put(held, C_REMARK, _field(cmd, C_REMARK, "remark"))
    _put(held, C_EXT, {})
    _put(held, C_BODY, b"")
    _put(held, C_SER, _field(cmd, C_SER, "serialize_type"))
    return held


def hold(self, conn, cmd, h, codes):
    """``PullMessageProcessor._hold``."""
    _hold(self, conn, cmd, h, codes)


cdef object _hold(self, conn, cmd, h, codes):
    """``hold``'s body (called by ``handle_pull`` directly)."""
    cdef HeldAnswer wake
    cdef bint exact = type(h) is _Header
    timeout_ms = _hf(h, exact, H_SUSPEND, "suspend_timeout_millis")  # max(0, min(.., cap))
    cap = self.config.max_pull_hold_ms
    if timeout_ms > cap:
        timeout_ms = cap
    if timeout_ms < 0:
        timeout_ms = 0
    # parsed into ``h``: what is held keeps no raw header (memory per held pull)
    if type(cmd) is _Command:
        cmd = _copy_request(cmd)
    else:
        cmd = RemotingCommand(cmd.code, cmd.opaque, cmd.flag, cmd.language, cmd.version,
                              cmd.remark, {}, b"", cmd.serialize_type)
    topic = _hf(h, exact, H_TOPIC, "topic")
    queue_id = _hf(h, exact, H_QID, "queue_id")
    debug = self.log.debug
    if not (
        _nop is not None
        and PyMethod_Check(debug)
        and PyMethod_GET_FUNCTION(debug) is <PyObject*>_nop
    ):  # structlog's no-op for a dropped level is not called: it does nothing
        debug(
            "pull.held",
            group=_hf(h, exact, H_GROUP, "consumer_group"),
            topic=topic,
            queue_id=queue_id,
            queue_offset=_hf(h, exact, H_QOFF, "queue_offset"),
            timeout_ms=timeout_ms,
        )
    wake = HeldAnswer.__new__(HeldAnswer)  # HeldAnswer(self, conn, cmd, h, codes)
    wake.proc, wake.conn, wake.cmd, wake.h, wake.codes = self, conn, cmd, h, codes
    self.notifier.hold(topic, queue_id, wake, timeout_ms / 1000)


def answer(self, cmd, h, result):
    """``PullMessageProcessor._answer``."""
    return _answer(self, cmd, h, result)


cdef object _answer(self, cmd, h, result):
    """``answer``'s body (called by ``handle_pull`` and ``HeldAnswer`` directly)."""
    cdef Py_ssize_t n, k
    cdef PyObject* p
    cdef PyObject* f
    cdef dict ext, fields
    cdef list summaries
    cdef bint row
    cdef PyObject* vals[7]
    cdef bint slotted = _laid_out(self)
    config = _pf(self, slotted, P_CONFIG, "config")
    if (
        type(result) is not _Result
        or type(h) is not _Header
        or type(cmd) is not _Command
        or _at(result, R_STATUS) != <PyObject*>_FOUND
        or _of(config, _Config, K_SLAVE_READ, "slave_read_enable")
    ):
        return _pure._answer(self, cmd, h, result)
    # PullMessageResponseHeader.to_ext_fields: suggestWhichBrokerId 0 (the master)
    ext = _PyDict_NewPresized(4)
    ext["suggestWhichBrokerId"] = _MASTER
    ext["nextBeginOffset"] = _dec(_field(result, R_NEXT, "next_begin_offset"))
    ext["minOffset"] = _dec(_field(result, R_MIN, "min_offset"))
    ext["maxOffset"] = _dec(_field(result, R_MAX, "max_offset"))
    chunks = _field(result, R_CHUNKS, "chunks")
    if type(chunks) is list and PyList_GET_SIZE(chunks) == 1:
        body = <object>PyList_GET_ITEM(chunks, 0)
    else:
        body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    n = len(_field(result, R_UNITS, "units"))
    topic = _field(h, H_TOPIC, "topic")
    group = _field(h, H_GROUP, "consumer_group")
    stats = _pf(self, slotted, P_STATS, "stats")
    _add(_of(stats, _Stats, N_PULLED, "pulled"), topic, n)
    _add_pair(_of(stats, _Stats, N_GROUP_PULLED, "group_pulled"), topic, group, n)
    msglog = _pf(self, slotted, P_MSGLOG, "msglog")
    fast = type(msglog) is _MessageLog
    # MessageLog.enabled and MessageLog.info's emitter, read in place
    if _of(config, _Config, K_LOG_MESSAGES, "log_messages") and (
        _logs_globals["_info_enabled"] if fast else msglog.enabled
    ):
        emit = _logs_globals["_fast_emit"] if fast else None
        row = emit is not None and _row != NULL and type(emit) is _LineEmitter
        queue_id = _field(h, H_QID, "queue_id")
        summaries = summarize_records(body)
        for k in range(PyList_GET_SIZE(summaries)):
            s = <object>PyList_GET_ITEM(summaries, k)
            if type(s) is _Summary:
                msg_id = _field(s, S_MSG_ID, "msg_id")
                queue_offset = _field(s, S_QOFF, "queue_offset")
                born_ts = _field(s, S_BORN, "born_timestamp")
                reconsume_times = _field(s, S_RECONSUME, "reconsume_times")
            else:
                msg_id = s.msg_id
                queue_offset = s.queue_offset
                born_ts = s.born_timestamp
                reconsume_times = s.reconsume_times
            if emit is None:
                msglog.info(
                    "message.pulled",
                    msg_id=msg_id,
                    group=group,
                    topic=topic,
                    queue_id=queue_id,
                    queue_offset=queue_offset,
                    born_ts=born_ts,
                    reconsume_times=reconsume_times,
                )
                continue
            if row:  # the line written from the values, no fields dict
                vals[0] = <PyObject*>msg_id
                vals[1] = <PyObject*>group
                vals[2] = <PyObject*>topic
                vals[3] = <PyObject*>queue_id
                vals[4] = <PyObject*>queue_offset
                vals[5] = <PyObject*>born_ts
                vals[6] = <PyObject*>reconsume_times
                _row(emit, "message.pulled", _PULLED_KEYS, vals)
                continue
            # MessageLog.info's fast case: the fields its ``**fields`` would collect
            fields = _PyDict_NewPresized(7)
            fields["msg_id"] = msg_id
            fields["group"] = group
            fields["topic"] = topic
            fields["queue_id"] = queue_id
            fields["queue_offset"] = queue_offset
            fields["born_ts"] = born_ts
            fields["reconsume_times"] = reconsume_times
            emit("message.pulled", fields)
    # cmd.response(SUCCESS, ext_fields=ext, body=body), allocated and filled in place
    out = _fresh(_Command)
    _put(out, C_CODE, _SUCCESS)
    _put(out, C_OPAQUE, _field(cmd, C_OPAQUE, "opaque"))
    _put(out, C_FLAG, _RESPONSE)
    _put(out, C_LANG, _JAVA)
    _put(out, C_VERSION, _VERSION)
    _put(out, C_REMARK, None)
    _put(out, C_EXT, ext)
    _put(out, C_BODY, body)
    _put(out, C_SER, _field(cmd, C_SER, "serialize_type"))
    return out
