"""The run of the broker-failover issue (conftest.py: a real Apache cluster or embedded brokers):
messages on a topic of ``broker-a`` (master + slave), an orderly and a concurrent query
reading them, the master killed with kill -9 once both have read some, restarted later.
Neither query fails; the concurrent one reads on from the slave while the master is away;
the orderly one holds its queues (their locks live on the master) and goes on once the
master is back (with 5.x slaveActingMaster it reads on too, its locks on the slave that
acts as the master); each reads every message once, bodies as sent, the orderly one each queue
in order."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

from rocketmq_spark.structs import Message
from tests.failover.conftest import Replicated, wait_for
from tests.streaming.streams import source

pytestmark = pytest.mark.needs_replicas("kills and restarts the master of broker-a under two queries")

N, QUEUES = 8_000, 4
FIRST = 1_000            # sent before the queries start (on pyspark < 4.2 their first batch reads it whole)
PER_TRIGGER = 500


class Collected:
    def __init__(self) -> None:
        self.rows: list[tuple[int, int, bytes]] = []
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        got = [(r.queue_id, r.queue_offset, bytes(r.body)) for r in df.select("queue_id", "queue_offset", "body").collect()]
        with self.lock:
            self.rows.extend(got)

    def count(self) -> int:
        with self.lock:
            return len(self.rows)


def _start(spark: Any, replicated: Replicated, topic: str, mode: str, sink: Collected, checkpoint: str) -> Any:
    df = source(spark, replicated.namesrv, topic, f"{topic}_{mode}", consumeMode=mode,
                startingOffsets="earliest", maxMessagesPerTrigger=PER_TRIGGER, queueRefreshIntervalMs=1000)
    return (df.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint)
            .trigger(processingTime="500 milliseconds").start())


def test_orderly_and_concurrent_queries_through_a_master_kill_and_restart(spark: Any, replicated: Replicated,
                                                                         tmp_path: Any) -> None:
    topic = f"failover_stream_{uuid.uuid4().hex[:8]}"
    queues = replicated.topic_on_broker_a(topic, QUEUES)
    sent: dict[tuple[int, int], bytes] = {}
    per_queue = N // QUEUES

    def send(lo: int, hi: int) -> None:                 # each queue's messages lo..hi-1
        for q in queues:
            for first in range(lo, hi, 250):
                batch = [b"%d:%06d:" % (q.queue_id, i) + b"z" * 200 for i in range(first, min(first + 250, hi))]
                result = replicated.admin.send_batch([Message(topic, b) for b in batch], queue=q)
                for i, body in enumerate(batch):      # a fresh topic: the batch is stored in a row
                    sent[(q.queue_id, result.queue_offset + i)] = body

    send(0, FIRST // QUEUES)
    orderly, concurrent = Collected(), Collected()
    queries = [_start(spark, replicated, topic, "orderly", orderly, str(tmp_path / "ck_o")),
               _start(spark, replicated, topic, "concurrent", concurrent, str(tmp_path / "ck_c"))]
    try:
        wait_for(lambda: failed(queries) or (orderly.count() >= FIRST and concurrent.count() >= FIRST), 180,
                 "both queries to read the first messages")
        send(FIRST // QUEUES, per_queue)
        for q in queues:
            replicated.replicated_to_slave(q, per_queue)
        wait_for(lambda: failed(queries) or (orderly.count() > FIRST and concurrent.count() > FIRST), 180,
                 "both queries to read some of the rest")
        assert not failed(queries), failed(queries)
        replicated.kill_master()
        down_at = time.monotonic()
        # the concurrent query reads on from the slave, which holds every message
        wait_for(lambda: failed(queries) or concurrent.count() >= N, 180, "the concurrent query to read all from the slave")
        assert not failed(queries), failed(queries)
        if replicated.acting_master:
            # 5.x slaveActingMaster: the slave is routed as the master; the orderly query
            # locks its queues there and reads on (tests/failover/test_acting_master.py)
            wait_for(lambda: failed(queries) or orderly.count() >= N, 180,
                     "the orderly query to read all through the acting master")
        else:
            held = orderly.count()
            assert held < N, "the orderly query read on without its master"
        replicated.restart_master()
        back_after = time.monotonic() - down_at
        wait_for(lambda: failed(queries) or orderly.count() >= N, 240, "the orderly query to finish once the master is back")
        assert not failed(queries), failed(queries)
        assert all(q.isActive for q in queries)
    finally:
        for q in queries:
            q.stop()

    for name, got in (("orderly", orderly.rows), ("concurrent", concurrent.rows)):
        keys = [(qid, off) for qid, off, _ in got]
        assert len(keys) == len(set(keys)) == N, f"{name}: {len(keys)} rows, {len(set(keys))} distinct"
        assert {(qid, off): body for qid, off, body in got} == sent, f"{name}: bodies differ from what was sent"
    for qid in range(QUEUES):
        offsets = [off for q, off, _ in orderly.rows if q == qid]
        assert offsets == list(range(per_queue)), f"orderly queue {qid} out of order"
    assert back_after > 0


def failed(queries: list[Any]) -> str | None:
    for q in queries:
        if q.exception() is not None:
            return str(q.exception())
    return None
