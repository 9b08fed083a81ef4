"""The PySpark data source named ``rocketmq``.

``spark.readStream.format("rocketmq")`` and ``spark.read.format("rocketmq")`` (no
registration needed once the package is installed: see ``pyspark_rocketmq``). The schema
is fixed (``schema.SOURCE_SCHEMA_SPARK``); options are validated by ``options.parse`` when
Spark asks for a reader. The sink goes in ``writer.py``; its ``writer`` / ``streamWriter``
methods belong on this class next to ``reader`` / ``streamReader``.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from rocketmq_spark.errors import ConfigError
from rocketmq_spark.spark import options
from rocketmq_spark.spark.schema import SOURCE_SCHEMA_SPARK

__all__ = ["RocketMQDataSource"]


def _check_schema(schema: StructType) -> None:
    # A user-given schema (.schema(...)) must be the source's own: read() yields Arrow
    # batches of exactly that shape.
    got = [(f.name, f.dataType) for f in schema.fields]
    want = [(f.name, f.dataType) for f in SOURCE_SCHEMA_SPARK.fields]
    if got != want:
        raise ConfigError(f"format 'rocketmq' has a fixed schema ({SOURCE_SCHEMA_SPARK.simpleString()}); "
                          f"do not pass another one (got {schema.simpleString()})")


class RocketMQDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "rocketmq"

    def schema(self) -> StructType:
        return SOURCE_SCHEMA_SPARK

    def reader(self, schema: StructType) -> DataSourceReader:
        from rocketmq_spark.spark.batch_reader import RocketMQBatchReader

        _check_schema(schema)
        return RocketMQBatchReader(options.parse(self.options, "batch"))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from rocketmq_spark.spark.stream_reader import RocketMQStreamReader

        _check_schema(schema)
        return RocketMQStreamReader(options.parse(self.options, "stream"))
