"""Pure DataFrame -> DataFrame transforms from parsed log lines to delivery-quality aggregates.

Owns the metric definitions. Each public function takes a DataFrame and returns one, reads no
files and starts no jobs, so they chain with ``df.transform(...)`` and are unit-tested on tiny
frames. ``lines`` takes the frame read with ``schema.LOG_EVENT_SCHEMA`` (after
``schema.event_time``) and yields the narrow per-line frame (``LINE_COLUMNS``) that the job
caches; every other function takes ``lines``' output.

Invariants:
* ``label`` is the event name, or ``<malformed>`` (the line did not parse), ``<no event>``,
  ``<format vN>`` (written by a newer broker than this job knows): only lines labelled with a
  ``message.*`` name enter a metric.
* The aggregations over many keys (per message, per consumer group and message) keep only
  numbers in their buffers, so Spark runs them as hash aggregates with map-side combining:
  strings appear only as grouping keys.
* Events are joined by ``msg_id`` (the UNIQ_KEY, unchanged across retries) with one
  conditional aggregation per key (one shuffle) rather than a chain of joins.
* An event with ``reconsume_times`` 0 or absent belongs to the first attempt; a retry's
  scheduling, delivery and pulls carry its attempt number and the same ``msg_id``.
* Latency distributions leave Spark as log-bucket histograms (``bucket``: 1 % wide; count,
  largest value and sum per bucket); ``hist.py`` turns them into percentiles on the driver.
"""

from __future__ import annotations

import math

from kairosmq.protocol.events import LOG_FORMAT
from kairosmq.spark.schema import CORRUPT
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

MALFORMED = "<malformed>"
NO_EVENT = "<no event>"
BUCKET_GROWTH = 1.01  # histogram buckets are 1 % wide
FLOOR_MS = 0.001  # values up to 1 microsecond (and negative ones) share the lowest bucket
FLOOR_BUCKET = -10_000
# The columns the job caches after parsing (one row per line).
LINE_COLUMNS: tuple[str, ...] = (
    "label", "ts_ms", "msg_id", "topic", "real_topic", "group", "delay_level", "attempt",
    "lateness_ms", "deliver_ts", "born_ts",
)
# The parsed fields those are made of (the JSON reader parses no other field).
READ_COLUMNS: tuple[str, ...] = (
    "ts", "timestamp", "v", "event", "msg_id", "topic", "real_topic", "group", "delay_level",
    "reconsume_times", "lateness_ms", "deliver_ts", "born_ts", CORRUPT,
)
THROUGHPUT_EVENTS: tuple[tuple[str, str], ...] = (
    ("stored", STORED), ("scheduled", SCHEDULED), ("delivered", DELIVERED),
    ("consumed", PULLED), ("redelivered", REDELIVERED), ("dead_lettered", DEAD_LETTERED),
    ("rejected", REJECTED),
)


def lines(parsed: DataFrame) -> DataFrame:
    """One narrow row per line (``LINE_COLUMNS``); see the module docstring for ``label``."""
    v = F.col("v")
    label = (F.when(F.col(CORRUPT).isNotNull(), F.lit(MALFORMED))
             .when(v > LOG_FORMAT, F.format_string("<format v%d>", v))
             .when(F.col("event").isNull(), F.lit(NO_EVENT))
             .otherwise(F.col("event")))
    return parsed.select(
        label.alias("label"), "ts_ms", "msg_id", "topic", "real_topic", "group", "delay_level",
        F.coalesce(F.col("reconsume_times"), F.lit(0)).alias("attempt"),
        "lateness_ms", "deliver_ts", "born_ts")


def bucket(value: Column) -> Column:
    """Log-bucket id of a latency in ms: monotonic in ``value``, 1 % wide."""
    return (F.when(value <= FLOOR_MS, F.lit(FLOOR_BUCKET))
            .otherwise(F.ceil(F.log(value) / math.log(BUCKET_GROWTH)))).cast("int")


def _histogram(df: DataFrame, keys: list[str], value: str) -> DataFrame:
    """``keys, bucket, n, hi, total``: per key and bucket the count, max and sum of ``value``."""
    return (df.where(F.col(value).isNotNull())
            .groupBy(*keys, bucket(F.col(value)).alias("bucket"))
            .agg(F.count(F.lit(1)).alias("n"), F.max(value).cast("double").alias("hi"),
                 F.sum(value).cast("double").alias("total")))


def line_counts(lines_df: DataFrame) -> DataFrame:
    """Lines per ``label, minute`` (epoch minute; null without a time), split by ``dlq_copy``
    (the broker's ``message.stored`` of a message it moved to ``%DLQ%``), with ``group`` kept
    for dead letters only; plus the first and last time. Event counts, throughput per minute
    and the dead letters per group are sums over this small table.
    """
    dlq_copy = (F.col("label") == STORED) & F.col("topic").startswith("%DLQ%")
    return (lines_df.groupBy(
        "label", F.floor(F.col("ts_ms") / 60_000).alias("minute"),
        F.coalesce(dlq_copy, F.lit(False)).alias("dlq_copy"),
        F.when(F.col("label") == DEAD_LETTERED, F.col("group")).alias("group"))
        .agg(F.count(F.lit(1)).alias("lines"), F.min("ts_ms").alias("first_ms"),
             F.max("ts_ms").alias("last_ms")))


def lateness_histogram(lines_df: DataFrame) -> DataFrame:
    """Lateness of transfers out of the schedule topic: ``delay_level, topic, bucket, n, hi,
    total`` (``topic`` is the real topic, ``%RETRY%<group>`` for retries)."""
    delivered = lines_df.where(F.col("label") == DELIVERED)
    return _histogram(delivered, ["delay_level", "topic"], "lateness_ms")


def top_late(lines_df: DataFrame, n: int = 100) -> DataFrame:
    """The ``n`` latest transfers out of the schedule with their ``rank`` (1 = latest)."""
    order = [F.col("lateness_ms").desc(), F.col("msg_id")]
    top = (lines_df.where((F.col("label") == DELIVERED) & F.col("lateness_ms").isNotNull())
           .select(F.col("ts_ms").alias("delivered_ms"), "msg_id", "topic",
                   "delay_level", F.col("attempt").alias("reconsume_times"), "lateness_ms")
           .orderBy(*order).limit(n))
    # n rows only: one window partition, named so that Spark does not warn about it
    rank = F.row_number().over(Window.partitionBy(F.lit(1)).orderBy(*order))
    return top.select(rank.alias("rank"), "*")


def message_lifecycle(lines_df: DataFrame) -> DataFrame:
    """One row per message: its first attempt across store/schedule, deliver and consume.

    Columns: ``msg_id, topic, delay_level (0 = not delayed), accepted_ts, deliver_ts,
    lateness_ms, born_ts, first_consume_ts, first_pulls, e2e_ms, nominal_ms, added_ms``
    (times epoch ms). ``e2e_ms`` = first pull of the first attempt - producer's born time;
    ``nominal_ms`` = planned delivery - store time (0 when not delayed); ``added_ms`` =
    ``e2e_ms - nominal_ms``, the delay the system added. ``first_pulls`` counts first-attempt
    pulls: one per consumer group, more when a group pulled it again (e.g. a rebalance).

    Grouped by ``msg_id`` and its real topic: on the first attempt the stored, scheduled
    (``real_topic``), delivered and pulled lines all name the producer's topic, so the key
    costs no string buffer; the broker's copy into ``%DLQ%`` is left out.
    """
    ev = F.col("label")
    sched, deliv, pull = ev == SCHEDULED, ev == DELIVERED, ev == PULLED
    origin = ev.isin(STORED, SCHEDULED)
    steps = lines_df.where(
        F.col("msg_id").isNotNull() & (F.col("attempt") == 0)
        & ev.isin(STORED, SCHEDULED, DELIVERED, PULLED)
        & ~((ev == STORED) & F.col("topic").startswith("%DLQ%")))
    ts = F.col("ts_ms")
    agg = (steps.groupBy("msg_id", F.coalesce("real_topic", "topic").alias("topic")).agg(
        F.max(F.when(sched, F.col("delay_level"))).alias("_level"),
        F.min(F.when(origin, ts)).alias("accepted_ts"),
        F.min(F.when(sched, ts)).alias("_scheduled_ts"),
        F.min(F.when(sched, F.col("deliver_ts"))).alias("deliver_ts"),
        F.min_by(F.when(deliv, F.col("lateness_ms")), F.when(deliv, ts)).alias("lateness_ms"),
        F.max(F.when(ev.isin(STORED, PULLED), F.col("born_ts"))).alias("born_ts"),
        F.min(F.when(pull, ts)).alias("first_consume_ts"),
        F.count(F.when(pull, F.lit(1))).alias("first_pulls"),
    ))
    e2e = F.col("first_consume_ts") - F.col("born_ts")
    nominal = F.coalesce(F.col("deliver_ts") - F.col("_scheduled_ts"), F.lit(0))
    return agg.select(
        "msg_id", "topic", F.coalesce(F.col("_level"), F.lit(0)).alias("delay_level"),
        "accepted_ts", "deliver_ts", "lateness_ms", "born_ts", "first_consume_ts",
        "first_pulls", e2e.alias("e2e_ms"), nominal.alias("nominal_ms"),
        (e2e - nominal).alias("added_ms"))


def e2e_histogram(lifecycle: DataFrame) -> DataFrame:
    """``topic, delay_level, kind, bucket, n, hi, total`` of ``e2e_ms`` (kind ``e2e``) and of
    ``added_ms`` (kind ``added``) from ``message_lifecycle``, in one aggregation."""
    both = lifecycle.select("topic", "delay_level", F.explode(F.array(
        F.struct(F.lit("e2e").alias("kind"), F.col("e2e_ms").cast("double").alias("ms")),
        F.struct(F.lit("added").alias("kind"), F.col("added_ms").cast("double").alias("ms")),
    )).alias("x")).select("topic", "delay_level", "x.kind", "x.ms")
    return _histogram(both, ["topic", "delay_level", "kind"], "ms")


def consumer_outcomes(lines_df: DataFrame) -> DataFrame:
    """One row per consumer group and message: ``group, msg_key, attempts, outcome``.

    ``msg_key`` is the 64-bit xxhash of ``msg_id`` (a numeric key hashes and shuffles faster;
    two ids sharing a hash would merge, about a 1-in-3-million chance at 3 million messages).

    ``outcome`` is ``dead_lettered`` (sent to %DLQ%), ``in_retry`` (sent back, its next attempt
    not pulled when the logs end) or ``succeeded`` (the last attempt was not sent back).
    """
    ev = F.col("label")
    per = (lines_df.where(ev.isin(PULLED, REDELIVERED, DEAD_LETTERED)
                          & F.col("group").isNotNull() & F.col("msg_id").isNotNull())
           .groupBy("group", F.xxhash64("msg_id").alias("msg_key")).agg(
               F.max(F.when(ev == PULLED, F.col("attempt"))).alias("_pulled"),
               F.max(F.when(ev == REDELIVERED, F.col("attempt"))).alias("_sent_back"),
               F.max(F.when(ev == DEAD_LETTERED, F.lit(1))).alias("_dlq")))
    outcome = (F.when(F.col("_dlq") == 1, F.lit("dead_lettered"))
               .when(F.coalesce(F.col("_sent_back"), F.lit(-1))
                     > F.coalesce(F.col("_pulled"), F.lit(-1)), F.lit("in_retry"))
               .otherwise(F.lit("succeeded")))
    return per.select("group", "msg_key",
                      (F.coalesce(F.col("_pulled"), F.lit(-1)) + 1).alias("attempts"),
                      outcome.alias("outcome"))


def retry_funnel(outcomes: DataFrame) -> DataFrame:
    """``group, attempts, outcome, messages`` from ``consumer_outcomes``."""
    return (outcomes.groupBy("group", "attempts", "outcome")
            .agg(F.count(F.lit(1)).alias("messages"))
            .orderBy("group", "attempts", "outcome"))
