"""A broker master killed (kill -9) while the sidecar reads a range from it: the read goes
on from its slave at the offset it reached, every row once and as sent; offsets for a
concurrent consumer come from the slave meanwhile; once the master is back, reads and
offsets go to it again (a real Apache cluster with ``ROCKETMQ_APACHE_DIR``, embedded brokers of
their own processes without it: conftest.py)."""

from __future__ import annotations

import logging
import uuid

import pytest

from rocketmq_spark.sidecar.client import SidecarClient
from rocketmq_spark.sidecar.server import SidecarServer
from rocketmq_spark.sidecar.service import SidecarService
from rocketmq_spark.structs import Message
from tests.failover.conftest import SLAVE, Replicated, wait_for

pytestmark = pytest.mark.needs_replicas("kills and restarts the master of broker-a")

N = 20_000


def test_a_read_goes_on_from_the_slave_when_the_master_dies(replicated: Replicated,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    topic = f"failover_read_{uuid.uuid4().hex[:8]}"
    queue = replicated.topic_on_broker_a(topic, 1)[0]
    bodies = [b"%06d:" % i + b"y" * 1000 for i in range(N)]
    for first in range(0, N, 250):
        replicated.admin.send_batch([Message(topic, b) for b in bodies[first:first + 250]], queue=queue)
    replicated.replicated_to_slave(queue, N)

    server = SidecarServer("127.0.0.1:0", service=SidecarService())
    sc = SidecarClient(server.address)
    try:
        batches = sc.pull_batches(replicated.namesrv, queue, 0, N, max_rows_per_batch=200,
                                  broker_unavailable_timeout_ms=120_000)
        offsets: list[int] = []
        got: list[bytes] = []
        with caplog.at_level(logging.INFO, logger="rocketmq_spark.sidecar"):
            for batch in batches:
                offsets.extend(batch.column("queue_offset").to_pylist())
                got.extend(batch.column("body").to_pylist())
                if len(offsets) >= 1000 and replicated.master_running():
                    replicated.kill_master()
        assert offsets == list(range(N))                  # every offset once, in order
        assert got == bodies                              # as sent
        slave = replicated.node_address(SLAVE)
        assert any(f"going on from {slave}" in m for m in caplog.messages), caplog.messages[-20:]

        # a concurrent consumer's offsets come from the slave while the master is away
        offs = sc.get_offsets(replicated.namesrv, [queue], replica_reads=True)[0]
        assert (offs.min_offset, offs.max_offset) == (0, N)
    finally:
        if not replicated.master_running():
            replicated.restart_master()
        server.stop(grace=0)

    # the master is back: new messages are read (from it) once, after the old ones
    more = [b"after-%d" % i for i in range(50)]
    replicated.admin.send_batch([Message(topic, b) for b in more], queue=queue)
    server = SidecarServer("127.0.0.1:0", service=SidecarService())
    try:
        sc = SidecarClient(server.address)
        wait_for(lambda: sc.get_offsets(replicated.namesrv, [queue])[0].max_offset == N + 50, 60,
                 "the master's max offset")
        tail = [r for b in sc.pull_batches(replicated.namesrv, queue, N, N + 50) for r in b.column("body").to_pylist()]
        assert tail == more
    finally:
        server.stop(grace=0)
