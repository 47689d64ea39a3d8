"""The long-poll pull loop of one assigned queue (RocketMQ's push consumer = pull).

Owns: building PULL_MESSAGE requests (``PullMessageRequestHeader``), interpreting pull
results (found / no new / no matched / offset moved / errors), post-processing records
(decompress, restore the topic of retried messages, client-side tag check) and flow
control.

Invariants:
* Pulls of one queue are strictly sequential, so records enter the ProcessQueue in
  queue-offset order and ``next_offset`` only moves forward (except PULL_OFFSET_MOVED,
  where the broker says where to continue).
* A pull is sent only while fewer than ``pull_threshold_for_queue`` messages of the queue
  are in flight, and (orderly CLUSTERING) only while the queue's broker lock is held.
* sysFlag is SUSPEND|SUBSCRIPTION, plus COMMIT_OFFSET when a committed offset > 0 is
  known; the request timeout (30 s) is longer than the broker's suspend (15 s).
* Which broker of the queue's broker name a pull goes to is RocketMQ's PullAPIWrapper
  rule: the brokerId the last answer suggested (``suggestWhichBrokerId``; the master,
  0, at first), else the lowest id the route lists (a slave when the master is gone);
  a pull to a slave never carries COMMIT_OFFSET (the master owns the offsets).
* After a pull that found messages the loop waits ``pull_interval`` ms (RocketMQ's
  pullInterval, 0 by default) before the next one.
* Errors never kill the loop: it waits ``pull_time_delay_millis_when_exception`` and pulls
  again, until the queue is dropped. A broker that stays unreachable (killed) therefore
  costs one request per queue per that delay, and one log line on the first failure,
  every 20th and when the broker answers again; pulling resumes by itself after restart.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from kairosmq.protocol.bodies import MASTER_ID
from kairosmq.protocol.codes import (
    PULL_COMMIT_OFFSET,
    PULL_SUBSCRIPTION,
    PULL_SUSPEND,
    SYSFLAG_COMPRESSED,
    RequestCode,
    ResponseCode,
)
from kairosmq.protocol.errors import HeaderError
from kairosmq.protocol.headers import PullMessageRequestHeader, PullMessageResponseHeader
from kairosmq.protocol.message import MessageExt, decode_records
from kairosmq.protocol.properties import RETRY_TOPIC

from ..errors import ClientError
from ..remoting import RemotingPool
from .process_queue import ProcessQueue

log = logging.getLogger("kairosmq.client.pull")
_NO_MESSAGES = (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY)
_LOG_EVERY = 20  # a dead broker: one log line per queue a minute, not one per attempt


@dataclass(slots=True)
class Subscription:
    topic: str
    expression: str
    sub_version: int
    keep: Callable[[MessageExt], bool] | None  # client-side tag check; None keeps all
    expression_type: str = "TAG"  # or "SQL92" (filtered by the broker only)


@dataclass(slots=True)
class PullSettings:
    group: str
    retry_topic: str
    pull_batch_size: int = 32
    broker_suspend_max_time_millis: int = 15000
    consumer_timeout_millis_when_suspend: int = 30000
    pull_time_delay_millis_when_exception: int = 3000
    pull_interval: int = 0  # ms between two pulls of a queue that found messages
    orderly: bool = False
    needs_lock: bool = False  # orderly and CLUSTERING
    commit_offset_on_pull: bool = True


def postprocess(
    msgs: list[MessageExt], retry_topic: str, keep: Callable[[MessageExt], bool] | None
) -> list[MessageExt]:
    """Decompress bodies, restore the original topic of retried messages, filter by tag."""
    out = msgs if keep is None else [m for m in msgs if keep(m)]
    for m in out:
        if m.sys_flag & SYSFLAG_COMPRESSED:
            m.body = zlib.decompress(m.body)
        if m.topic == retry_topic:
            real = m.properties.get(RETRY_TOPIC)
            if real:
                m.topic = real
    return out


async def pull_loop(
    pq: ProcessQueue,
    sub: Subscription,
    cfg: PullSettings,
    pool: RemotingPool,
    find: Callable[[str, int], tuple[str, int] | None],
    committed: Callable[[ProcessQueue], int],
    on_found: Callable[[ProcessQueue, list[MessageExt]], None],
    on_offset: Callable[[ProcessQueue, int], None],
) -> None:
    """Pull ``pq``'s queue until it is dropped; hand found messages to ``on_found``."""
    mq = pq.mq
    delay = cfg.pull_time_delay_millis_when_exception / 1000
    timeout = cfg.consumer_timeout_millis_when_suspend / 1000
    interval = cfg.pull_interval / 1000
    failures = 0  # consecutive failed pulls: logged on the 1st, every 20th and on recovery
    suggested = MASTER_ID  # RocketMQ's pullFromWhichNodeTable entry of this queue
    while not pq.dropped:
        await pq.wait_for_space()
        if pq.dropped:
            return
        if cfg.needs_lock and not pq.lock_valid():
            await asyncio.sleep(min(delay, 0.5))
            continue
        found_at = find(mq.broker_name, suggested)
        if found_at is None:
            await asyncio.sleep(delay)
            continue
        addr, broker_id = found_at
        commit = committed(pq) if cfg.commit_offset_on_pull and broker_id == MASTER_ID else -1
        flag = PULL_SUSPEND | PULL_SUBSCRIPTION | (PULL_COMMIT_OFFSET if commit > 0 else 0)
        req = PullMessageRequestHeader(
            consumer_group=cfg.group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            queue_offset=pq.next_offset,
            max_msg_nums=cfg.pull_batch_size,
            sys_flag=flag,
            commit_offset=max(commit, 0),
            suspend_timeout_millis=cfg.broker_suspend_max_time_millis,
            subscription=sub.expression,
            sub_version=sub.sub_version,
            expression_type=sub.expression_type,
        )
        try:
            resp = await pool.invoke(
                addr, RequestCode.PULL_MESSAGE, req.to_ext_fields(), timeout=timeout
            )
        except ClientError as err:
            if pq.dropped:
                return
            failures += 1
            if failures % _LOG_EVERY == 1:
                log.info(
                    "pull %s failed (%d in a row; next in %.1f s): %s", mq, failures, delay, err
                )
            await asyncio.sleep(delay)
            continue
        if pq.dropped:
            return
        if failures:
            log.info("pull %s answered again after %d failed pulls", mq, failures)
            failures = 0
        code = resp.code
        try:
            header = PullMessageResponseHeader.from_ext_fields(resp.ext_fields)
            next_offset = header.next_begin_offset
            suggested = max(header.suggest_which_broker_id, MASTER_ID)
        except HeaderError:  # an error answer need not carry the offsets
            next_offset = -1
        if code == ResponseCode.SUCCESS and next_offset >= 0:
            found = postprocess(decode_records(resp.body), cfg.retry_topic, sub.keep)
            pq.put(found, next_offset, orderly=cfg.orderly)
            if found:
                on_found(pq, found)
                if interval:
                    await asyncio.sleep(interval)
            else:
                on_offset(pq, pq.commit_offset)
        elif code in _NO_MESSAGES and next_offset >= 0:
            pq.put([], next_offset)
            on_offset(pq, pq.commit_offset)
        elif code == ResponseCode.PULL_OFFSET_MOVED and next_offset >= 0:
            log.warning("%s: offset %d moved by the broker to %d", mq, pq.next_offset, next_offset)
            pq.reset(next_offset)
            on_offset(pq, next_offset)
        else:
            log.info("pull %s answered %d %s", mq, code, resp.remark)
            await asyncio.sleep(delay)
