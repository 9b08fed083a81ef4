"""The transaction log reads back what it just appended, on a broker whose pulls lag its
sends as Apache's do (SEND_OK once the record is in the commit log; the consume queue is
built a moment later): the embedded cluster with ``dispatch_lag_ms``."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.errors import RequestTimeout
from rocketmq_spark.remoting.codes import TransactionState
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.sidecar.model import TxnRef
from rocketmq_spark.sidecar.transactions import Transactions
from rocketmq_spark.sidecar.txnlog import TxnLog
from rocketmq_spark.structs import HalfMessage, Message

pytestmark = pytest.mark.embedded_only("a broker whose pulls lag its sends by a set time (dispatch_lag_ms)")

LAG_MS = 400
LOG = "txn_log_lagging"


@pytest.fixture(scope="module")
def lagging(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MQClient]:
    d: Path = tmp_path_factory.mktemp("lagging")
    with EmbeddedCluster(d, brokers=2, namesrv_port=0, topics={LOG: 1, "out": 2}, dispatch_lag_ms=LAG_MS) as c:
        with MQClient(ClientConfig.parse(c.namesrv_addr)) as client:
            yield client


def test_the_lagging_broker_hides_a_record_just_sent(lagging: MQClient) -> None:
    """The premise of the tests below: right after SEND_OK the record is not readable."""
    q = MessageQueue("out", "broker-a", 0)
    before = lagging.max_offset(q)
    result = lagging.send(Message("out", b"x"), queue=q)
    assert result.queue_offset == before
    assert lagging.max_offset(q) == before            # stored, not yet in the consume queue
    assert len(lagging.pull(q, before, group="g").messages) == 0


def test_a_decision_is_read_back_through_its_own_offset(lagging: MQClient) -> None:
    txlog = TxnLog(lagging, LOG)
    ours = txlog.append_decision("id-a", 7, "e1", [(0, 0)], [], {}, "pg")
    assert 7 not in txlog.read("id-a")                # a plain read can miss it ...
    decisions = txlog.read("id-a", through=ours)      # ... reading through it cannot
    assert decisions[7].epoch == "e1" and decisions[7].tasks == frozenset({(0, 0)})


def test_a_commit_decides_its_batch_on_a_lagging_broker(lagging: MQClient) -> None:
    """Transactions.commit appends the decision and reads it back at once: on a broker whose
    consume queue lags, it failed with KeyError (the decision not read yet)."""
    outcome = Transactions().commit(lagging, "pg", TxnRef(LOG, "id-b", 3, "e9"), [(0, 0)], [])
    assert outcome.decided_epoch == "e9"
    assert TxnLog(lagging, LOG).read("id-b")[3].epoch == "e9"


def test_a_record_that_never_becomes_readable_times_out_naming_it(lagging: MQClient) -> None:
    txlog = TxnLog(lagging, LOG)
    ours = txlog.append_decision("id-c", 1, "e1", [(0, 0)], [], {}, "pg")
    with pytest.raises(RequestTimeout, match=f"{LOG}/broker-a/0 offset {ours.queue_offset} was not readable"):
        txlog.read("id-c", through=ours, timeout=LAG_MS / 4000)


def test_wait_dispatched_returns_once_pulls_see_every_answered_write(lagging: MQClient) -> None:
    q = MessageQueue("out", "broker-b", 1)
    before = lagging.max_offset(q)
    for i in range(5):
        lagging.send(Message("out", f"w{i}".encode()), queue=q)
    addr = lagging.master_addr("out", "broker-b")
    assert int(lagging.broker_runtime_info(addr)["dispatchBehindBytes"]) > 0
    lagging.wait_dispatched(addr, timeout=10)
    assert lagging.max_offset(q) == before + 5


def test_finishing_a_committed_batch_on_a_lagging_broker_commits_nothing_twice(lagging: MQClient) -> None:
    """A decided batch whose commits were all answered, finished again at once (a retried
    commit call): the copies are in the commit log but not yet in the queue; looking there
    too early would commit every half message a second time."""
    q = MessageQueue("out", "broker-a", 1)
    halves = [HalfMessage.of(lagging.send_async(Message("out", f"h{i}".encode()), queue=q,
                                                producer_group="pg", transactional=True).result())
              for i in range(4)]
    lagging.wait_dispatched(lagging.master_addr("out", "broker-a"), timeout=10)
    start = lagging.max_offset(q)
    txns = Transactions(sleep=lambda s: None)
    txlog = txns.log_of(lagging, LOG)
    ours = txlog.append_decision("id-d", 1, "e1", [(0, 0)], halves, {q: start}, "pg")
    decision = txlog.read("id-d", through=ours)[1]
    assert txns.end_all(lagging, "pg", decision.halves, TransactionState.COMMIT) == 4
    assert txns._finish(lagging, "pg", txlog, decision, "id-d") == 0
    lagging.wait_dispatched(lagging.master_addr("out", "broker-a"), timeout=10)
    bodies = [m.payload() for m in lagging.pull(q, start, group="g").messages]
    assert bodies == [f"h{i}".encode() for i in range(4)]
