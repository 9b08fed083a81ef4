"""The source's Spark schema: one row per message, equal to the sidecar's Arrow schema.

The sidecar encodes pulled messages as Arrow record batches (``sidecar/arrow.py``
``SOURCE_SCHEMA``) and ``read()`` hands them to Spark untouched, so the two schemas must
agree exactly: Spark compares the batch schema with ``to_arrow_schema(SOURCE_SCHEMA_SPARK)``
field by field, nullability included. ``tests/spark/test_schema.py`` checks that they do.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import (BinaryType, IntegerType, LongType, MapType, StringType,
                               StructField, StructType, TimestampType)

__all__ = ["SOURCE_SCHEMA_SPARK", "arrow_schema", "COLUMNS"]

SOURCE_SCHEMA_SPARK = StructType([
    StructField("topic", StringType(), False),
    StructField("broker", StringType(), False),
    StructField("queue_id", IntegerType(), False),
    StructField("queue_offset", LongType(), False),
    StructField("msg_id", StringType(), False),
    StructField("offset_msg_id", StringType(), False),
    StructField("tags", StringType(), True),
    StructField("keys", StringType(), True),
    StructField("body", BinaryType(), False),
    StructField("properties", MapType(StringType(), StringType(), True), False),
    StructField("born_timestamp", TimestampType(), False),
    StructField("store_timestamp", TimestampType(), False),
    StructField("born_host", StringType(), False),
    StructField("store_host", StringType(), False),
    StructField("reconsume_times", IntegerType(), False),
])

COLUMNS: tuple[str, ...] = tuple(SOURCE_SCHEMA_SPARK.fieldNames())


def arrow_schema() -> pa.Schema:
    """The Arrow schema Spark expects from ``read()`` for :data:`SOURCE_SCHEMA_SPARK`."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(SOURCE_SCHEMA_SPARK, timezone="UTC")
