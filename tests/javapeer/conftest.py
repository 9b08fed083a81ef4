"""Fixtures of the Java-peer tests: ``java``, RocketMQ's own Java client (remoting) of each
release in ``tests.java.peer.VERSIONS``, compiled once per session (tests/java/peer.py), and
the session's cluster and Spark from tests/conftest.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.java.peer import VERSIONS, JavaPeer


@pytest.fixture(scope="session")
def java_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("javapeer")


@pytest.fixture(scope="session", params=VERSIONS, ids=[f"java-client-{v}" for v in VERSIONS])
def java(request: pytest.FixtureRequest, java_workdir: Path) -> JavaPeer:
    return JavaPeer(request.param, java_workdir)


@pytest.fixture(scope="session")
def java5(java_workdir: Path) -> JavaPeer:
    """The newest 5.x client, for what only 5.x clients do (compressType LZ4 / ZSTD)."""
    return JavaPeer(next(v for v in VERSIONS if v.startswith("5.")), java_workdir)
