"""Fixtures of the Spark tests: exactly one local[2] SparkSession per test session, an
embedded RocketMQ cluster, and an auto-started sidecar in a private temporary directory.

``ROCKETMQ_SPARK_SIDECAR_DIR`` is set in ``os.environ`` before the SparkSession starts, so
every Python worker Spark forks inherits it and finds the same sidecar. The sidecar the
tests started is stopped by pid at the end.
"""

from __future__ import annotations

import os
import signal
import sys
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest

ENV_DIR = "ROCKETMQ_SPARK_SIDECAR_DIR"


@pytest.fixture(scope="session")
def sidecar_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    d = tmp_path_factory.mktemp("sidecar")
    d.chmod(0o700)
    old = os.environ.get(ENV_DIR)
    os.environ[ENV_DIR] = str(d)
    yield d
    _stop_sidecar(d)
    if old is None:
        os.environ.pop(ENV_DIR, None)
    else:
        os.environ[ENV_DIR] = old


def _stop_sidecar(d: Path) -> None:
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


@pytest.fixture(scope="session")
def spark(sidecar_dir: Path):  # type: ignore[no-untyped-def]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("rocketmq-spark-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.python.worker.reuse", "true")
               .config("spark.sql.streaming.stopGracefullyOnShutdown", "true")
               .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=WARN")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from rocketmq_spark.embedded import EmbeddedCluster

    with EmbeddedCluster(tmp_path_factory.mktemp("rocketmq"), namesrv_port=0) as c:
        yield c


@pytest.fixture(scope="session")
def mq(cluster):  # type: ignore[no-untyped-def]
    from rocketmq_spark.client import ClientConfig, MQClient

    client = MQClient(ClientConfig.parse(cluster.namesrv_addr))
    yield client
    client.close()


@pytest.fixture()
def names(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Unique topic/group names per test (RocketMQ name rules: letters, digits, - and _)."""
    tag = uuid.uuid4().hex[:8]
    base = "".join(ch if ch.isalnum() else "_" for ch in request.node.name)[:40]
    return lambda kind: f"{kind}_{base}_{tag}"
