"""A RocketMQ-compatible NameServer + Broker(s) in one process, for laptops and tests.

It speaks the remoting protocol as Apache RocketMQ 4.9.8 does (the C++ client and this
project's client both use it) and keeps its data on disk: an append-only commit log,
per-queue indexes, consumer offsets and topic configs, all surviving a restart or
``kill -9``. Start it with ``rocketmq-spark broker`` or ``EmbeddedCluster``.
"""

from rocketmq_spark.embedded.broker import Broker
from rocketmq_spark.embedded.clock import FakeClock, SystemClock
from rocketmq_spark.embedded.cluster import EmbeddedCluster

__all__ = ["Broker", "EmbeddedCluster", "FakeClock", "SystemClock"]
