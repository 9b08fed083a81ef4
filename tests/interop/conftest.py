"""Fixtures for the C++ client interop tests.

The C++ client (PyPI ``rocketmq``, librocketmq) talks to the cluster of the session-wide
``rocketmq`` fixture over TCP: the embedded cluster by default, or the cluster at
``$ROCKETMQ_NAMESRV`` (e.g. a real Apache RocketMQ 4.9.8) with the same tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.cluster import ClusterHandle
from tests.cppclient import CppProducer, isolate_home
from tests.interop.helpers import warm_up


@pytest.fixture(scope="session", autouse=True)
def cpp_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``HOME`` for the C++ client (its log and broadcasting offsets), set before any client exists."""
    return isolate_home(tmp_path_factory.mktemp("cpp-home"))


@pytest.fixture(scope="session")
def cpp_producer(rocketmq: ClusterHandle, cpp_home: Path) -> Iterator[CppProducer]:
    """One started C++ producer (its own group) shared by every test, connected to every broker.

    Right after start, the producer's first heartbeat (~10 ms after its first route is known)
    connects to the brokers while the first send does the same; the send waits only 3 ms for
    that connection's lock ("GetTransport ... get timed_mutex timeout" in the C++ log) and fails
    all its attempts with "No route info of this topic". Warm-up sends, one per queue of a
    topic on every broker and repeated until they pass, get past that before any test sends.
    """
    with CppProducer(rocketmq.namesrv_addr, rocketmq.unique("cpp_pg"), send_timeout_ms=5000) as producer:
        warm_up(producer, rocketmq)
        yield producer

