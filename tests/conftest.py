"""Session-wide fixtures shared by every test package.

``spark`` is the only SparkSession of a test session (Spark allows one per process); it
is started only when a test asks for it, after ``sidecar_dir`` has pointed
``ROCKETMQ_SPARK_SIDECAR_DIR`` at a private directory (see tests/spark_session.py).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.cluster import ClusterHandle, open_cluster


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cluster-tests-only", action="store_true",
                     help="run only the tests that talk to the session's cluster (the rocketmq "
                          "fixture): what a run against $ROCKETMQ_NAMESRV adds to the embedded run")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Against an external cluster ($ROCKETMQ_NAMESRV), a test marked ``embedded_only`` is
    skipped with its marker's reason; a test marked ``needs_replicas`` (tests/failover) runs
    against $ROCKETMQ_APACHE_DIR's real cluster with a slave when it is set, against embedded
    brokers with a slave of their own processes without an external cluster, and is
    deselected against an external cluster without $ROCKETMQ_APACHE_DIR; a test marked
    ``needs_acting_master`` also when $ROCKETMQ_APACHE_DIR's cluster runs without 5.x
    slaveActingMaster (its cluster.json says); with --cluster-tests-only, the tests
    that never touch the session's cluster are deselected (they prove nothing new there)."""
    external = bool(os.environ.get("ROCKETMQ_NAMESRV"))
    replicas = bool(os.environ.get("ROCKETMQ_APACHE_DIR"))
    keep, drop = [], []
    for item in items:
        if item.get_closest_marker("needs_replicas") is not None and external and not replicas:
            drop.append(item)       # tests/failover: an external cluster without a slave to read from
            continue
        if item.get_closest_marker("needs_acting_master") is not None and external and not _apache_acting():
            drop.append(item)       # the cluster's NameServer and brokers run without slaveActingMaster
            continue
        marker = item.get_closest_marker("embedded_only")
        if external and marker is not None:
            item.add_marker(pytest.mark.skip(reason=f"embedded cluster only: {marker.args[0]}"))
        talks = {"rocketmq", "replicated"} & set(getattr(item, "fixturenames", ()))
        if config.getoption("--cluster-tests-only") and (marker is not None or not talks):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _apache_acting() -> bool:
    """$ROCKETMQ_APACHE_DIR's cluster runs 5.x slaveActingMaster (as its cluster.json records)."""
    directory = os.environ.get("ROCKETMQ_APACHE_DIR")
    if not directory:
        return False
    from pathlib import Path

    from tests.apache.cluster import ClusterState

    return ClusterState.load(Path(directory).resolve()).acting_master


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """A C++ client left running (a test that failed before its shutdown) makes the C++
    library's exit handlers wait for ever on its threads: end the process at once then,
    with pytest's exit status, after everything else has been torn down and reported."""
    import sys

    cpp = sys.modules.get("tests.cppclient")
    if cpp is None or not cpp._Client.running:
        return
    names = ", ".join(sorted(c.instance for c in cpp._Client.running))
    print(f"\nC++ clients still running at exit ({names}): exiting without the C++ library's "
          "exit handlers", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(int(getattr(config, "_rocketmq_exitstatus", 1)))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config._rocketmq_exitstatus = int(exitstatus)  # type: ignore[attr-defined]


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
def connect_port() -> int:
    from tests.spark_session import free_port

    return free_port()


@pytest.fixture(scope="session")
def spark(sidecar_dir: Path, connect_port: int) -> Iterator[Any]:
    """The one local[2] SparkSession of the test session (serving Spark Connect too)."""
    from tests.spark_session import local_session

    with local_session(connect_port) as session:
        yield session


@pytest.fixture(scope="session")
def spark_connect(spark: Any, connect_port: int) -> Iterator[Any]:
    """A Spark Connect session (``SparkSession.builder.remote``) on the test session's Spark.
    The Connect client class is used directly: pyspark's builder refuses a remote session
    in a process that also holds a classic one."""
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    session = RemoteSparkSession.builder.remote(f"sc://127.0.0.1:{connect_port}").getOrCreate()
    try:
        yield session
    finally:
        session.stop()
