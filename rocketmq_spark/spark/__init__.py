"""The PySpark DataSource named ``rocketmq`` (streaming and batch reads).

``RocketMQDataSource`` is found by Spark through ``pyspark_rocketmq.DefaultSource`` when
the package is installed; :func:`register` does it explicitly (e.g. when the package is
only on the driver's ``sys.path``), and registers the class whose batch reads take Spark's
filters when the session has ``spark.sql.python.filterPushdown.enabled`` on. ``send_back`` hands failed rows back to RocketMQ from
``foreachBatch`` (concurrent mode's RECONSUME_LATER).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rocketmq_spark.spark import features
from rocketmq_spark.spark.source import PUSHDOWN_CONF, RocketMQDataSource, RocketMQPushdownDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["RocketMQDataSource", "RocketMQPushdownDataSource", "pushdown_enabled", "register", "send_back"]


def register(spark: "SparkSession") -> None:
    """Register ``format("rocketmq")`` in ``spark`` explicitly: with filter push-down for
    batch reads when this pyspark has it and ``spark.sql.python.filterPushdown.enabled`` is
    on now (call it again after changing that setting; a reader that takes filters fails
    every read while the setting is off)."""
    cls = RocketMQPushdownDataSource if pushdown_enabled(spark) else RocketMQDataSource
    try:
        spark.dataSource.register(cls)
    except Exception as exc:
        # pyspark 4.0 does not let a registration replace a source found by name; the one
        # found is RocketMQDataSource itself (pyspark 4.1+ replaces it)
        if cls is RocketMQDataSource and _condition(exc) == "DATA_SOURCE_ALREADY_EXISTS":
            return
        raise


def _condition(exc: BaseException) -> str | None:
    get = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    return get() if callable(get) else None


def pushdown_enabled(spark: "SparkSession") -> bool:
    """Whether Spark hands batch readers their filters in ``spark`` (pyspark 4.1+, setting on)."""
    if not features.FILTER_PUSHDOWN:
        return False
    return str(spark.conf.get(PUSHDOWN_CONF, "false")).strip().lower() == "true"


def __getattr__(name: str):  # noqa: ANN202 - lazy: retry pulls in the sidecar client
    if name == "send_back":
        from rocketmq_spark.spark.retry import send_back

        return send_back
    raise AttributeError(name)
