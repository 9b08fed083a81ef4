"""The one SparkSession of a test session and the sidecar its Python workers share.

Used by the session fixtures ``sidecar_dir`` and ``spark`` of tests/conftest.py, so that
every test package (tests/spark, tests/sink, ...) gets the same local[2] session.

``ROCKETMQ_SPARK_SIDECAR_DIR`` is set in ``os.environ`` before the SparkSession starts, so
every Python worker Spark forks inherits it and finds the same auto-started sidecar, in a
private temporary directory. That sidecar is stopped by pid at the end.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

ENV_DIR = "ROCKETMQ_SPARK_SIDECAR_DIR"


@contextmanager
def sidecar_directory(d: Path) -> Iterator[Path]:
    """``d`` (mode 0700) as the sidecar directory of this process and its children."""
    d.chmod(0o700)
    old = os.environ.get(ENV_DIR)
    os.environ[ENV_DIR] = str(d)
    try:
        yield d
    finally:
        stop_sidecar(d)
        if old is None:
            os.environ.pop(ENV_DIR, None)
        else:
            os.environ[ENV_DIR] = old


def stop_sidecar(d: Path) -> None:
    """SIGTERM the sidecar listening in ``d``, if one is."""
    sock = d / "sidecar.sock"
    if not sock.exists():
        return
    from rocketmq_spark.errors import RocketMQError
    from rocketmq_spark.sidecar.client import SidecarClient

    try:
        pid = SidecarClient(f"unix:{sock}").health(timeout=2).pid
    except RocketMQError:
        return
    os.kill(pid, signal.SIGTERM)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def local_session(connect_port: int | None = None) -> Iterator[Any]:
    """A local[2] SparkSession with the test settings; stopped on exit. With
    ``connect_port`` it also serves Spark Connect there (the SparkConnectPlugin), so Spark
    Connect clients use the same JVM: one Spark per test session."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    if connect_port is not None:
        builder = (builder.config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
                   .config("spark.connect.grpc.binding.address", "127.0.0.1")
                   .config("spark.connect.grpc.binding.port", str(connect_port)))
    session = (builder.master("local[2]").appName("rocketmq-spark-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.python.worker.reuse", "true")
               .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
               .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=WARN")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
