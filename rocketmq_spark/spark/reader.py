"""Executor side: read one partition as Arrow record batches, straight from the sidecar.

``read()`` of the stream and batch readers lands here. The sidecar pulls the range from
the broker, re-checks tags, and streams ``SOURCE_SCHEMA`` record batches; they are handed
to Spark as they arrive, with no per-row Python. Rows read from ``%RETRY%<group>`` carry
their original topic (the sidecar restores it).
"""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from rocketmq_spark.sidecar.errors import SidecarUnavailable
from rocketmq_spark.spark import link
from rocketmq_spark.spark.options import SourceOptions
from rocketmq_spark.spark.partition import RocketMQPartition

__all__ = ["read_partition"]


def read_partition(opts: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, RocketMQPartition) or partition.end <= partition.start:
        return iter(())   # Spark plans one empty InputPartition(None) when there is nothing
    return _batches(opts, partition)


def _batches(opts: SourceOptions, p: RocketMQPartition) -> Iterator[pa.RecordBatch]:
    retry = opts.reads_retry_topic and p.topic == opts.retry_topic
    cluster = link.cluster_of(opts)
    for attempt in (1, 2):
        sent = False
        try:
            batches = link.client(opts.sidecar).pull_batches(
                cluster, p.queue, p.start, p.end,
                consumer_group=opts.consumer_group,
                # RocketMQ consumers subscribe to their retry topic with "*"
                sub_expression="*" if retry else opts.sub_expression,
                expression_type="TAG" if retry else opts.sub_expression_type,
                pull_batch_size=opts.pull_batch_size,
                max_rows_per_batch=opts.arrow_batch_rows,
                fail_on_data_loss=opts.fail_on_data_loss,
                restore_retry_topic_of=opts.consumer_group if retry else None,
                broker_unavailable_timeout_ms=opts.broker_unavailable_ms)
            for batch in batches:
                if batch.num_rows:
                    sent = True
                    yield batch
            return
        except SidecarUnavailable:
            # an idle auto sidecar may have exited: reconnect (and respawn) once, but never
            # after rows went out, as Spark would see them twice
            if sent or attempt == 2:
                raise
            link.forget(opts.sidecar)
