"""A failover that changes the master's address, as a 5.x controller or DLedger election
does: broker-a's master is killed (kill -9), then its former slave is broker-a's brokerId 0,
at the slave's address, on the slave's data. What clients see of an Apache election is its
route: while the master is away the NameServer lists the slave alone (brokerId 1); once
the controller has elected it, the slave registers as brokerId 0 at its own address (5.x
``ReplicasManager.changeToMaster`` re-registers with the new id; the NameServer keeps one
record per address). Embedded brokers have no controller, so the election is made by hand:
the slave process is stopped (it unregisters) and started again on its directory with
``--broker-id 0`` (it keeps its port). An orderly and a concurrent query running through
it read on from the new master without a restart, every message once, the orderly one
each queue in order, offsets committed to it; the sink's keyed and unkeyed rows written
across it are stored once, a key's rows in order. Then the old master comes back as the
new one's slave at its old address (what a controller makes of it), and reads and writes
go on to the new master. A client whose cached route still names the dead master asks the
NameServer again after its first failed lock (``MQClient._master_failed``)."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.errors import RocketMQError, TransportError
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.sharding import select_queue
from rocketmq_spark.structs import Message
from tests.failover.conftest import LAYOUT, MASTER, SLAVE, EmbeddedReplicated, _embedded, wait_for
from tests.failover.test_stream_failover import Collected, _start, failed
from tests.joined import JoinedBroker

pytestmark = pytest.mark.embedded_only("simulates a controller election on embedded --join brokers; "
                                       "the Apache clusters of scripts/apache-cluster run no controller")

QUEUES, PER_QUEUE_BEFORE, PER_QUEUE_AFTER, TAIL = 4, 100, 150, 5
AFTER = PER_QUEUE_BEFORE + PER_QUEUE_AFTER
N = QUEUES * (AFTER + 2 * TAIL)


@pytest.fixture
def master_back() -> Iterator[None]:
    """This test's own brokers (below): the shared cluster is left alone."""
    yield


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[EmbeddedReplicated]:
    """broker-a alone: a master and its slave, each a process of its own."""
    yield from _embedded(tmp_path, LAYOUT[:2])


def _route(admin: MQClient, topic: str) -> dict[int, str]:
    """broker-a's brokerId -> address as the NameServer has it now."""
    try:
        route = admin.route(topic, refresh=True)
    except RocketMQError:
        return {}
    return next((dict(b.broker_addrs) for b in route.broker_datas if b.broker_name == "broker-a"), {})


def _elect_slave(cluster: EmbeddedReplicated) -> str:
    """What an election leaves: the former slave serves as brokerId 0 at its own address."""
    slave = cluster.nodes[SLAVE]
    address = slave.addr
    slave.stop()
    elected = JoinedBroker(cluster.namesrv, "broker-a", 0, slave.data_dir, slave.extra)
    elected.log = slave.data_dir.parent / "elected.log"
    cluster.nodes[SLAVE] = elected.start()
    assert elected.addr == address, (elected.addr, address)
    return address


def _rejoin_as_slave(cluster: EmbeddedReplicated, master: str) -> JoinedBroker:
    """The killed master's directory served again, as brokerId 1 of the elected master. Its log
    is a prefix of the elected master's (everything it held was replicated before the kill),
    so it copies on from where it ends, as a controller's truncation would leave it."""
    old = cluster.nodes[MASTER]
    back = JoinedBroker(cluster.namesrv, "broker-a", 1, old.data_dir, old.extra + ("--master", master))
    back.log = old.data_dir.parent / "rejoined.log"
    back.start()
    assert back.addr == old.addr, (back.addr, old.addr)
    return back


def _bodies(admin: MQClient, queue: MessageQueue) -> list[bytes]:
    out: list[bytes] = []
    while True:
        res = admin.pull(queue, len(out), group="elected_check", max_nums=32)
        if not res.messages:
            return out
        out.extend(m.body for m in res.messages)


def _send(admin: MQClient, topic: str, queue: MessageQueue, bodies: list[bytes]) -> int:
    """Sends once the client's route names a master that takes it; the first offset."""
    def attempt() -> int | None:
        try:
            return admin.send_batch([Message(topic, b) for b in bodies], queue=queue).queue_offset + 1
        except RocketMQError:
            return None
    return wait_for(attempt, 60, f"a master of {queue} to take a send") - 1  # type: ignore[operator]


def test_queries_and_the_sink_follow_a_master_elected_at_a_new_address(spark: Any, cluster: EmbeddedReplicated,
                                                                       tmp_path: Path) -> None:
    admin = cluster.admin
    topic = f"elected_stream_{uuid.uuid4().hex[:8]}"
    queues = cluster.topic_on_broker_a(topic, QUEUES)
    sink_topic = f"elected_sink_{uuid.uuid4().hex[:8]}"
    sink_queues = cluster.topic_on_broker_a(sink_topic, 2)
    old_master = cluster.node_address(MASTER)
    sent: dict[tuple[int, int], bytes] = {}

    def send(lo: int, hi: int) -> None:
        for q in queues:
            batch = [b"%d:%06d" % (q.queue_id, i) for i in range(lo, hi)]
            first = _send(admin, topic, q, batch)
            sent.update({(q.queue_id, first + i): body for i, body in enumerate(batch)})

    send(0, PER_QUEUE_BEFORE)
    for q in queues:
        cluster.replicated_to_slave(q, PER_QUEUE_BEFORE)
    orderly, concurrent = Collected(), Collected()
    queries = [_start(spark, cluster, topic, "orderly", orderly, str(tmp_path / "ck_o")),
               _start(spark, cluster, topic, "concurrent", concurrent, str(tmp_path / "ck_c"))]
    key = "order-1"
    keyed_queue = select_queue(key, sink_queues)
    keyed = [(f"{key}:{i}", key) for i in range(60)]
    free = [(f"free-{i}", None) for i in range(40)]
    later = [(f"{key}:{i}", key) for i in range(60, 80)] + [(f"free-{i}", None) for i in range(40, 60)]
    failure: list[BaseException] = []

    def write(rows: list[tuple[str, str | None]]) -> None:
        # one partition: a key's order is a task's order
        (spark.createDataFrame(rows, "body string, sharding_key string").coalesce(1).write
         .format("rocketmq").option("nameServer", cluster.namesrv).option("topic", sink_topic)
         .option("brokerUnavailableTimeoutMs", "180000").mode("append").save())

    def write_through() -> None:    # started while broker-a has no master: it waits for one
        try:
            write(keyed + free)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failure.append(exc)

    writer = threading.Thread(target=write_through)
    try:
        wait_for(lambda: failed(queries) or (orderly.count() >= PER_QUEUE_BEFORE * QUEUES
                                             and concurrent.count() >= PER_QUEUE_BEFORE * QUEUES), 180,
                 "both queries to read the first messages")
        assert not failed(queries), failed(queries)

        # a client whose cached route names the old master (kept an hour): its first lock
        # meets the dead address, and its next request asks the NameServer again
        probe = MQClient(ClientConfig.parse(cluster.namesrv, request_timeout=10.0, route_ttl=3600.0))
        assert probe.lock_batch("elected_probe", "probe", queues) == frozenset(queues)

        cluster.kill_master()
        # during the election: the NameServer drops the dead master and lists the slave alone
        wait_for(lambda: 0 not in _route(admin, topic), 150, "the NameServer to drop the killed master")
        writer.start()
        new_master = _elect_slave(cluster)
        wait_for(lambda: _route(admin, topic) == {0: new_master}, 60, "the route to name the elected master")
        assert new_master != old_master
        try:
            with pytest.raises(TransportError):
                probe.lock_batch("elected_probe", "probe", queues)
            assert probe.lock_batch("elected_probe", "probe", queues) == frozenset(queues)
            probe.update_consumer_offset("elected_probe", queues[0], 7)
            assert admin.query_consumer_offset("elected_probe", queues[0]) == 7
        finally:
            probe.close()

        send(PER_QUEUE_BEFORE, AFTER)
        wait_for(lambda: failed(queries) or (orderly.count() >= AFTER * QUEUES and concurrent.count() >= AFTER * QUEUES),
                 240, "both queries to read the new master's messages")
        send(AFTER, AFTER + TAIL)       # one batch more: Spark commits a batch's offsets when it plans the next
        wait_for(lambda: failed(queries) or (orderly.count() >= N - QUEUES * TAIL
                                             and concurrent.count() >= N - QUEUES * TAIL), 240,
                 "both queries to read everything from the elected master")
        assert not failed(queries), failed(queries)

        # the old master comes back as a slave of the elected one at its old address (as a
        # controller makes it): a client that kept that address as the master's would now
        # send, lock and commit to a slave
        cluster.nodes[MASTER] = _rejoin_as_slave(cluster, new_master)
        wait_for(lambda: _route(admin, topic) == {0: new_master, 1: old_master}, 60,
                 "the route to name the old master as a slave")
        send(AFTER + TAIL, AFTER + 2 * TAIL)
        wait_for(lambda: failed(queries) or (orderly.count() >= N and concurrent.count() >= N), 240,
                 "both queries to read what was sent after the old master came back")
        assert not failed(queries), failed(queries)
        assert all(q.isActive for q in queries)
        # the offsets read from the elected master are committed to it
        for mode in ("orderly", "concurrent"):
            wait_for(lambda: all((admin.query_consumer_offset(f"{topic}_{mode}", q) or 0) >= AFTER + TAIL
                                 for q in queues), 60, f"the {mode} query's offsets on the elected master")
        writer.join(240)
        assert not writer.is_alive() and not failure, failure
        write(later)                # the sink goes to the elected master, not to the old address
    finally:
        for q in queries:
            q.stop()
        if writer.is_alive():
            writer.join(240)

    for name, got in (("orderly", orderly.rows), ("concurrent", concurrent.rows)):
        keys = [(qid, off) for qid, off, _ in got]
        assert len(keys) == len(set(keys)) == N, f"{name}: {len(keys)} rows, {len(set(keys))} distinct"
        assert {(qid, off): body for qid, off, body in got} == sent, f"{name}: bodies differ from what was sent"
    for qid in range(QUEUES):
        offsets = [off for q, off, _ in orderly.rows if q == qid]
        assert offsets == list(range(AFTER + 2 * TAIL)), f"orderly queue {qid} out of order"

    # the sink: each row stored once on the elected master, the key's rows in order
    stored = {q.queue_id: _bodies(admin, q) for q in sink_queues}
    everything = sorted(b for bodies in stored.values() for b in bodies)
    assert everything == sorted(r[0].encode() for r in keyed + free + later)
    assert [b for b in stored[keyed_queue.queue_id] if b.startswith(key.encode() + b":")] == \
        [r[0].encode() for r in keyed + later if r[1] == key]

