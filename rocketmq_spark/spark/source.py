"""The PySpark data source named ``rocketmq``.

``spark.readStream.format("rocketmq")`` and ``spark.read.format("rocketmq")`` (no
registration needed once the package is installed: see ``pyspark_rocketmq``). The schema
is fixed (``schema.SOURCE_SCHEMA_SPARK``); options are validated by ``options.parse``:
at ``load()`` (Spark asks for the schema then) against what any read accepts, and for
the kind of read (batch or stream, e.g. ``endingOffsets`` is for batch reads only) when
Spark asks for a reader.

Filter push-down: pyspark 4.1+ hands a batch reader the query's filters only with
``spark.sql.python.filterPushdown.enabled`` on, and fails every read of a reader that takes
them while it is off. A data source cannot see that setting (Spark creates it in a Python
worker from the options alone), so the class found by name, ``RocketMQDataSource``, pushes
nothing, and ``RocketMQPushdownDataSource`` (whose batch reader has ``pushFilters``) is the
one ``rocketmq_spark.spark.register(spark)`` registers when the session has the setting on.

The sink, ``df.write.format("rocketmq")`` and ``df.writeStream.format("rocketmq")``, is in
``writer.py``; its options (``sink_options.parse``) and the DataFrame's columns
(``writer.check_schema``) are checked when Spark asks for a writer, on the driver, before
any task runs.
"""

from __future__ import annotations

from typing import Mapping

from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader,
                                    DataSourceStreamWriter, DataSourceWriter)
from pyspark.sql.types import StructType

from rocketmq_spark.errors import ConfigError
from rocketmq_spark.spark import options
from rocketmq_spark.spark.imports import collector_paused
from rocketmq_spark.spark.schema import SOURCE_SCHEMA_SPARK

__all__ = ["RocketMQDataSource", "RocketMQPushdownDataSource", "PUSHDOWN_CONF"]

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def _check_schema(schema: StructType) -> None:
    # A user-given schema (.schema(...)) must be the source's own: read() yields Arrow
    # batches of exactly that shape.
    got = [(f.name, f.dataType) for f in schema.fields]
    want = [(f.name, f.dataType) for f in SOURCE_SCHEMA_SPARK.fields]
    if got != want:
        raise ConfigError(f"format 'rocketmq' has a fixed schema ({SOURCE_SCHEMA_SPARK.simpleString()}); "
                          f"do not pass another one (got {schema.simpleString()})")


READ_KINDS: tuple[options.ReadKind, ...] = ("stream", "batch")


def _check_options(opts: Mapping[str, str]) -> None:
    """Fail ``load()`` on options neither a batch read nor a stream accepts. Which of the two
    a read is, Spark tells only when it asks for a reader; the error raised here is the one
    of the read the options point to (``endingOffsets``, ``endingTimestamp``: batch reads)."""
    errors: dict[options.ReadKind, ConfigError] = {}
    for kind in READ_KINDS:
        try:
            options.parse(opts, kind)
            return
        except ConfigError as exc:
            errors[kind] = exc
    batch = any(str(k).lower() in ("endingoffsets", "endingtimestamp") for k in opts)
    raise errors["batch" if batch else "stream"]


class RocketMQDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> StructType:
        _check_options(self.options)
        return SOURCE_SCHEMA_SPARK

    def reader(self, schema: StructType) -> DataSourceReader:
        with collector_paused():
            from rocketmq_spark.spark.batch_reader import RocketMQBatchReader

        _check_schema(schema)
        return RocketMQBatchReader(options.parse(self.options, "batch"))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        with collector_paused():      # imports.py: a collection now would free nothing
            from rocketmq_spark.spark.stream_reader import RocketMQStreamReader

        _check_schema(schema)
        return RocketMQStreamReader(options.parse(self.options, "stream"))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        with collector_paused():
            from rocketmq_spark.spark import sink_options
            from rocketmq_spark.spark.writer import RocketMQWriter, check_schema

        if overwrite:
            raise ConfigError("the rocketmq sink only appends (RocketMQ cannot replace what a "
                              "topic holds); write with mode('append')")
        opts = sink_options.parse(self.options)
        return RocketMQWriter(opts, check_schema(schema, opts.topic, exactly_once=opts.exactly_once))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        with collector_paused():
            from rocketmq_spark.spark import sink_options
            from rocketmq_spark.spark.exactly_once import stream_txn_id
            from rocketmq_spark.spark.writer import RocketMQStreamWriter, check_schema

        # overwrite is Spark's complete output mode: every trigger sends the whole result
        # table again, as the Kafka sink does.
        opts = sink_options.parse(self.options)
        txn_id = stream_txn_id(opts, dict(self.options)) if opts.exactly_once else None
        return RocketMQStreamWriter(opts, check_schema(schema, opts.topic, exactly_once=opts.exactly_once),
                                    txn_id, schema)


class RocketMQPushdownDataSource(RocketMQDataSource):
    """``rocketmq`` whose batch reads take Spark's filters (``batch_reader.py``); only for
    sessions with ``spark.sql.python.filterPushdown.enabled`` on."""

    def reader(self, schema: StructType) -> DataSourceReader:
        with collector_paused():
            from rocketmq_spark.spark.batch_reader import RocketMQPushdownBatchReader

        _check_schema(schema)
        return RocketMQPushdownBatchReader(options.parse(self.options, "batch"))
