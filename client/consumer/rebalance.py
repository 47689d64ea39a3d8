"""Queue allocation for clustering consumers (pure functions, no I/O).

Owns: ``allocate_averagely`` (RocketMQ's ``AllocateMessageQueueAveragely``) and
``tag_filter`` (the client-side tag re-check after the broker's hash filter).

Invariants: given the same sorted queue list and the same sorted client-id list, every
member computes the same split, each queue goes to exactly one member, and shares differ
by at most one queue (the first ``len(mqs) % len(cids)`` members get the extra ones). A
client id missing from the list gets nothing (it is not yet registered by heartbeat).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kairosmq.protocol.bodies import parse_tag_expression
from kairosmq.protocol.message import MessageExt

from ..message import MessageQueue


def allocate_averagely(
    current_cid: str, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
) -> list[MessageQueue]:
    """The queues ``current_cid`` owns; inputs need not be sorted (they are sorted here)."""
    mqs = sorted(mq_all)
    cids = sorted(set(cid_all))
    if not mqs or current_cid not in cids:
        return []
    index = cids.index(current_cid)
    n_mq, n_cid = len(mqs), len(cids)
    mod = n_mq % n_cid
    if n_mq <= n_cid:
        average = 1
    elif mod > 0 and index < mod:
        average = n_mq // n_cid + 1
    else:
        average = n_mq // n_cid
    start = index * average if (mod > 0 and index < mod) else index * average + mod
    count = min(average, n_mq - start)
    return [mqs[(start + i) % n_mq] for i in range(max(0, count))]


def tag_filter(expression: str | None) -> Callable[[MessageExt], bool] | None:
    """A predicate keeping messages whose TAGS is in ``expression``; None means keep all."""
    tags, _codes = parse_tag_expression(expression)
    if not tags:
        return None
    wanted = frozenset(tags)

    def keep(msg: MessageExt) -> bool:
        return msg.properties.get("TAGS") in wanted

    return keep
