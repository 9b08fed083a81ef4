"""Makes ``format("rocketmq")`` work with no registration call.

Spark 4 looks for Python data sources once per JVM, on the first data-source call: a
Python worker (``pyspark.sql.worker.lookup_data_sources``, run by ``PYSPARK_PYTHON``)
scans ``pkgutil.iter_modules()`` for top-level modules named ``pyspark_*`` and registers
the ``DefaultSource`` of each under ``DefaultSource.name()``. There is no entry point: the
module name is the convention. A regular install of rocketmq-spark puts this package in
``site-packages``, where that scan finds it.

An editable install (``pip install -e``) in setuptools' default mode maps packages with an
import hook that ``pkgutil.iter_modules`` does not see; there the source is found only when
Spark's working directory is the repository root (a worker's ``sys.path`` starts with its
working directory). ``pip install -e . --config-settings editable_mode=compat`` puts the
repository on ``sys.path`` instead, and discovery works from anywhere. Where neither
applies, ``rocketmq_spark.spark.register(spark)`` registers the source explicitly.
"""

from rocketmq_spark.spark.source import RocketMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
