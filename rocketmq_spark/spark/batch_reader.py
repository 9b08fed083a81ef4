"""Batch reads (``spark.read.format("rocketmq")``): one bounded range per queue.

``startingOffsets`` (default ``earliest``; also ``group``, JSON, or ``startingTimestamp``)
and ``endingOffsets`` (default ``latest``, or JSON) are resolved when Spark plans the read.
Orderly mode gives one partition per queue, rows in offset order; concurrent mode splits
ranges to reach ``minPartitions`` and reads ``%RETRY%<group>`` too. A batch read takes no
locks and commits nothing.
"""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from rocketmq_spark.errors import ConfigError
from rocketmq_spark.spark.offset_reader import OffsetReader, queue_name
from rocketmq_spark.spark.offsets import SpecificOffsets
from rocketmq_spark.spark.options import SourceOptions
from rocketmq_spark.spark.partition import RocketMQPartition
from rocketmq_spark.spark.planner import plan_partitions, ranges
from rocketmq_spark.spark.reader import read_partition

__all__ = ["RocketMQBatchReader"]


class RocketMQBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self) -> list[InputPartition]:  # type: ignore[override]
        r = OffsetReader(self.opts)
        queues = r.queues(force=True)
        start = r.resolve_start(self.opts.starting, queues)
        end = r.resolve_end(self.opts.ending, queues)
        if isinstance(self.opts.ending, SpecificOffsets):
            for q in sorted(self.opts.ending.offsets):
                if end[q] < start[q]:
                    raise ConfigError(f"option 'endingOffsets': {queue_name(q)} ends at {end[q]}, "
                                      f"before its starting offset {start[q]}")
        todo = ranges(start, {q: max(end[q], start[q]) for q in queues})
        parts = plan_partitions(todo, orderly=self.opts.orderly,
                                min_partitions=self.opts.min_partitions)
        return [RocketMQPartition.of(p) for p in parts]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        return read_partition(self.opts, partition)
