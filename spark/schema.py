"""The explicit Spark schema of the broker's JSON log lines, derived from the event catalogue.

Owns: ``LOG_EVENT_SCHEMA`` (the ``StructType`` every read uses; the job never infers),
``CORRUPT`` (the name of the column that receives a line which does not parse), the
``TIMESTAMP_FORMAT`` of format 1's ``timestamp`` field, ``read_options()`` for the JSON reader
and ``event_time()`` (one epoch-ms time column for both line formats).

Invariants:
* One nullable column per field of ``kairosmq.protocol.events.all_fields()`` (format 2), then
  the format-1-only fields of ``FORMAT_1_FIELDS`` (so old logs still read), with the type the
  catalogue names (``SPARK_TYPES``); every event carries only its own fields, so every column
  is nullable. ``CORRUPT`` (string) comes last. A field added to the catalogue appears here
  without an edit; a type name this module does not know fails at import.
* Format 2 lines carry ``ts`` (epoch ms) and ``v``; format 1 lines carry ``timestamp``
  (ISO-8601 UTC, 0 to 6 fraction digits) and no ``v``. ``event_time`` yields ``ts_ms`` from
  either, and flags a format-1 ``timestamp`` that does not parse in ``CORRUPT``.
* ``FAST_READ_SCHEMA`` is ``LOG_EVENT_SCHEMA`` with ``timestamp`` read as text (Spark's ISO
  cast is much cheaper than its pattern parser); FAILFAST reads ``LOG_EVENT_SCHEMA`` itself.
"""

from __future__ import annotations

from collections.abc import Mapping

from kairosmq.protocol.events import FORMAT_1_FIELDS, all_fields
from kairosmq.spark.options import MODES
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

CORRUPT = "_corrupt_record"
TIMESTAMP_FORMAT = "yyyy-MM-dd'T'HH:mm:ss[.SSSSSS]XXX"

SPARK_TYPES: dict[str, DataType] = {
    "timestamp": TimestampType(),
    "string": StringType(),
    "long": LongType(),
    "int": IntegerType(),
    "double": DoubleType(),
    "boolean": BooleanType(),
}


def build_schema(fields: Mapping[str, str], *, corrupt: bool = True) -> StructType:
    """Return the ``StructType`` for catalogue ``fields`` (name -> catalogue type name).

    Args:
        fields: ordered mapping, as returned by ``all_fields()``.
        corrupt: append the ``CORRUPT`` string column (PERMISSIVE reads need it).

    Raises:
        ValueError: a type name that has no Spark type in ``SPARK_TYPES``.
    """
    columns = []
    for name, kind in fields.items():
        if kind not in SPARK_TYPES:
            raise ValueError(f"catalogue field {name!r} has unknown type {kind!r}")
        columns.append(StructField(name, SPARK_TYPES[kind], nullable=True))
    if corrupt:
        columns.append(StructField(CORRUPT, StringType(), nullable=True))
    return StructType(columns)


def contract_fields() -> dict[str, str]:
    """``all_fields()`` then the format-1-only fields (a type clash fails)."""
    out = all_fields()
    for name, kind in FORMAT_1_FIELDS.items():
        if out.setdefault(name, kind) != kind:
            raise ValueError(f"format 1 field {name!r} is {kind}, format 2 says {out[name]}")
    return out


LOG_EVENT_SCHEMA: StructType = build_schema(contract_fields())
FAST_READ_SCHEMA: StructType = build_schema(
    {name: "string" if name == "timestamp" else kind for name, kind in contract_fields().items()}
)


def event_time(df: DataFrame) -> DataFrame:
    """Add ``ts_ms`` (epoch ms) from ``ts`` (format 2) or ``timestamp`` (format 1).

    A text ``timestamp`` (``FAST_READ_SCHEMA``) is cast with Spark's ISO cast; one that does
    not parse marks the line in ``CORRUPT``.
    """
    stamp = F.col("timestamp")
    if df.schema["timestamp"].dataType == StringType():
        parsed = stamp.try_cast("timestamp")
        bad: Column = F.when(
            stamp.isNotNull() & parsed.isNull(), F.concat(F.lit("unparsable timestamp: "), stamp)
        )
        df = df.withColumn(CORRUPT, F.coalesce(F.col(CORRUPT), bad))
        stamp = parsed
    return df.withColumn("ts_ms", F.coalesce(F.col("ts"), F.unix_millis(stamp)))


def read_options(mode: str) -> dict[str, str]:
    """Options for ``spark.read.json``: PERMISSIVE counts bad lines, FAILFAST raises."""
    mode = mode.upper()
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    return {
        "mode": mode,
        "columnNameOfCorruptRecord": CORRUPT,
        "timestampFormat": TIMESTAMP_FORMAT,
    }
