"""The PySpark DataSource named ``rocketmq`` (streaming and batch reads).

``RocketMQDataSource`` is found by Spark through ``pyspark_rocketmq.DefaultSource`` when
the package is installed; :func:`register` does it explicitly (e.g. when the package is
only on the driver's ``sys.path``). ``send_back`` hands failed rows back to RocketMQ from
``foreachBatch`` (concurrent mode's RECONSUME_LATER).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocketmq_spark.spark.source import RocketMQDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["RocketMQDataSource", "register", "send_back"]


def register(spark: "SparkSession") -> None:
    """Register ``format("rocketmq")`` in ``spark`` explicitly."""
    spark.dataSource.register(RocketMQDataSource)


def __getattr__(name: str):  # noqa: ANN202 - lazy: retry pulls in the sidecar client
    if name == "send_back":
        from rocketmq_spark.spark.retry import send_back

        return send_back
    raise AttributeError(name)
