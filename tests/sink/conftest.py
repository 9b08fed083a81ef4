"""Fixtures of the sink tests: the C++ client's private home (set before any C++ client
exists). ``spark`` (the one SparkSession) and ``rocketmq`` (the cluster) come from
tests/conftest.py."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def cpp_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``HOME`` for the C++ client (its log goes under ``$HOME/logs``)."""
    from tests.cppclient import isolate_home

    return isolate_home(tmp_path_factory.mktemp("cpp-home"))
