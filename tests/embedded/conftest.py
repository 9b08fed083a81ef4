"""Fixtures: an embedded cluster on port 0 in a temporary directory, raw connections."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Iterator

import pytest

from rocketmq_spark.embedded import EmbeddedCluster
from tests.embedded.wire import Wire

_names = itertools.count()


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path / "data", namesrv_port=0, topics={"T": 4}) as c:
        yield c


@pytest.fixture()
def broker_addr(cluster: EmbeddedCluster) -> str:
    return cluster.broker_addrs["broker-a"]


@pytest.fixture()
def wire(broker_addr: str) -> Iterator[Wire]:
    with Wire(broker_addr) as w:
        yield w


@pytest.fixture()
def ns(cluster: EmbeddedCluster) -> Iterator[Wire]:
    with Wire(cluster.namesrv_addr) as w:
        yield w


@pytest.fixture()
def name() -> "itertools.count[int]":
    """A source of unique names: ``f"t{next(name)}"``."""
    return _names
