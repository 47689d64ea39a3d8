"""UPDATE_NAMESRV_CONFIG's settable subset: what an operator may change on a running name
server (RocketMQ's namesrv ``Configuration.update`` over ``NamesrvConfig``).

Owns: ``SETTABLE`` (RocketMQ name -> value parser), ``BLACK_LIST`` (RocketMQ 4.9.8's
``configBlackList`` defaults plus ``rocketmqHome``, refused with its remark) and
``check_settings``.

Invariants:
* All or nothing: every key of a request is checked before any is applied; a refusal
  names the key and changes nothing. A black-listed key is NO_PERMISSION with RocketMQ's
  remark "Can not update config in black list."; a key GET_NAMESRV_CONFIG shows but that is
  fixed at start (``listenPort``...) is NO_PERMISSION too; an unknown key or a bad value is
  refused (RocketMQ silently ignores unknown keys).
* Changes live in memory only, as in RocketMQ 4.9 (its ``namesrv.properties`` copy is never
  read back at start): a restart uses the command-line values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any  # Any: name-server setting values of several types

from ..tables.settings import _bool, _int

SETTABLE: dict[str, Callable[[str], Any]] = {
    "orderMessageEnable": _bool,
    "deleteTopicWithBrokerRegistration": _bool,  # RocketMQ 5's name
    "scanNotActiveBrokerInterval": _int(100, 3_600_000),  # ms (RocketMQ 4.9: fixed 10 s)
    "brokerChannelExpiredTime": _int(1_000, 86_400_000),  # ms (RocketMQ: fixed 120 s)
}
BLACK_LIST = frozenset({"configBlackList", "configStorePath", "kvConfigPath", "rocketmqHome"})
BLACK_LIST_REMARK = "Can not update config in black list."


def check_settings(props: dict[str, str], known: set[str]) -> dict[str, Any]:
    """Validate a change; return key -> parsed value (empty: nothing to change, as RocketMQ
    answers an empty body). ``PermissionError`` for a black-listed or fixed key (one of
    ``known``), ``ValueError`` for an unknown key or a bad value."""
    if BLACK_LIST.intersection(props):
        raise PermissionError(BLACK_LIST_REMARK)
    settable = ", ".join(sorted(SETTABLE))
    out: dict[str, Any] = {}
    for key, text in props.items():
        parse = SETTABLE.get(key)
        if parse is None:
            if key in known:
                raise PermissionError(f"{key} is fixed at start; settable: {settable}")
            raise ValueError(f"unknown name server setting {key!r}; settable: {settable}")
        try:
            out[key] = parse(text)
        except ValueError as err:
            raise ValueError(f"{key}={text!r}: {err}") from None
    return out
