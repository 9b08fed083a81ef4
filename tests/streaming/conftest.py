"""Fixtures of the streaming proofs.

The one in-process SparkSession (``spark``), its sidecar directory (``sidecar_dir``) and
the cluster (``rocketmq``) are session fixtures of tests/conftest.py. Tests that kill a
driver run it as a subprocess with a SparkSession of its own (``streams.DriverProcess``).
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def cpp_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The C++ client logs under $HOME: keep it in a temporary directory."""
    from tests.cppclient import isolate_home

    return isolate_home(tmp_path_factory.mktemp("cpp-home"))
