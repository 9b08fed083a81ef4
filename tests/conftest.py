"""Session-wide fixtures shared by every test package."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.cluster import ClusterHandle, open_cluster


@pytest.fixture(scope="session")
def rocketmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterHandle]:
    """The cluster integration tests talk to (embedded, or $ROCKETMQ_NAMESRV)."""
    with open_cluster(tmp_path_factory.mktemp("rocketmq")) as cluster:
        yield cluster
