"""PendingView: the operator's view of pending scheduled messages, timers and
level-delayed ones together, in ``(due, phy)`` order: keyset pages and a due histogram.

Owns: ``PendingView`` (pages after a cursor, filtered by real topic, msgId, key, kind and
due window; the histogram per minute, hour or day), ``SortedBucket`` and
``BucketCache`` (a timer bucket's live entries sorted as compact arrays, cached by the
length of its content) and ``Entry`` (one pending message's position). Nothing here
writes: the actions are ``actions.py``'s.

Where the entries come from (both already kept by the schedule room, nothing new on the
send path):
* timers: the bucket files and their buffered entries (``TimerBuckets``), above the fired
  cursor, without cancelled ones (a recall's or a reschedule's CANCEL entry), in the
  buckets ``TimerService.pending_buckets`` names;
* level-delayed: each level's schedule queue from the level's progress on (FIFO by due
  time: the consume-queue unit's tagsCode is the due ms), without recall marks.

Invariants:
* Keyset pagination: a page starts strictly after its cursor ``(due, phy)``: a bisect in
  the cursor's bucket (cached sorted arrays) and a binary search in each level's queue
  (units are in due order), so a page costs the same at the millionth pending message as
  at the tenth. Offsets are never counted.
* Bounded work per request: at most ``max_scan`` entries are examined (filters that
  read records: topic); a page that ran out of budget says so (``complete`` false) and
  its ``nextCursor`` continues where it stopped; a scan yields to the event loop
  between its batches of records. The bucket cache holds at most
  ``max_cached`` entries (least recently used buckets dropped), so memory does not grow
  with the backlog; bucket files are read and sorted in a thread.
* A view, not a lock: an entry shown may fire or be recalled a moment later; every
  action decides again (``actions.py``).
* A level's queue is in due order unless the wall clock stepped back while it filled
  (RocketMQ's correctDeliverTimestamp case); its binary search then lands near, not
  exactly at, the cursor, so a page may skip or repeat a few of that level's entries.
"""

from __future__ import annotations

import asyncio
import bisect
from array import array
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from typing import (
    Any,
    NamedTuple,
)  # Any: JSON answer rows; a blocking call run off the loop returns its own type

from kairosmq.protocol.errors import MessageDecodeError
from kairosmq.protocol.message import MessageExt, decode_record, view_record
from kairosmq.protocol.naming import SCHEDULE_TOPIC, TIMER_TOPIC
from kairosmq.protocol.pending import format_ref
from kairosmq.protocol.properties import (
    DELIVER_TIME,
    INT64_DIGITS,
    KEYS,
    REAL_QID,
    REAL_TOPIC,
    UNIQ_KEY,
    decode_properties,
    parse_decimal,
)
from kairosmq.protocol.timer import TIMER_OUT_MS

from ...store import MessageStore
from ..recalls import LevelRecalls
from ..timer.buckets import TimerBuckets, live_entries
from ..timer.topic import TIMER_QUEUE

BIG = (1 << 63) - 1
Version = tuple[int, int]  # TimerBuckets.version
_BATCH = 256  # uncached buckets read per thread call at most
AHEAD_BYTES = 64 * 1024  # bucket entries read ahead per thread call, beyond the one needed
START: tuple[int, int] = (-1, BIG)  # before every entry
_CHUNK = 256  # schedule units read per step, records read per batch


class Entry(NamedTuple):
    """One pending message: where its record is and what it waits as."""

    due: int
    phy: int
    size: int
    level: int  # 0: a timer; else its delay level
    queue_offset: int  # its schedule-queue offset (levels); -1 for a timer


class SortedBucket:
    """A bucket's live timers sorted by ``(due, phy)``, as three arrays."""

    __slots__ = ("dues", "phys", "sizes")

    def __init__(self, live: Iterable[tuple[int, int, int]]) -> None:
        ordered = sorted(live)
        self.dues = array("q", [e[0] for e in ordered])
        self.phys = array("q", [e[1] for e in ordered])
        self.sizes = array("i", [e[2] for e in ordered])

    def __len__(self) -> int:
        return len(self.dues)

    def after(self, key: tuple[int, int]) -> int:
        """Index of the first entry strictly after ``key``."""
        due, phy = key
        i = bisect.bisect_left(self.dues, due)
        n = len(self.dues)
        while i < n and self.dues[i] == due and self.phys[i] <= phy:
            i += 1
        return i

    def holds(self, due: int, phy: int) -> bool:
        i = self.after((due, phy - 1))
        return i < len(self.dues) and self.dues[i] == due and self.phys[i] == phy


class BucketCache:
    """Sorted live entries per timer bucket, valid while the bucket's content keeps its
    ``TimerBuckets.version``; least recently used buckets dropped beyond ``max_cached``
    entries. Live counts are kept apart (a few bytes per bucket) for the histogram."""

    def __init__(self, buckets: TimerBuckets, max_cached: int = 1_000_000) -> None:
        self.buckets = buckets
        self.max_cached = max_cached
        self._sorted: OrderedDict[int, tuple[Version, SortedBucket]] = OrderedDict()
        self._counts: dict[int, tuple[Version, int]] = {}
        self._held = 0

    def cached(self, bucket: int) -> SortedBucket | None:
        hit = self._sorted.get(bucket)
        if hit is None or hit[0] != self.buckets.version(bucket):
            return None
        self._sorted.move_to_end(bucket)
        return hit[1]

    def snapshot(self, bucket: int) -> tuple[int, Version, bytes]:
        """On the loop, before a read: the bucket, its version, its buffered entries."""
        return bucket, self.buckets.version(bucket), self.buckets.pending_bytes(bucket)

    def read(self, wanted: list[tuple[int, Version, bytes]]) -> list[SortedBucket]:
        """Blocking (a thread): the first bucket's file plus its buffered entries, sorted,
        then as many of the others as fit in ``AHEAD_BYTES`` of entries read (a prefix of
        ``wanted``: read ahead helps small buckets, never a page in a dense minute)."""
        out: list[SortedBucket] = []
        spent = 0
        for b, _v, pending in wanted:
            data = self.buckets.read_file(b)
            spent += len(data) + len(pending)
            if out and spent > AHEAD_BYTES:
                break
            out.append(SortedBucket(live_entries((data, pending))))
        return out

    def put(self, bucket: int, version: Version, sb: SortedBucket) -> None:
        old = self._sorted.pop(bucket, None)
        if old is not None:
            self._held -= len(old[1])
        self._sorted[bucket] = (version, sb)
        self._held += len(sb)
        self._counts[bucket] = (version, len(sb))
        while self._held > self.max_cached and len(self._sorted) > 1:
            _b, (_v, gone) = self._sorted.popitem(last=False)
            self._held -= len(gone)

    def count_cached(self, bucket: int) -> int | None:
        hit = self._counts.get(bucket)
        return hit[1] if hit is not None and hit[0] == self.buckets.version(bucket) else None

    def count(self, wanted: list[tuple[int, Version, bytes]]) -> list[int]:
        """Blocking (a thread): live entries per bucket, not kept sorted."""
        return [
            len(live_entries((self.buckets.read_file(b), pending))) for b, _v, pending in wanted
        ]

    def put_count(self, bucket: int, version: Version, n: int) -> None:
        self._counts[bucket] = (version, n)

    def keep_only(self, names: list[int]) -> None:
        """Forget the counts of buckets no longer pending (fired ones), so the table stays
        as large as the pending buckets."""
        if len(self._counts) > 2 * len(names) + 1024:
            keep = set(names)
            self._counts = {b: c for b, c in self._counts.items() if b in keep}


def record_row(e: Entry, m: MessageExt) -> dict[str, Any]:
    """A page row: the message as an operator sees it (no body)."""
    props = m.properties
    qid = props.get(REAL_QID, "")
    return {
        "ref": format_ref(e.due, e.phy),
        "kind": "level" if e.level else "timer",
        "level": e.level or None,
        "dueMs": e.due,
        "msgId": props.get(UNIQ_KEY),
        "topic": props.get(REAL_TOPIC),
        "queueId": int(qid) if qid.isdigit() and len(qid) <= 9 else None,
        "keys": props.get(KEYS),
        "tags": m.tags,
        "bornMs": m.born_timestamp,
        "storeMs": m.store_timestamp,
        "bodySize": len(m.body),
        "phyOffset": e.phy,
    }


def _real_topic(record: bytes) -> tuple[str | None, dict[str, str]]:
    """The REAL_TOPIC and properties of a record, without decoding its body."""
    try:
        view = view_record(record)
        props = decode_properties(record[view.props_start : view.props_end].decode())
    except (MessageDecodeError, UnicodeDecodeError):
        return None, {}
    return props.get(REAL_TOPIC), props


class PendingView:
    """Pages and histograms of pending timers and level-delayed messages."""

    def __init__(
        self,
        store: MessageStore,
        buckets: TimerBuckets,
        *,
        timer_cursor: Callable[[], tuple[int, int]],
        pending_buckets: Callable[[], list[int]],
        level_progress: Callable[[], dict[int, int]],
        level_recalls: LevelRecalls,
        run_blocking: Callable[..., Awaitable[Any]],
        max_cached: int = 1_000_000,
    ) -> None:
        self.store = store
        self.buckets = buckets
        self.timer_cursor = timer_cursor  # TimerService.cursor: fired is "<= cursor"
        self.pending_buckets = pending_buckets  # TimerService.pending_buckets
        self.level_progress = level_progress  # ScheduleService.progress
        self.level_recalls = level_recalls
        self.run_blocking = run_blocking  # file reads and sorts off the loop
        self.cache = BucketCache(buckets, max_cached)

    # ------------------------------------------------------------------ timers

    async def sorted_bucket(self, bucket: int, ahead: list[int] | None = None) -> SortedBucket:
        """A bucket's sorted live timers; when it must be read, up to ``_BATCH`` buckets of
        ``ahead`` not cached either are read in the same thread call (pages cross many
        small buckets when the backlog is spread over days)."""
        sb = self.cache.cached(bucket)
        if sb is not None:
            return sb
        wanted = [self.cache.snapshot(bucket)]
        for b in ahead or ():
            if len(wanted) >= _BATCH:
                break
            if b != bucket and self.cache.cached(b) is None:
                wanted.append(self.cache.snapshot(b))
        got: list[SortedBucket] = await self.run_blocking(self.cache.read, wanted)
        for (b, version, _p), one in zip(wanted, got, strict=False):
            self.cache.put(b, version, one)
        return got[0]

    async def _timers(self, after: tuple[int, int], to_ms: int, n: int) -> list[Entry]:
        """The first ``n`` pending timers strictly after ``after`` and due before ``to_ms``."""
        fired = self.timer_cursor()
        start = max(after, fired)
        bucket_ms = self.buckets.bucket_ms
        out: list[Entry] = []
        names = self.pending_buckets()
        i = bisect.bisect_left(names, self.buckets.bucket_of(max(start[0], 0)))
        last = bisect.bisect_left(names, -(-to_ms // bucket_ms)) if to_ms < BIG else len(names)
        while i < last and len(out) < n:
            bucket = names[i]
            i += 1
            # read ahead about as many buckets as the page may still need
            sb = await self.sorted_bucket(bucket, names[i : min(last, i + n - len(out))])
            j = sb.after(start)
            while j < len(sb) and len(out) < n:
                due = sb.dues[j]
                if due >= to_ms:
                    return out
                out.append(Entry(due, sb.phys[j], sb.sizes[j], 0, -1))
                j += 1
        return out

    def is_pending_timer_cached(self, due: int, phy: int) -> bool | None:
        """Whether ``(due, phy)`` is a pending timer, from the cache; None: not cached."""
        if (due, phy) <= self.timer_cursor():
            return False
        sb = self.cache.cached(self.buckets.bucket_of(due))
        return None if sb is None else sb.holds(due, phy)

    async def is_pending_timer(self, due: int, phy: int) -> bool:
        if (due, phy) <= self.timer_cursor():
            return False
        sb = await self.sorted_bucket(self.buckets.bucket_of(due))
        return sb.holds(due, phy) and (due, phy) > self.timer_cursor()

    # ------------------------------------------------------------------ levels

    def _level_start(self, level: int, after: tuple[int, int]) -> tuple[Any, int, int]:
        """(queue, first index strictly after ``after``, end) of a level's pending units."""
        cq = self.store.find_queue(SCHEDULE_TOPIC, level - 1)
        if cq is None:
            return None, 0, 0
        lo = max(self.level_progress().get(level, 0), cq.min_offset)
        hi = cq.max_offset
        a, b = lo, hi
        while a < b:  # units are in (due, phy) order: due is the put time plus one delay
            mid = (a + b) // 2
            unit = cq.get(mid)
            if unit is not None and (unit[2], unit[0]) <= after:
                a = mid + 1
            else:
                b = mid
        return cq, a, hi

    def _levels_after(self, level: int, after: tuple[int, int], to_ms: int, n: int) -> list[Entry]:
        cq, i, hi = self._level_start(level, after)
        out: list[Entry] = []
        if cq is None:
            return out
        marks = self.level_recalls
        log_min = self.store.commitlog.min_offset
        while i < hi and len(out) < n:
            units = cq.units(i, min(_CHUNK, hi - i))
            if not units:
                break
            for k, (phy, size, due) in enumerate(units):
                if due >= to_ms:
                    return out
                if phy >= log_min and phy not in marks and (due, phy) > after:
                    out.append(Entry(due, phy, size, level, i + k))
                    if len(out) >= n:
                        break
            i += len(units)
        return out

    def _levels(self, after: tuple[int, int], to_ms: int, n: int) -> list[Entry]:
        out: list[Entry] = []
        for level in sorted(self.level_progress()):
            out.extend(self._levels_after(level, after, to_ms, n))
        return out

    # ------------------------------------------------------------------ pages

    async def first(self, after: tuple[int, int], to_ms: int, n: int, kind: str) -> list[Entry]:
        """The first ``n`` pending entries after ``after`` due before ``to_ms``, merged."""
        found: list[Entry] = []
        if kind != "level":
            found.extend(await self._timers(after, to_ms, n))
        if kind != "timer":
            found.extend(self._levels(after, to_ms, n))
        found.sort()
        return found[:n]

    def read_records(self, entries: list[Entry]) -> list[bytes | None]:
        """Each entry's record (None where it cannot be read any more)."""
        sized = [(e.phy, e.size) for e in entries if e.size > 0]
        got = dict(zip((p for p, _ in sized), self.store.commitlog.read_many(sized), strict=False))
        return [got.get(e.phy) if e.size > 0 else self.store.read_at(e.phy) for e in entries]

    async def page(
        self,
        after: tuple[int, int],
        *,
        limit: int,
        from_ms: int | None,
        to_ms: int | None,
        topic: str | None,
        kind: str,
        max_scan: int,
    ) -> dict[str, Any]:
        """One keyset page (filters that need no index: window, kind, topic)."""
        if from_ms is not None and (from_ms - 1, BIG) > after:
            after = (from_ms - 1, BIG)
        end = to_ms if to_ms is not None else BIG
        rows: list[dict[str, Any]] = []
        scanned = 0
        last = after
        exhausted = False
        while len(rows) < limit and scanned < max_scan:
            want = limit - len(rows) if topic is None else min(_CHUNK, max_scan - scanned)
            batch = await self.first(last, end, max(1, want), kind)
            if not batch:
                exhausted = True
                break
            if scanned:
                await asyncio.sleep(0)  # a long scan yields between batches
            records = self.read_records(batch)
            for e, rec in zip(batch, records, strict=True):
                scanned += 1
                last = (e.due, e.phy)
                if rec is None:
                    continue
                if topic is not None and _real_topic(rec)[0] != topic:
                    continue
                try:
                    rows.append(record_row(e, decode_record(rec)))
                except MessageDecodeError:
                    continue
                if len(rows) >= limit:
                    break
        more = not exhausted
        if more and len(rows) >= limit:  # is there anything after the page at all?
            more = bool(await self.first(last, end, 1, kind))
        return {
            "rows": rows,
            "nextCursor": format_ref(*last) if more else None,
            "complete": exhausted or len(rows) >= limit,
            "scanned": scanned,
        }

    async def by_candidates(
        self,
        phys: list[int],
        after: tuple[int, int],
        *,
        limit: int,
        from_ms: int | None,
        to_ms: int | None,
        topic: str | None,
        kind: str,
    ) -> dict[str, Any]:
        """A page over the records the key index named (msgId or key filters)."""
        found = [
            (e, m)
            for e, m in await self.pending_of(phys)
            if kind == "all" or (kind == "level") == bool(e.level)
        ]
        rows = []
        for e, m in sorted(found, key=lambda p: p[0]):
            if (e.due, e.phy) <= after:
                continue
            if from_ms is not None and e.due < from_ms or to_ms is not None and e.due >= to_ms:
                continue
            if topic is not None and m.properties.get(REAL_TOPIC) != topic:
                continue
            rows.append(record_row(e, m))
        page, rest = rows[:limit], rows[limit:]
        return {
            "rows": page,
            "nextCursor": page[-1]["ref"] if rest else None,
            "complete": True,
            "scanned": len(phys),
        }

    async def pending_of(self, phys: Iterable[int]) -> list[tuple[Entry, MessageExt]]:
        """The pending messages among the records at ``phys`` (checked reads): timer
        records above the fired cursor and not cancelled, schedule records at or after
        their level's progress and not recalled."""
        out: list[tuple[Entry, MessageExt]] = []
        seen: set[int] = set()
        for phy in phys:
            if phy in seen:
                continue
            seen.add(phy)
            found = await self.pending_at(phy)
            if found is not None:
                out.append(found)
        return out

    async def pending_at(self, phy: int, due: int | None = None) -> tuple[Entry, MessageExt] | None:
        """The pending message whose schedule or timer record is at ``phy`` (and due at
        ``due`` when given), or None."""
        rec = self.store.read_at(phy)
        if rec is None:
            return None
        try:
            m = decode_record(rec)
        except MessageDecodeError:
            return None
        props = m.properties
        if m.topic == TIMER_TOPIC and m.queue_id == TIMER_QUEUE:
            at = parse_decimal(props.get(TIMER_OUT_MS), INT64_DIGITS)
            if at is None or (due is not None and at != due):
                return None
            if not await self.is_pending_timer(at, phy):
                return None
            return Entry(at, phy, len(rec), 0, -1), m
        if m.topic == SCHEDULE_TOPIC:
            at = parse_decimal(props.get(DELIVER_TIME), INT64_DIGITS)
            level = m.queue_id + 1
            if at is None or (due is not None and at != due):
                return None
            progress = self.level_progress().get(level)
            if progress is None or m.queue_offset < progress or phy in self.level_recalls:
                return None
            return Entry(at, phy, len(rec), level, m.queue_offset), m
        return None

    # ------------------------------------------------------------------ histogram

    async def histogram(
        self,
        *,
        unit_ms: int,
        from_ms: int,
        to_ms: int,
        kind: str,
    ) -> dict[int, list[int]]:
        """Pending per bin of ``unit_ms`` in ``[from_ms, to_ms)``: bin start -> [timers,
        levels]. Every pending entry is counted (no record read): timer buckets by their
        live counts (cached by content length), levels by binary searches per bin."""
        bins: dict[int, list[int]] = {}
        if kind != "level":
            await self._timer_bins(bins, unit_ms, from_ms, to_ms)
        if kind != "timer":
            self._level_bins(bins, unit_ms, from_ms, to_ms)
        return bins

    async def _timer_bins(
        self, bins: dict[int, list[int]], unit_ms: int, from_ms: int, to_ms: int
    ) -> None:
        bucket_ms = self.buckets.bucket_ms
        fired = self.timer_cursor()
        cursor_bucket = self.buckets.bucket_of(fired[0]) if fired[1] >= 0 else -1
        names = self.pending_buckets()
        self.cache.keep_only(names)
        lo = bisect.bisect_left(names, self.buckets.bucket_of(max(from_ms, 0)))
        hi = bisect.bisect_left(names, -(-to_ms // bucket_ms))
        edges: list[int] = []
        counted: list[tuple[int, int]] = []  # (bucket, live entries)
        unknown: list[tuple[int, Version, bytes]] = []
        for bucket in names[lo:hi]:
            start, end = bucket * bucket_ms, (bucket + 1) * bucket_ms
            if not (
                bucket > cursor_bucket
                and start >= from_ms
                and end <= to_ms
                and start // unit_ms == (end - 1) // unit_ms
            ):
                edges.append(bucket)  # cut by the window, a bin or the fired cursor
                continue
            n = self.cache.count_cached(bucket)
            if n is None:
                unknown.append(self.cache.snapshot(bucket))
            elif n:
                counted.append((bucket, n))
        for k in range(0, len(unknown), 4 * _BATCH):
            part = unknown[k : k + 4 * _BATCH]
            for (bucket, version, _p), n in zip(
                part, await self.run_blocking(self.cache.count, part), strict=True
            ):
                self.cache.put_count(bucket, version, n)
                counted.append((bucket, n))
        for bucket, n in counted:
            if n:
                bins.setdefault(bucket * bucket_ms // unit_ms * unit_ms, [0, 0])[0] += n
        for bucket in edges:
            sb = await self.sorted_bucket(bucket)
            for j in range(sb.after(max(fired, (from_ms - 1, BIG))), len(sb)):
                due = sb.dues[j]
                if due >= to_ms:
                    break
                bins.setdefault(due // unit_ms * unit_ms, [0, 0])[0] += 1

    def _level_bins(
        self, bins: dict[int, list[int]], unit_ms: int, from_ms: int, to_ms: int
    ) -> None:
        marked = self._marks_by_level()
        for level in sorted(self.level_progress()):
            cq, i, hi = self._level_start(level, (from_ms - 1, BIG))
            if cq is None:
                continue
            marks = marked.get(level, [])
            while i < hi:
                unit = cq.get(i)
                if unit is None:
                    break
                due = unit[2]
                if due >= to_ms:
                    break
                bin_start = due // unit_ms * unit_ms
                _cq, j, _hi = self._level_start(level, (min(bin_start + unit_ms, to_ms) - 1, BIG))
                j = max(j, i + 1)
                n = j - i - sum(1 for off in marks if i <= off < j)
                if n > 0:
                    bins.setdefault(bin_start, [0, 0])[1] += n
                i = j

    def _marks_by_level(self) -> dict[int, list[int]]:
        """The recall marks as level -> schedule-queue offsets (each mark's record read:
        marks are few, an operator's or a producer's recalls not yet passed)."""
        out: dict[int, list[int]] = {}
        for phy in self.level_recalls.snapshot():
            rec = self.store.read_at(phy)
            if rec is None:
                continue
            try:
                m = decode_record(rec)
            except MessageDecodeError:
                continue
            if m.topic == SCHEDULE_TOPIC:
                out.setdefault(m.queue_id + 1, []).append(m.queue_offset)
        return out

    async def topic_histogram(
        self,
        *,
        unit_ms: int,
        from_ms: int,
        to_ms: int,
        kind: str,
        topic: str,
        after: tuple[int, int],
        max_scan: int,
    ) -> tuple[dict[int, list[int]], tuple[int, int] | None, int]:
        """The histogram of one real topic: a scan from ``after`` reading each pending
        record's REAL_TOPIC, at most ``max_scan`` entries; returns (bins, where to go on
        or None when done, entries scanned)."""
        bins: dict[int, list[int]] = {}
        if (from_ms - 1, BIG) > after:
            after = (from_ms - 1, BIG)
        scanned = 0
        while scanned < max_scan:
            batch = await self.first(after, to_ms, min(_CHUNK * 4, max_scan - scanned), kind)
            if not batch:
                return bins, None, scanned
            await asyncio.sleep(0)  # a long scan yields between batches
            for e, rec in zip(batch, self.read_records(batch), strict=True):
                scanned += 1
                after = (e.due, e.phy)
                if rec is not None and _real_topic(rec)[0] == topic:
                    bins.setdefault(e.due // unit_ms * unit_ms, [0, 0])[1 if e.level else 0] += 1
        more = bool(await self.first(after, to_ms, 1, kind))
        return bins, (after if more else None), scanned
