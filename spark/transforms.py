"""Pure DataFrame -> DataFrame transforms from parsed log lines to delivery-quality aggregates.

Owns the metric definitions. Each public function takes a DataFrame and returns one, reads no
files and starts no jobs, so they chain with ``df.transform(...)`` and are unit-tested on tiny
frames. ``lines`` takes the frame read with ``schema.LOG_EVENT_SCHEMA`` (after
``schema.event_time``) and yields the narrow per-line frame (``LINE_COLUMNS``). The job runs
``facts`` -> ``one_pass`` over it (every aggregate in one hash aggregation: one scan, one
shuffle) and ``results_of`` over that: every result the report needs in the same query
(``split_results`` names them on the driver). ``counts_of``, ``lateness_of``,
``top_late_of``, ``lifecycle_of``, ``outcomes_of`` derive each result on its own (the
``--messages`` table, and the reference ``results_of`` is tested against);
``line_counts``, ``lateness_histogram``, ``top_late``, ``message_lifecycle`` and
``consumer_outcomes`` are the same results straight from ``lines``.

Invariants:
* ``label`` is the event name, or ``<malformed>`` (the line did not parse), ``<no event>``,
  ``<format vN>`` (written by a newer broker than this job knows): only lines labelled with a
  ``message.*``, ``timer.*`` or ``transaction.*`` name enter a metric.
* A timer message (``timer.scheduled`` -> ``timer.fired``) is a scheduled/delivered message
  with ``delay_level`` ``TIMER_LEVEL`` (-1): its lateness, lifecycle and added delay come
  out of the same aggregation as the levels'; ``tables.py`` splits them off.
* ``one_pass`` keeps only numbers in its buffers (plain min/max/sum/count of values ``facts``
  precomputed), so Spark runs it as one hash aggregate with map-side combining: strings
  appear only as grouping keys.
* Events are joined by ``msg_id`` (the UNIQ_KEY, unchanged across retries) within that one
  aggregation (one shuffle) rather than a chain of joins.
* An event with ``reconsume_times`` 0 or absent belongs to the first attempt; a retry's
  scheduling, delivery and pulls carry its attempt number and the same ``msg_id``.
* Latency distributions leave Spark as log-bucket histograms (``bucket``: 1 % wide; count,
  largest value and sum per bucket); ``tables.py`` turns them into percentiles on the driver.
"""

from __future__ import annotations

import math
from typing import Any

from kairosmq.protocol.events import LOG_FORMAT
from kairosmq.protocol.naming import DLQ_GROUP_TOPIC_PREFIX
from kairosmq.spark.schema import CORRUPT
from kairosmq.spark.tables import TIMER_LEVEL
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.window import Window

STORED = "message.stored"
SCHEDULED = "message.scheduled"
DELIVERED = "message.delivered"
PULLED = "message.pulled"
REDELIVERED = "message.redelivered"
DEAD_LETTERED = "message.dead_lettered"
REJECTED = "message.rejected"
TIMER_SCHEDULED = "timer.scheduled"
TIMER_FIRED = "timer.fired"
TIMER_RECALLED = "timer.recalled"
# an operator's actions on pending messages (server/schedule/pending/actions.py)
RESCHEDULED = "schedule.rescheduled"
OPERATOR_RECALLED = "schedule.recalled"
OPERATOR_EVENTS = (RESCHEDULED, OPERATOR_RECALLED)

MALFORMED = "<malformed>"
NO_EVENT = "<no event>"
BUCKET_GROWTH = 1.01  # histogram buckets are 1 % wide
FLOOR_MS = 0.001  # values up to 1 microsecond (and negative ones) share the lowest bucket
FLOOR_BUCKET = -10_000
# The columns the job caches after parsing (one row per line).
LINE_COLUMNS: tuple[str, ...] = (
    "label",
    "ts_ms",
    "msg_id",
    "topic",
    "real_topic",
    "group",
    "delay_level",
    "attempt",
    "lateness_ms",
    "deliver_ts",
    "born_ts",
    "producer_group",
    "recall_kind",
)
# The parsed fields those are made of (the JSON reader parses no other field).
READ_COLUMNS: tuple[str, ...] = (
    "ts",
    "timestamp",
    "v",
    "event",
    "msg_id",
    "topic",
    "real_topic",
    "group",
    "delay_level",
    "reconsume_times",
    "lateness_ms",
    "deliver_ts",
    "born_ts",
    "producer_group",
    "kind",
    CORRUPT,
)
THROUGHPUT_EVENTS: tuple[tuple[str, str], ...] = (
    ("stored", STORED),
    ("scheduled", SCHEDULED),
    ("delivered", DELIVERED),
    ("consumed", PULLED),
    ("redelivered", REDELIVERED),
    ("dead_lettered", DEAD_LETTERED),
    ("rejected", REJECTED),
)


def lines(parsed: DataFrame) -> DataFrame:
    """One narrow row per line (``LINE_COLUMNS``); see the module docstring for ``label``."""
    v = F.col("v")
    label = (
        F.when(F.col(CORRUPT).isNotNull(), F.lit(MALFORMED))
        .when(v > LOG_FORMAT, F.format_string("<format v%d>", v))
        .when(F.col("event").isNull(), F.lit(NO_EVENT))
        .otherwise(F.col("event"))
    )
    return parsed.select(
        label.alias("label"),
        "ts_ms",
        "msg_id",
        "topic",
        "real_topic",
        "group",
        "delay_level",
        F.coalesce(F.col("reconsume_times"), F.lit(0)).alias("attempt"),
        "lateness_ms",
        "deliver_ts",
        "born_ts",
        "producer_group",
        F.col("kind").alias("recall_kind"),
    )


def bucket(value: Column) -> Column:
    """Log-bucket id of a latency in ms: monotonic in ``value``, 1 % wide."""
    return (
        F.when(value <= FLOOR_MS, F.lit(FLOOR_BUCKET)).otherwise(
            F.ceil(F.log(value) / math.log(BUCKET_GROWTH))
        )
    ).cast("int")


def _histogram(df: DataFrame, keys: list[str], value: str) -> DataFrame:
    """``keys, bucket, n, hi, total``: per key and bucket the count, max and sum of ``value``."""
    return (
        df.where(F.col(value).isNotNull())
        .groupBy(*keys, bucket(F.col(value)).alias("bucket"))
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.max(value).cast("double").alias("hi"),
            F.sum(value).cast("double").alias("total"),
        )
    )


def line_counts(lines_df: DataFrame) -> DataFrame:
    """Lines per ``label, minute`` (epoch minute; null without a time), split by ``dlq_copy``
    (the broker's ``message.stored`` of a message it moved to ``%DLQ%``), with ``group`` kept
    for dead letters (the real topic for ``timer.*``, the producer group for
    ``transaction.*`` and an operator's ``schedule.rescheduled`` / ``schedule.recalled``),
    ``level_recall`` for a ``timer.recalled`` (or an operator's action) of a level message; plus the
    first and last time. Event counts, throughput per minute, the dead letters per group and
    the timer and transaction counts are sums over this small table."""
    return counts_of(one_pass(facts(lines_df)))


def lateness_histogram(lines_df: DataFrame) -> DataFrame:
    """Lateness of transfers out of the schedule topic (and of fired timers, level
    ``TIMER_LEVEL``): ``delay_level, topic, bucket, n, hi, total, early`` (``topic`` is the
    real topic, ``%RETRY%<group>`` for retries; ``early``: values below 0)."""
    return lateness_of(one_pass(facts(lines_df)))


def top_late(lines_df: DataFrame, n: int = 100) -> DataFrame:
    """The ``n`` latest transfers out of the schedule with their ``rank`` (1 = latest)."""
    return top_late_of(one_pass(facts(lines_df)), n)


def message_lifecycle(lines_df: DataFrame) -> DataFrame:
    """One row per message: its first attempt across store/schedule, deliver and consume.

    Columns: ``msg_id, topic, delay_level (0 = not delayed, -1 = timer), accepted_ts, deliver_ts,
    lateness_ms, born_ts, first_consume_ts, first_pulls, e2e_ms, nominal_ms, added_ms``
    (times epoch ms). ``e2e_ms`` = first pull of the first attempt - producer's born time;
    ``nominal_ms`` = planned delivery - store time (0 when not delayed); ``added_ms`` =
    ``e2e_ms - nominal_ms``, the delay the system added. ``first_pulls`` counts first-attempt
    pulls: one per consumer group, more when a group pulled it again (e.g. a rebalance).

    Keyed by ``msg_id`` and its real topic: on the first attempt the stored, scheduled
    (``real_topic``), delivered and pulled lines all name the producer's topic, so the key
    costs no string buffer; the broker's copy into ``%DLQ%`` is left out.
    """
    return lifecycle_of(one_pass(facts(lines_df)))


def e2e_histogram(lifecycle: DataFrame) -> DataFrame:
    """``topic, delay_level, kind, bucket, n, hi, total`` of ``e2e_ms`` (kind ``e2e``) and of
    ``added_ms`` (kind ``added``) from ``message_lifecycle``, in one aggregation."""
    both = lifecycle.select(
        "topic",
        "delay_level",
        F.explode(
            F.array(
                F.struct(F.lit("e2e").alias("kind"), F.col("e2e_ms").cast("double").alias("ms")),
                F.struct(
                    F.lit("added").alias("kind"), F.col("added_ms").cast("double").alias("ms")
                ),
            )
        ).alias("x"),
    ).select("topic", "delay_level", "x.kind", "x.ms")
    return _histogram(both, ["topic", "delay_level", "kind"], "ms")


def consumer_outcomes(lines_df: DataFrame) -> DataFrame:
    """One row per consumer group and message: ``group, msg_id, attempts, outcome``.

    ``outcome`` is ``dead_lettered`` (sent to %DLQ%), ``in_retry`` (sent back, its next attempt
    not pulled when the logs end) or ``succeeded`` (the last attempt was not sent back).
    """
    return outcomes_of(one_pass(facts(lines_df)))


def retry_funnel(outcomes: DataFrame) -> DataFrame:
    """``group, attempts, outcome, messages`` from ``consumer_outcomes``."""
    return (
        outcomes.groupBy("group", "attempts", "outcome")
        .agg(F.count(F.lit(1)).alias("messages"))
        .orderBy("group", "attempts", "outcome")
    )


# ---- the one pass: every aggregate the report needs, from one scan and one shuffle ----------
# Row kinds of ``facts``/``one_pass``; each line feeds one to three of them.
COUNTS, HIST, MESSAGE, CONSUMER = 0, 1, 2, 3
# Event codes carried as numbers (conditions on a byte are cheaper than on the event name).
CODES: dict[str, int] = {
    STORED: 1,
    SCHEDULED: 2,
    DELIVERED: 3,
    PULLED: 4,
    REDELIVERED: 5,
    DEAD_LETTERED: 6,
    TIMER_SCHEDULED: 7,
    TIMER_FIRED: 8,
}
# The key of a fact: what ``s1, s2, k1, k2`` hold depends on ``kind`` (see ``facts``).
FACT_KEY: tuple[tuple[str, str], ...] = (
    ("kind", "tinyint"),
    ("s1", "string"),
    ("s2", "string"),
    ("k1", "long"),
    ("k2", "int"),
)
# The values, each read by plain min/max/sum/count (null where a kind has no such value).
FACT_VALUES: tuple[tuple[str, str], ...] = (
    ("min1", "long"),
    ("min2", "long"),
    ("min3", "long"),
    ("min4", "long"),
    ("min5", "long"),
    ("max1", "double"),
    ("max2", "int"),
    ("sum1", "double"),
    ("pull", "int"),
    ("lat", "double"),
    ("lat_at", "long"),
)


def facts(lines_df: DataFrame) -> DataFrame:
    """Each line as the rows (facts) it feeds, keyed by ``kind, s1, s2, k1, k2``:

    ========  =======================  ==============  ======  ========================
    kind      s1                       s2              k1      k2
    ========  =======================  ==============  ======  ========================
    COUNTS    label (every line)       see below       minute  1 for the broker's
                                                               ``%DLQ%`` copy, 2 for the
                                                               recall of a level message
    HIST      -                        topic           bucket  delay_level (``TIMER_LEVEL``
                                                               for a timer)
    MESSAGE   msg_id                   real topic      -       attempt
    CONSUMER  msg_id                   group           -       -
    ========  =======================  ==============  ======  ========================

    COUNTS ``s2``: the group of a dead letter, the real topic of a ``timer.*`` line, the
    producer group of a ``transaction.*`` line, else null.
    HIST: a delivery (``message.delivered`` or ``timer.fired``) with its lateness (``pull``
    = 1 when early). MESSAGE: the stored (not the ``%DLQ%`` copy), scheduled
    (``timer.scheduled`` too), delivered (``timer.fired`` too) and pulled lines of the first
    attempt, and every delivery of a retry (for the top-late rows); a timer's level is
    ``TIMER_LEVEL``. CONSUMER: every pull, send-back and dead letter of a group.
    The values (``FACT_VALUES``) are what ``one_pass`` takes the min/max/sum/count of.
    """
    label, ts, lat = F.col("label"), F.col("ts_ms"), F.col("lateness_ms")
    code = F.coalesce(
        *(F.when(label == name, F.lit(c)) for name, c in CODES.items()), F.lit(0)
    ).cast("tinyint")
    dlq_copy = F.coalesce(
        (label == STORED) & F.col("topic").startswith(DLQ_GROUP_TOPIC_PREFIX), F.lit(False)
    )
    df = lines_df.select("*", code.alias("code"), dlq_copy.alias("dlq_copy"))
    c, att, mid, grp = F.col("code"), F.col("attempt"), F.col("msg_id"), F.col("group")

    def row(kind: int, when: Column, keys: dict[str, Column], values: dict[str, Column]) -> Column:
        fields = [F.lit(kind).cast("tinyint").alias("kind")]
        fields += [keys.get(k, F.lit(None)).cast(t).alias(k) for k, t in FACT_KEY[1:]]
        fields += [values.get(k, F.lit(None)).cast(t).alias(k) for k, t in FACT_VALUES]
        return F.when(when, F.struct(*fields))

    first = (att == 0) & c.isin(1, 2, 3, 4, 7, 8) & ~F.col("dlq_copy")
    delivered = c.isin(3, 8)
    real_topic = F.coalesce(F.col("real_topic"), F.col("topic"))
    level = F.when(c.isin(7, 8), F.lit(TIMER_LEVEL)).otherwise(F.col("delay_level"))
    # a recall (or an operator's reschedule) of a level-delayed message, not of a timer
    level_recall = label.isin(TIMER_RECALLED, *OPERATOR_EVENTS) & (
        F.coalesce(F.col("recall_kind"), F.lit("timer")) != "timer"
    )
    rows = F.array(
        row(
            COUNTS,
            F.lit(True),
            {
                "s1": label,
                "s2": F.when(c == 6, grp)
                .when(label.startswith("timer.") | label.isin(*OPERATOR_EVENTS), real_topic)
                .when(label.startswith("transaction."), F.col("producer_group")),
                "k1": F.floor(ts / 60_000),
                "k2": F.when(F.col("dlq_copy"), F.lit(1))
                .when(level_recall, F.lit(2))
                .otherwise(F.lit(0)),
            },
            {"min1": ts, "max1": ts},
        ),
        row(
            HIST,
            delivered & lat.isNotNull(),
            {"s2": F.col("topic"), "k1": bucket(lat), "k2": level},
            {"max1": lat, "sum1": lat, "pull": F.when(lat < 0, F.lit(1))},
        ),
        row(
            MESSAGE,
            mid.isNotNull() & (first | delivered),
            {"s1": mid, "s2": real_topic, "k2": att},
            {
                "min1": F.when(c.isin(1, 2, 7), ts),
                "min2": F.when(c.isin(2, 7), ts),
                "min3": F.when(c.isin(2, 7), F.col("deliver_ts")),
                "min4": F.when(delivered, ts),
                "min5": F.when(c == 4, ts),
                "max1": F.when(c.isin(1, 4), F.col("born_ts")),
                "max2": F.when(c.isin(2, 3, 7, 8), level),
                "pull": F.when(c == 4, F.lit(1)),
                "lat": F.when(delivered, lat),
                "lat_at": F.when(delivered, ts),
            },
        ),
        row(
            CONSUMER,
            mid.isNotNull() & grp.isNotNull() & c.isin(4, 5, 6),
            {"s1": mid, "s2": grp},
            {
                "min1": F.when(c == 6, F.lit(1)),
                "max1": F.when(c == 4, att),
                "max2": F.when(c == 5, att),
            },
        ),
    )
    return df.select(F.explode(rows).alias("r")).where(F.col("r").isNotNull()).select("r.*")


def one_pass(facts_df: DataFrame) -> DataFrame:
    """One hash aggregation over ``facts``: numeric buffers only (strings are keys), plain
    aggregates of precomputed values. Columns: the key, then ``n, min1..min5, max1, max2,
    sum1, pulls, lateness_ms`` (the lateness of the earliest delivery of the key)."""
    return facts_df.groupBy(*(k for k, _ in FACT_KEY)).agg(
        F.count(F.lit(1)).alias("n"),
        *(F.min(f"min{i}").alias(f"min{i}") for i in range(1, 6)),
        F.max("max1").alias("max1"),
        F.max("max2").alias("max2"),
        F.sum("sum1").alias("sum1"),
        F.count("pull").alias("pulls"),
        F.min_by("lat", "lat_at").alias("lateness_ms"),
    )


def _kind(agg: DataFrame, kind: int) -> DataFrame:
    return agg.where(F.col("kind") == kind)


def counts_of(agg: DataFrame) -> DataFrame:
    """``line_counts`` rows from ``one_pass``."""
    return _kind(agg, COUNTS).select(
        F.col("s1").alias("label"),
        F.col("k1").alias("minute"),
        (F.col("k2") == 1).alias("dlq_copy"),
        (F.col("k2") == 2).alias("level_recall"),
        F.col("s2").alias("group"),
        F.col("n").alias("lines"),
        F.col("min1").alias("first_ms"),
        F.col("max1").cast("long").alias("last_ms"),
    )


def lateness_of(agg: DataFrame) -> DataFrame:
    """``lateness_histogram`` rows from ``one_pass``."""
    return _kind(agg, HIST).select(
        F.col("k2").alias("delay_level"),
        F.col("s2").alias("topic"),
        F.col("k1").cast("int").alias("bucket"),
        "n",
        F.col("max1").alias("hi"),
        F.col("sum1").alias("total"),
        F.col("pulls").alias("early"),
    )


def _messages(agg: DataFrame) -> DataFrame:
    return _kind(agg, MESSAGE).select(
        F.col("s1").alias("msg_id"),
        F.col("s2").alias("topic"),
        F.col("k2").alias("attempt"),
        F.col("max2").alias("level"),
        F.col("min1").alias("accepted_ts"),
        F.col("min2").alias("scheduled_ts"),
        F.col("min3").alias("deliver_ts"),
        F.col("min4").alias("delivered_ms"),
        "lateness_ms",
        F.col("max1").cast("long").alias("born_ts"),
        F.col("min5").alias("first_consume_ts"),
        F.col("pulls").alias("first_pulls"),
    )


def top_late_of(agg: DataFrame, n: int = 100) -> DataFrame:
    """``top_late`` rows from ``one_pass`` (one delivery per message and attempt: the
    broker transfers each attempt out of the schedule topic once)."""
    order = [F.col("lateness_ms").desc(), F.col("msg_id")]
    top = (
        _messages(agg)
        .where(F.col("lateness_ms").isNotNull())
        .select(
            "delivered_ms",
            "msg_id",
            "topic",
            F.col("level").alias("delay_level"),
            F.col("attempt").alias("reconsume_times"),
            "lateness_ms",
        )
        .orderBy(*order)
        .limit(n)
    )
    rank = F.row_number().over(Window.partitionBy(F.lit(1)).orderBy(*order))
    return top.select(rank.alias("rank"), "*")


def lifecycle_of(agg: DataFrame) -> DataFrame:
    """``message_lifecycle`` rows from ``one_pass`` (its MESSAGE rows of the first attempt)."""
    first = _messages(agg).where(F.col("attempt") == 0)
    e2e = F.col("first_consume_ts") - F.col("born_ts")
    nominal = F.coalesce(F.col("deliver_ts") - F.col("scheduled_ts"), F.lit(0))
    return first.select(
        "msg_id",
        "topic",
        F.coalesce(F.col("level"), F.lit(0)).alias("delay_level"),
        "accepted_ts",
        "deliver_ts",
        "lateness_ms",
        "born_ts",
        "first_consume_ts",
        "first_pulls",
        e2e.alias("e2e_ms"),
        nominal.alias("nominal_ms"),
        (e2e - nominal).alias("added_ms"),
    )


def outcomes_of(agg: DataFrame) -> DataFrame:
    """``consumer_outcomes`` rows (``group, msg_id, attempts, outcome``) from ``one_pass``."""
    pulled, sent_back = F.coalesce(F.col("max1"), F.lit(-1)), F.coalesce(F.col("max2"), F.lit(-1))
    outcome = (
        F.when(F.col("min1") == 1, F.lit("dead_lettered"))
        .when(sent_back > pulled, F.lit("in_retry"))
        .otherwise(F.lit("succeeded"))
    )
    return _kind(agg, CONSUMER).select(
        F.col("s2").alias("group"),
        F.col("s1").alias("msg_id"),
        (pulled + 1).cast("int").alias("attempts"),
        outcome.alias("outcome"),
    )


# ---- every small result from ``one_pass`` in ONE query (no work directory) -----------------
# Result kinds besides COUNTS and HIST (which pass through unchanged).
LATENCY, FUNNEL, TOP = 4, 5, 6
# ``results_of``'s columns: the key of ``FACT_KEY``, then its values.
RESULT_VALUES: tuple[tuple[str, str], ...] = (
    ("n", "long"),
    ("min1", "long"),
    ("max1", "double"),
    ("max2", "int"),
    ("sum1", "double"),
    ("pulls", "long"),
    ("lat", "double"),
)


def results_of(agg: DataFrame, n: int = 100) -> DataFrame:
    """Every result the report needs from ``one_pass``, as ONE query of a few thousand rows
    (split on the driver by ``split_results``): each aggregated row becomes the rows it feeds
    (LATENCY: the end-to-end and added delay of a message's first attempt, FUNNEL: a group's
    outcome for a message, TOP: a delivery's lateness; COUNTS and HIST rows as they are), a
    second aggregation sums them, and the ``n`` latest deliveries are taken from the TOP rows.

    Both branches of the final union read the same second aggregation, so Spark runs the scan
    and the one pass once (its exchange is reused); they select every column and filter on
    ``lat`` (an aggregate, which Spark does not push below the aggregation) to keep the two
    plans below the union equal. Same figures as ``counts_of``, ``lateness_of``,
    ``lifecycle_of`` -> ``e2e_histogram``, ``outcomes_of`` -> ``retry_funnel`` and
    ``top_late_of``, without writing or reading the aggregate.
    """
    kind, k2 = F.col("kind"), F.col("k2")
    born, first_consume = F.col("max1").cast("long"), F.col("min5")
    e2e = (first_consume - born).cast("double")
    added = (first_consume - born - F.coalesce(F.col("min3") - F.col("min2"), F.lit(0))).cast(
        "double"
    )
    level = F.coalesce(F.col("max2"), F.lit(0))
    pulled = F.coalesce(F.col("max1").cast("int"), F.lit(-1))
    sent_back = F.coalesce(F.col("max2"), F.lit(-1))
    outcome = (
        F.when(F.col("min1") == 1, F.lit("dead_lettered"))
        .when(sent_back > pulled, F.lit("in_retry"))
        .otherwise(F.lit("succeeded"))
    )

    def row(rkind: int, when: Column, keys: dict[str, Column], values: dict[str, Column]) -> Column:
        fields = [F.lit(rkind).cast("tinyint").alias("kind")]
        fields += [keys.get(k, F.lit(None)).cast(t).alias(k) for k, t in FACT_KEY[1:]]
        fields += [values.get(k, F.lit(None)).cast(t).alias(k) for k, t in RESULT_VALUES]
        return F.when(when, F.struct(*fields))

    message, first = kind == MESSAGE, (kind == MESSAGE) & (k2 == 0)
    rows = F.array(
        row(
            COUNTS,
            kind == COUNTS,
            {"s1": F.col("s1"), "s2": F.col("s2"), "k1": F.col("k1"), "k2": k2},
            {"n": F.col("n"), "min1": F.col("min1"), "max1": F.col("max1")},
        ),
        row(
            HIST,
            kind == HIST,
            {"s2": F.col("s2"), "k1": F.col("k1"), "k2": k2},
            {
                "n": F.col("n"),
                "max1": F.col("max1"),
                "sum1": F.col("sum1"),
                "pulls": F.col("pulls"),
            },
        ),
        row(
            LATENCY,
            first & e2e.isNotNull(),
            {"s1": F.lit("e2e"), "s2": F.col("s2"), "k1": bucket(e2e), "k2": level},
            {"n": F.lit(1), "max1": e2e, "sum1": e2e},
        ),
        row(
            LATENCY,
            first & added.isNotNull(),
            {"s1": F.lit("added"), "s2": F.col("s2"), "k1": bucket(added), "k2": level},
            {"n": F.lit(1), "max1": added, "sum1": added},
        ),
        row(
            TOP,
            message & F.col("lateness_ms").isNotNull(),
            {"s1": F.col("s1"), "s2": F.col("s2"), "k2": k2},
            {
                "n": F.lit(1),
                "min1": F.col("min4"),
                "max2": F.col("max2"),
                "lat": F.col("lateness_ms"),
            },
        ),
        row(
            FUNNEL,
            kind == CONSUMER,
            {"s1": outcome, "s2": F.col("s2"), "k2": pulled + 1},
            {"n": F.lit(1)},
        ),
    )
    out = (
        agg.select(F.explode(rows).alias("r"))
        .where(F.col("r").isNotNull())
        .select("r.*")
        .groupBy(*(k for k, _ in FACT_KEY))
        .agg(
            F.sum("n").alias("n"),
            F.min("min1").alias("min1"),
            F.max("max1").alias("max1"),
            F.max("max2").alias("max2"),
            F.sum("sum1").alias("sum1"),
            F.sum("pulls").alias("pulls"),
            F.max("lat").alias("lat"),
        )
    )
    columns = out.columns
    top = (
        out.where(F.col("lat").isNotNull())
        .orderBy(F.col("lat").desc(), F.col("s1"))
        .limit(n)
        .select(*columns)
    )
    return out.where(F.col("lat").isNull()).select(*columns).unionByName(top)


def split_results(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """``results_of``'s rows as the results of ``counts_of`` (``line_counts``),
    ``lateness_of`` (``lateness``), ``e2e_histogram`` (``latency``), ``retry_funnel`` (in its
    order) and ``top_late_of`` (``top_late``, ranked), with the same columns."""
    got: dict[str, list[dict[str, Any]]] = {
        "line_counts": [],
        "lateness": [],
        "latency": [],
        "retry_funnel": [],
        "top_late": [],
    }
    for r in rows:
        k = r["kind"]
        if k == COUNTS:
            got["line_counts"].append(
                {
                    "label": r["s1"],
                    "minute": r["k1"],
                    "dlq_copy": r["k2"] == 1,
                    "level_recall": r["k2"] == 2,
                    "group": r["s2"],
                    "lines": r["n"],
                    "first_ms": r["min1"],
                    "last_ms": None if r["max1"] is None else int(r["max1"]),
                }
            )
        elif k == HIST:
            got["lateness"].append(
                {
                    "delay_level": r["k2"],
                    "topic": r["s2"],
                    "bucket": r["k1"],
                    "n": r["n"],
                    "hi": r["max1"],
                    "total": r["sum1"],
                    "early": r["pulls"],
                }
            )
        elif k == LATENCY:
            got["latency"].append(
                {
                    "topic": r["s2"],
                    "delay_level": r["k2"],
                    "kind": r["s1"],
                    "bucket": r["k1"],
                    "n": r["n"],
                    "hi": r["max1"],
                    "total": r["sum1"],
                }
            )
        elif k == FUNNEL:
            got["retry_funnel"].append(
                {"group": r["s2"], "attempts": r["k2"], "outcome": r["s1"], "messages": r["n"]}
            )
        elif k == TOP:
            got["top_late"].append(
                {
                    "delivered_ms": r["min1"],
                    "msg_id": r["s1"],
                    "topic": r["s2"],
                    "delay_level": r["max2"],
                    "reconsume_times": r["k2"],
                    "lateness_ms": r["lat"],
                }
            )
    got["retry_funnel"].sort(key=lambda r: (r["group"], r["attempts"], r["outcome"]))
    got["top_late"].sort(key=lambda r: (-r["lateness_ms"], r["msg_id"]))
    got["top_late"] = [{"rank": i, **r} for i, r in enumerate(got["top_late"], 1)]
    return got
