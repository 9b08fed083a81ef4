"""A broker that goes away while the sidecar reads a range from it, and comes back: the read
waits and goes on where it was (``broker_unavailable_timeout_ms``), every row once, in order,
through the real gRPC sidecar; with no wait allowed, the read fails. A private embedded
cluster whose only broker is stopped (its port refuses connections) and started again on
the same port and data."""

from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from typing import Iterator

import pyarrow as pa
import pytest

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.errors import TransportError
from rocketmq_spark.sidecar.client import SidecarClient
from rocketmq_spark.sidecar.errors import SidecarError
from rocketmq_spark.sidecar.server import SidecarServer
from rocketmq_spark.sidecar.service import SidecarService
from rocketmq_spark.structs import Message
from tests.sidecar.test_e2e_embedded import wait_until

pytestmark = pytest.mark.embedded_only("stops and restarts a broker of its own")

TOPIC = "restart_topic"
N = 12_000
BODY = 2048


@pytest.fixture
def cluster(tmp_path) -> Iterator[EmbeddedCluster]:  # type: ignore[no-untyped-def]
    with EmbeddedCluster(tmp_path / "rmq", topics={TOPIC: 1}, flush="async") as c:
        yield c


def _fill(mq: MQClient) -> None:
    queue = mq.publish_queues(TOPIC, refresh=True)[0]
    for first in range(0, N, 200):
        mq.send_batch([Message(TOPIC, b"%06d:" % i + b"x" * BODY) for i in range(first, first + 200)], queue=queue)


@contextmanager
def reading(cluster: EmbeddedCluster, wait_ms: int) -> Iterator[Iterator[pa.RecordBatch]]:
    """The topic filled, and a real sidecar's read of its queue's whole range (waiting up to
    ``wait_ms`` for a broker that goes away)."""
    mq = MQClient(ClientConfig.parse(cluster.namesrv_addr))
    server = SidecarServer("127.0.0.1:0", service=SidecarService())
    try:
        _fill(mq)
        queue = mq.subscribe_queues(TOPIC)[0]
        yield SidecarClient(server.address).pull_batches(
            cluster.namesrv_addr, queue, 0, N, max_rows_per_batch=100, broker_unavailable_timeout_ms=wait_ms)
    finally:
        server.stop(grace=0)
        mq.close()


def test_a_read_goes_on_after_its_broker_restarts(cluster: EmbeddedCluster, caplog: pytest.LogCaptureFixture) -> None:
    broker = cluster.brokers["broker-a"]
    port = broker.port
    with reading(cluster, 60_000) as batches:
        seen: list[int] = []
        restarted = threading.Event()

        def restart_when_noticed() -> None:
            wait_until(lambda: any("no answer at offset" in r.getMessage() for r in caplog.records), 30)
            broker.start()
            restarted.set()
        with caplog.at_level(logging.WARNING, logger="rocketmq_spark.sidecar.pull"):
            for batch in batches:
                seen.extend(batch.column("queue_offset").to_pylist())
                if broker.started and not restarted.is_set() and len(seen) >= 100:
                    broker.stop()                   # mid-range: the sidecar has read a part only
                    threading.Thread(target=restart_when_noticed, daemon=True).start()
        assert restarted.is_set(), "the read never noticed the broker had gone"
        assert broker.port == port
        assert seen == list(range(N))               # every offset once, in order
        assert any("no answer at offset" in m for m in caplog.messages)


def test_without_a_wait_the_read_fails_with_the_transport_error(cluster: EmbeddedCluster) -> None:
    broker = cluster.brokers["broker-a"]
    with reading(cluster, 0) as batches:
        with pytest.raises((SidecarError, TransportError)) as info:
            for n, _ in enumerate(batches):
                if n == 1:
                    broker.stop()
        assert "cannot connect" in str(info.value) or "closed" in str(info.value) or "failed" in str(info.value)
        broker.start()
