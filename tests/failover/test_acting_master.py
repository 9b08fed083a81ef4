"""RocketMQ 5.x slaveActingMaster (NameServer ``supportActingMaster``, brokers
``enableSlaveActingMaster``): while broker-a's master is away, the NameServer routes broker-a's
slave as brokerId 0 (the acting master) and broker-a's queues without PERM_WRITE. An
orderly query reads on through it, its locks taken there; a send to it is refused
(SERVICE_NOT_AVAILABLE, "messages are put to the slave"), a producer passes the broker
over. Once the master is back, the route names it again, the query's locks are taken on
it (the acting master's no longer count: tests/spark/test_stream_reader_logic.py shows
they are asked for before a plan made with the new route), and the query reads on: every message once, each queue in order, its offsets committed to the master.

Runs on embedded ``--join --acting-master`` brokers of its own, or on $ROCKETMQ_APACHE_DIR's
cluster when it was started with ``--namesrv-config supportActingMaster=true --broker-config
enableSlaveActingMaster=true`` (deselected on other external clusters)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

from rocketmq_spark.client.calls import request
from rocketmq_spark.errors import BrokerError, RocketMQError
from rocketmq_spark.remoting.bodies import LockBatchBody, decode_lock_ok
from rocketmq_spark.remoting.codes import Perm, RequestCode, ResponseCode
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.structs import Message
from tests.failover.conftest import MASTER, SLAVE, Replicated, _embedded, wait_for
from tests.failover.test_stream_failover import Collected, _start, failed

pytestmark = [pytest.mark.needs_replicas("kills and restarts the master of broker-a"),
              pytest.mark.needs_acting_master("asserts what 5.x slaveActingMaster routes and answers")]

QUEUES, BEFORE, AFTER = 2, 300, 50


@pytest.fixture
def acting(replicated: Replicated, tmp_path: Path) -> Iterator[Replicated]:
    """The session's cluster when it runs with acting master ($ROCKETMQ_APACHE_DIR's, started
    so: the marker deselects this test on others), else embedded brokers of this test's own
    with --acting-master (the session's embedded ones run without it)."""
    if replicated.acting_master:
        yield replicated
        return
    assert not os.environ.get("ROCKETMQ_APACHE_DIR"), "the Apache cluster runs without acting master"
    gen = _embedded(tmp_path, acting_master=True)
    try:
        yield next(gen)
    finally:
        gen.close()


@pytest.fixture
def master_back(acting: Replicated) -> Iterator[None]:
    """Whatever the test did, broker-a's master runs again after it."""
    yield
    if not acting.master_running():
        acting.restart_master()


def _broker_a(admin: Any, topic: str) -> tuple[dict[int, str], int] | None:
    """broker-a's brokerId -> address and its queues' perm, as the NameServer routes them now."""
    try:
        route = admin.route(topic, refresh=True)
    except RocketMQError:
        return None
    addrs = next((dict(b.broker_addrs) for b in route.broker_datas if b.broker_name == "broker-a"), {})
    perm = next((q.perm for q in route.queue_datas if q.broker_name == "broker-a"), 0)
    return addrs, perm


def _locked_by_other(admin: Any, address: str, topic: str, queues: list[MessageQueue]) -> bool:
    """Another client asking ``address`` for the queues' locks gets none (someone holds them)."""
    body = LockBatchBody(f"{topic}_orderly", "another-client", tuple(queues)).encode()
    try:
        answer = admin._call(address, request(RequestCode.LOCK_BATCH_MQ, None, body))
    except RocketMQError:
        return False
    return not decode_lock_ok(answer.body)


def test_an_orderly_query_reads_on_through_the_acting_master_and_locks_again_on_the_master_back(
        spark: Any, acting: Replicated, tmp_path: Path) -> None:
    admin = acting.admin
    topic = f"acting_{uuid.uuid4().hex[:8]}"
    queues = acting.topic_on_broker_a(topic, QUEUES)
    master, slave = acting.node_address(MASTER), acting.node_address(SLAVE)
    sent: dict[tuple[int, int], bytes] = {}

    def send(lo: int, hi: int) -> None:
        for q in queues:
            batch = [b"%d:%06d" % (q.queue_id, i) for i in range(lo, hi)]
            first = admin.send_batch([Message(topic, b) for b in batch], queue=q).queue_offset
            sent.update({(q.queue_id, first + i): body for i, body in enumerate(batch)})

    send(0, BEFORE)
    for q in queues:
        acting.replicated_to_slave(q, BEFORE)
    acting.kill_master()
    # the acting master: the slave's address under brokerId 0, broker-a read-only
    assert wait_for(lambda: _broker_a(admin, topic) == ({0: slave}, Perm.READ), 150,
                    "the NameServer to route the slave as broker-a's acting master")
    with pytest.raises(BrokerError) as refused:
        admin.send(Message(topic, b"refused"), queue=queues[0])
    assert refused.value.code == ResponseCode.SERVICE_NOT_AVAILABLE
    assert "messages are put to the slave" in str(refused.value)
    assert admin.send_queues(topic, keyed=True) == queues    # a key keeps its queue (and waits)

    orderly = Collected()
    query = _start(spark, acting, topic, "orderly", orderly, str(tmp_path / "ck"))
    try:
        # the orderly query advances broker-a's queues through the acting master, locked there
        wait_for(lambda: failed([query]) or orderly.count() >= BEFORE * QUEUES, 180,
                 "the orderly query to read through the acting master")
        assert not failed([query]), failed([query])
        assert _locked_by_other(admin, slave, topic, queues), "the query's locks are not on the acting master"

        acting.restart_master()
        assert wait_for(lambda: _broker_a(admin, topic) == ({0: master, 1: slave}, Perm.READ | Perm.WRITE),
                        150, "the route to name the master again")
        send(BEFORE, BEFORE + AFTER)
        wait_for(lambda: failed([query]) or orderly.count() >= (BEFORE + AFTER) * QUEUES, 180,
                 "the orderly query to read what the master took after its return")
        assert not failed([query]), failed([query])
        # its queues advanced under locks taken on the master back (asked only now: a lock
        # call of another client before the query's would take them for 60 s)
        assert _locked_by_other(admin, master, topic, queues), "the query's locks are not on the master"
        send(BEFORE + AFTER, BEFORE + AFTER + 1)      # one batch more: its plan commits the one before
        wait_for(lambda: all((admin.query_consumer_offset(f"{topic}_orderly", q) or 0) >= BEFORE + AFTER
                             for q in queues), 120, "the query's offsets on the master")
    finally:
        query.stop()

    keys = [(qid, off) for qid, off, _ in orderly.rows]
    assert len(keys) == len(set(keys)), "a message was read twice"
    got = {(qid, off): body for qid, off, body in orderly.rows}
    assert {k: sent[k] for k in got} == got and len(got) >= (BEFORE + AFTER) * QUEUES
    for q in queues:
        offsets = [off for qid, off, _ in orderly.rows if qid == q.queue_id]
        assert offsets == list(range(len(offsets))), f"queue {q.queue_id} out of order"
