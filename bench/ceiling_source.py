"""What Spark's Python Data Source API costs by itself: a streaming source with the
``rocketmq`` schema whose ``read()`` only yields record batches built in advance (one per
partition, repeated), so no broker, no sidecar and no decoding is involved. Its rows/s is
the most any Python streaming source with this schema can reach on the machine;
``source_bench.py`` compares ours with it and with Spark's ``rate`` source. Its rows are
shaped like the ones ours reads in the same benchmark (the body's size, the topic's name,
the properties a stored message carries: what the client sent and the CLUSTER the broker
adds), since what Spark's JVM does with a row grows with its bytes and its map entries."""

from __future__ import annotations

import json
from typing import Any, Iterator, Mapping

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

PARTITIONS = 4
BATCH_ROWS = 4096
# what a message sent by our client carries besides its UNIQ_KEY (the ceiling makes one per
# row), and what a broker adds when it stores it: Apache's (and the embedded) broker puts
# the cluster's name in CLUSTER. ``stored_properties`` in common.py reads them from a broker.
DEFAULT_PROPERTIES = {"WAIT": "true", "CLUSTER": "DefaultCluster"}


class _Reader(DataSourceStreamReader):
    def __init__(self, rows: int, body_size: int, topic: str,
                 properties: Mapping[str, str] = DEFAULT_PROPERTIES) -> None:
        self.rows = rows
        self.body_size = body_size
        self.topic = topic
        self.properties = dict(properties)

    def initialOffset(self) -> dict:
        return {"batch": 0}

    def latestOffset(self) -> dict:
        return {"batch": 1}

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        if start["batch"] >= end["batch"]:
            return []
        share = self.rows // PARTITIONS
        return [InputPartition((i, share + (self.rows % PARTITIONS if i == 0 else 0))) for i in range(PARTITIONS)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa

        from rocketmq_spark.sidecar.arrow import SOURCE_SCHEMA, TIMESTAMP

        index, rows = partition.value
        n = min(BATCH_ROWS, rows)
        ids = [f"{index:08X}{i:024X}" for i in range(n)]
        ts = pa.array([1_700_000_000_000_000] * n, TIMESTAMP)
        batch = pa.RecordBatch.from_arrays([
            pa.array([self.topic] * n), pa.array(["broker-a"] * n), pa.array([index] * n, pa.int32()),
            pa.array(range(n), pa.int64()), pa.array(ids), pa.array(ids),
            pa.array([None] * n, pa.string()), pa.array([None] * n, pa.string()),
            pa.array([b"x" * self.body_size] * n, pa.binary()),
            pa.array([[("UNIQ_KEY", u), *self.properties.items()] for u in ids],
                     SOURCE_SCHEMA.field("properties").type),
            ts, ts, pa.array(["127.0.0.1:5555"] * n), pa.array(["127.0.0.1:10911"] * n),
            pa.array([0] * n, pa.int32())], schema=SOURCE_SCHEMA)
        while rows > 0:
            yield batch.slice(0, min(rows, n))
            rows -= n

    def commit(self, end: dict) -> None:
        pass


class CeilingSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "bench-python-ceiling"

    def schema(self) -> Any:
        from rocketmq_spark.spark.schema import SOURCE_SCHEMA_SPARK

        return SOURCE_SCHEMA_SPARK

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        o = self.options
        props = json.loads(o["properties"]) if "properties" in o else DEFAULT_PROPERTIES
        return _Reader(int(o.get("rows", "0")), int(o.get("bodySize", "32")), o.get("topic", "bench"), props)


def ceiling_df(spark: Any, rows: int, *, body_size: int = 32, topic: str = "bench",
               properties: Mapping[str, str] | None = None) -> Any:
    """The ceiling source's stream of ``rows`` rows; ``properties``: each row's map besides
    its UNIQ_KEY (default ``DEFAULT_PROPERTIES``; pass what the broker read stores)."""
    import sys

    from pyspark import cloudpickle  # ship this module by value: workers need not import bench/

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(CeilingSource)
    reader = (spark.readStream.format(CeilingSource.name()).option("rows", rows)
              .option("bodySize", body_size).option("topic", topic))
    if properties is not None:
        reader = reader.option("properties", json.dumps(dict(properties)))
    return reader.load()
