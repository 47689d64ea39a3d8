"""Pure DataFrame -> DataFrame transforms from parsed log events to delivery-quality metrics.

Owns the metric definitions. Each public function takes a DataFrame and returns one, reads no
files and starts no jobs, so they chain with ``df.transform(...)`` and are unit-tested on tiny
frames. Input of ``event_counts`` and ``message_events`` is the frame read with
``schema.LOG_EVENT_SCHEMA``; the other functions take ``message_events``' output.

Invariants:
* A malformed line (``CORRUPT`` set) is counted by ``event_counts`` and enters no metric.
* Events are joined by ``msg_id`` (the UNIQ_KEY, unchanged across retries) with one
  conditional aggregation per key (one shuffle) rather than a chain of joins.
* An event with ``reconsume_times`` 0 or absent belongs to the first attempt; a retry's
  scheduling, delivery and pulls carry its attempt number and the same ``msg_id``.
* Percentiles are nearest-rank (``percentile_approx`` with ``ACCURACY``; exact below that many
  values per group): ``pXX`` is the smallest value with at least XX % of values at or below it.
"""

from __future__ import annotations

from kairosmq.server.logs import CATALOGUE
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
ACCURACY = 10_000
QUANTILES: tuple[tuple[str, float], ...] = (
    ("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p999", 0.999),
)
# Columns the metrics read; the job caches only these (plus CORRUPT) after parsing.
MESSAGE_COLUMNS: tuple[str, ...] = (
    "timestamp", "event", "msg_id", "topic", "real_topic", "group", "delay_level",
    "reconsume_times", "lateness_ms", "deliver_ts", "born_ts",
)
THROUGHPUT_EVENTS: tuple[tuple[str, str], ...] = (
    ("stored", STORED), ("scheduled", SCHEDULED), ("delivered", DELIVERED),
    ("consumed", PULLED), ("redelivered", REDELIVERED), ("dead_lettered", DEAD_LETTERED),
    ("rejected", REJECTED),
)


def event_counts(raw: DataFrame) -> DataFrame:
    """Lines per event name: ``event, catalogued, lines``; bad lines count as ``<malformed>``."""
    label = (F.when(F.col(CORRUPT).isNotNull(), F.lit(MALFORMED))
             .when(F.col("event").isNull(), F.lit(NO_EVENT))
             .otherwise(F.col("event")))
    return (raw.groupBy(label.alias("event")).agg(F.count(F.lit(1)).alias("lines"))
            .withColumn("catalogued", F.col("event").isin(*CATALOGUE))
            .select("event", "catalogued", "lines"))


def message_events(raw: DataFrame) -> DataFrame:
    """Well-formed ``message.*`` events with ``MESSAGE_COLUMNS``, ``attempt`` and ``ts_ms``."""
    return (raw.where(F.col(CORRUPT).isNull() & F.col("event").startswith("message."))
            .select(*MESSAGE_COLUMNS,
                    F.coalesce(F.col("reconsume_times"), F.lit(0)).alias("attempt"),
                    F.unix_millis("timestamp").alias("ts_ms")))


def latency_summary(df: DataFrame, keys: list[str], value: str) -> DataFrame:
    """Per ``keys``: ``count, p50, p90, p99, p999, max, mean`` of the non-null ``value``."""
    probs = [p for _, p in QUANTILES]
    agg = (df.where(F.col(value).isNotNull()).groupBy(*keys)
           .agg(F.count(F.lit(1)).alias("count"),
                F.percentile_approx(value, probs, ACCURACY).alias("_q"),
                F.max(value).cast("double").alias("max"),
                F.avg(value).alias("mean")))
    quantiles = [F.col("_q")[i].cast("double").alias(name) for i, (name, _) in enumerate(QUANTILES)]
    out = agg.select(*keys, "count", *quantiles, "max", "mean")
    return out.orderBy(*keys) if keys else out


def lateness_overall(events: DataFrame) -> DataFrame:
    """One row: lateness of every transfer out of the schedule topic."""
    return latency_summary(events.where(F.col("event") == DELIVERED), [], "lateness_ms")


def lateness_by_level(events: DataFrame) -> DataFrame:
    """Lateness of transfers out of the schedule topic per ``delay_level`` (retries included)."""
    delivered = events.where(F.col("event") == DELIVERED)
    return latency_summary(delivered, ["delay_level"], "lateness_ms")


def lateness_by_topic(events: DataFrame) -> DataFrame:
    """Lateness per real ``topic`` a delayed message was delivered to (``%RETRY%g`` for retries)."""
    delivered = events.where(F.col("event") == DELIVERED)
    return latency_summary(delivered, ["topic"], "lateness_ms")


def _first(cond: Column, value: Column | str) -> Column:
    """``value`` of the earliest event matching ``cond`` (by ``ts_ms``) in the group."""
    value = F.col(value) if isinstance(value, str) else value
    return F.min_by(F.when(cond, value), F.when(cond, F.col("ts_ms")))


def message_lifecycle(events: DataFrame) -> DataFrame:
    """One row per ``msg_id``: its first attempt across store/schedule, deliver and consume.

    Columns: ``msg_id, topic, delay_level (0 = not delayed), accepted_ts, deliver_ts,
    lateness_ms, born_ts, first_consume_ts, consumer_groups, e2e_ms`` (times epoch ms;
    ``e2e_ms`` = first pull of the first attempt - producer's born time).
    """
    first = F.col("attempt") == 0
    ev = F.col("event")
    origin = first & ev.isin(STORED, SCHEDULED)
    sched = first & (ev == SCHEDULED)
    deliv = first & (ev == DELIVERED)
    pull = first & (ev == PULLED)
    # Only first-attempt steps enter the shuffle (retries and message.due stay out).
    steps = events.where(F.col("msg_id").isNotNull() & first
                         & ev.isin(STORED, SCHEDULED, DELIVERED, PULLED))
    agg = (steps.groupBy("msg_id").agg(
        _first(origin, F.coalesce("real_topic", "topic")).alias("origin_topic"),
        _first(pull, "topic").alias("pulled_topic"),
        F.max(F.when(sched, F.col("delay_level"))).alias("_level"),
        F.min(F.when(origin, F.col("ts_ms"))).alias("accepted_ts"),
        _first(sched, "deliver_ts").alias("deliver_ts"),
        _first(deliv, "lateness_ms").alias("lateness_ms"),
        F.max(F.when(ev.isin(STORED, PULLED), F.col("born_ts"))).alias("born_ts"),
        F.min(F.when(pull, F.col("ts_ms"))).alias("first_consume_ts"),
        # size(collect_set) rather than count_distinct: no Expand of every row
        F.size(F.collect_set(F.when(pull, F.col("group")))).alias("consumer_groups"),
    ))
    return agg.select(
        "msg_id",
        F.coalesce("origin_topic", "pulled_topic").alias("topic"),
        F.coalesce(F.col("_level"), F.lit(0)).alias("delay_level"),
        "accepted_ts", "deliver_ts", "lateness_ms", "born_ts", "first_consume_ts",
        "consumer_groups",
        (F.col("first_consume_ts") - F.col("born_ts")).alias("e2e_ms"),
    )


def e2e_latency(lifecycle: DataFrame) -> DataFrame:
    """Send -> first consume latency per ``topic, delay_level`` from ``message_lifecycle``."""
    return latency_summary(lifecycle, ["topic", "delay_level"], "e2e_ms")


def consumer_outcomes(events: DataFrame) -> DataFrame:
    """One row per ``group, msg_id``: ``attempts`` (times pulled) and ``outcome``.

    ``outcome`` is ``dead_lettered`` (sent to %DLQ%), ``in_retry`` (sent back, its next attempt
    not pulled when the logs end) or ``succeeded`` (the last attempt was not sent back).
    """
    ev = F.col("event")
    per = (events.where(ev.isin(PULLED, REDELIVERED, DEAD_LETTERED)
                        & F.col("group").isNotNull() & F.col("msg_id").isNotNull())
           .groupBy("group", "msg_id").agg(
               F.max(F.when(ev == PULLED, F.col("attempt"))).alias("_pulled"),
               F.max(F.when(ev == REDELIVERED, F.col("attempt"))).alias("_sent_back"),
               F.max(F.when(ev == DEAD_LETTERED, F.lit(1))).alias("_dlq")))
    outcome = (F.when(F.col("_dlq") == 1, F.lit("dead_lettered"))
               .when(F.coalesce(F.col("_sent_back"), F.lit(-1))
                     > F.coalesce(F.col("_pulled"), F.lit(-1)), F.lit("in_retry"))
               .otherwise(F.lit("succeeded")))
    return per.select("group", "msg_id",
                      (F.coalesce(F.col("_pulled"), F.lit(-1)) + 1).alias("attempts"),
                      outcome.alias("outcome"))


def retry_funnel(outcomes: DataFrame) -> DataFrame:
    """``group, attempts, outcome, messages`` from ``consumer_outcomes``."""
    return (outcomes.groupBy("group", "attempts", "outcome")
            .agg(F.count(F.lit(1)).alias("messages"))
            .orderBy("group", "attempts", "outcome"))


def dlq_counts(events: DataFrame) -> DataFrame:
    """Dead letters per consumer ``group``: events, distinct messages, first and last time."""
    dead = events.where(F.col("event") == DEAD_LETTERED)
    return (dead.groupBy("group").agg(
        F.count(F.lit(1)).alias("dead_lettered"),
        F.count_distinct("msg_id").alias("messages"),
        F.min("timestamp").alias("first_at"),
        F.max("timestamp").alias("last_at"),
    ).orderBy("group"))


def throughput_per_minute(events: DataFrame) -> DataFrame:
    """Events per UTC minute: ``minute`` plus one count column per ``THROUGHPUT_EVENTS``.

    ``stored`` counts messages accepted from producers: the broker also logs
    ``message.stored`` for the copy it writes to ``%DLQ%<group>``, counted as dead_lettered.
    """
    dlq_copy = (F.col("event") == STORED) & F.col("topic").startswith("%DLQ%")
    counts = [F.sum(F.when((F.col("event") == name) & ~dlq_copy, 1).otherwise(0))
              .cast("long").alias(col) for col, name in THROUGHPUT_EVENTS]
    return (events.groupBy(F.date_trunc("minute", "timestamp").alias("minute"))
            .agg(*counts).orderBy("minute"))


def top_late(events: DataFrame, n: int = 100) -> DataFrame:
    """The ``n`` latest transfers out of the schedule with their ``rank`` (1 = latest)."""
    order = [F.col("lateness_ms").desc(), F.col("msg_id")]
    top = (events.where((F.col("event") == DELIVERED) & F.col("lateness_ms").isNotNull())
           .select("timestamp", "msg_id", "topic", "delay_level", "reconsume_times",
                   "deliver_ts", "lateness_ms")
           .orderBy(*order).limit(n))
    # n rows only, so one window partition is fine
    return top.select(F.row_number().over(Window.orderBy(*order)).alias("rank"), "*")
