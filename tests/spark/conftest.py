"""Fixtures of the Spark tests: the session's RocketMQ cluster, a client on it and unique
names. The cluster (``rocketmq``: embedded, or the one at ``$ROCKETMQ_NAMESRV``), the one
local[2] SparkSession (``spark``) and the auto-started sidecar in a private temporary
directory (``sidecar_dir``) are session fixtures of tests/conftest.py, shared with the
other Spark test packages (see tests/spark_session.py).
"""

from __future__ import annotations

import uuid
from typing import Callable

import pytest

from tests.cluster import ClusterHandle
from tests.spark_session import ENV_DIR  # noqa: F401 - where other conftests look for it


@pytest.fixture(scope="session")
def cluster(rocketmq: ClusterHandle) -> ClusterHandle:
    return rocketmq


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
