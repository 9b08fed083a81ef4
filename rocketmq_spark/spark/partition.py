"""The input partition: one queue's half-open offset range, plain data.

Spark pickles partitions from the driver to the executors; the executor side
(``reader.read_partition``) opens what it needs itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.spark.planner import QueueRange

__all__ = ["RocketMQPartition"]


@dataclass(frozen=True)
class RocketMQPartition(InputPartition):
    topic: str
    broker: str
    queue_id: int
    start: int          # first offset to read
    end: int            # first offset not to read

    @property
    def queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker, self.queue_id)

    @classmethod
    def of(cls, r: QueueRange) -> "RocketMQPartition":
        return cls(r.queue.topic, r.queue.broker_name, r.queue.queue_id, r.start, r.end)
