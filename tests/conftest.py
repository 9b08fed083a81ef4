"""Session-wide fixtures shared by every test package.

``spark`` is the only SparkSession of a test session (Spark allows one per process); it
is started only when a test asks for it, after ``sidecar_dir`` has pointed
``ROCKETMQ_SPARK_SIDECAR_DIR`` at a private directory (see tests/spark_session.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.cluster import ClusterHandle, open_cluster


@pytest.fixture(scope="session")
def rocketmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    """The cluster integration tests talk to (embedded, or $ROCKETMQ_NAMESRV)."""
    with open_cluster(tmp_path_factory.mktemp("rocketmq")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def sidecar_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The auto-started sidecar's directory, shared by every Spark worker of the session."""
    from tests.spark_session import sidecar_directory

    with sidecar_directory(tmp_path_factory.mktemp("sidecar")) as d:
        yield d


@pytest.fixture(scope="session")
def spark(sidecar_dir: Path) -> Iterator[Any]:
    """The one local[2] SparkSession of the test session."""
    from tests.spark_session import local_session

    with local_session() as session:
        yield session
