"""Pure logic of exactly-once writes: half-message tags, the transaction log's records and
how they fold, check-back answers from a decision, and END_TRANSACTION ordering."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rocketmq_spark.errors import BrokerError, ConfigError, TransportError
from rocketmq_spark.remoting.codes import TransactionState
from rocketmq_spark.remoting.command import RemotingCommand
from rocketmq_spark.remoting.headers import CheckTransactionStateRequestHeader
from rocketmq_spark.remoting.message import PROP_PRODUCER_GROUP, PROP_UNIQ_KEY, MessageExt, encode_message
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.sidecar.model import TAG_PROPERTY, TxnRef, TxnTag
from rocketmq_spark.sidecar.transactions import Transactions
from rocketmq_spark.sidecar.txnlog import (PROP_BATCH, PROP_EPOCH, PROP_KIND, Decision, _TxnState,
                                           decision_body, pack_halves, unpack_halves)
from rocketmq_spark.structs import HalfMessage

Q0, Q1 = MessageQueue("out", "broker-a", 0), MessageQueue("out", "broker-b", 3)


def half(q: MessageQueue, i: int) -> HalfMessage:
    return HalfMessage(q, 1000 + i * 100, i, f"{i:032X}")


def test_tag_round_trip_and_rejects() -> None:
    tag = TxnTag("log_topic", "ck-abc", 42, "e1", 3, 17)
    assert tag.encode() == "log_topic|ck-abc|42|e1|3|17"
    assert TxnTag.parse(tag.encode()) == tag
    for bad in (None, "", "a|b|c", "t|id|x|e|1|2", "t|id|1|e|1|2|extra"):
        assert TxnTag.parse(bad) is None
    with pytest.raises(ConfigError, match="transactional id 'a|b'"):
        TxnRef("log", "a|b", 0, "e")
    with pytest.raises(ConfigError, match="epoch ''"):
        TxnRef("log", "id", 0, "")


@given(st.lists(st.tuples(st.sampled_from([Q0, Q1]), st.integers(0, 2**40), st.integers(0, 2**40),
                          st.text("0123456789ABCDEF", min_size=32, max_size=32)), max_size=50))
def test_packed_halves_round_trip_in_order_per_queue(items) -> None:
    halves = [HalfMessage(q, c, t, m) for q, c, t, m in items]
    got = unpack_halves(pack_halves(halves))
    assert sorted(got, key=lambda h: (h.queue, halves.index(h))) == \
        sorted(halves, key=lambda h: (h.queue, halves.index(h)))
    for q in (Q0, Q1):
        assert [h for h in got if h.queue == q] == [h for h in halves if h.queue == q]


def record(kind: str, batch: int, epoch: str, body: bytes, offset: int) -> MessageExt:
    return MessageExt(topic="log", body=body, queue_offset=offset, properties={
        PROP_KIND: kind, PROP_BATCH: str(batch), PROP_EPOCH: epoch, "TAGS": "id"})


def test_the_first_decision_of_a_batch_wins_and_done_marks_it() -> None:
    state = _TxnState()
    ours = [half(Q0, 0), half(Q0, 1), half(Q1, 2)]
    state.fold(record("part", 7, "e1", pack_halves(ours[:2]), 0))
    state.fold(record("part", 7, "e1", pack_halves(ours[2:]), 1))
    state.fold(record("part", 7, "e2", pack_halves([half(Q0, 9)]), 2))          # a zombie's parts
    state.fold(record("decision", 7, "e1", decision_body([(0, 11), (1, 12)], 2, {Q0: 5, Q1: 0}), 3))
    state.fold(record("decision", 7, "e2", decision_body([(0, 99)], 1, {Q0: 5}), 4))  # too late
    d = state.decisions[7]
    assert (d.epoch, d.tasks, dict(d.targets), d.halves, d.done) == \
        ("e1", frozenset({(0, 11), (1, 12)}), {Q0: 5, Q1: 0}, tuple(ours), False)
    state.fold(record("done", 7, "e1", b"done", 5))
    assert state.decisions[7].done
    # "done" read before its decision (it cannot be written before, but a reader may see
    # records of several queues in any order): the decision still comes out done
    other = _TxnState()
    other.fold(record("done", 8, "e3", b"done", 0))
    other.fold(record("decision", 8, "e3", decision_body([(0, 1)], 0, {}), 1))
    assert other.decisions[8].done


class StubLog:
    def __init__(self, decisions: dict[int, Decision]) -> None:
        self.decisions = decisions
        self.reads = 0
        self.seen: dict[int, Decision] = {}

    def read(self, txn_id: str) -> dict[int, Decision]:
        self.reads += 1
        self.seen = dict(self.decisions)
        return dict(self.decisions)

    def known(self, txn_id: str) -> dict[int, Decision]:
        return dict(self.seen)


@pytest.mark.parametrize("decision, tag, answer", [
    (None, TxnTag("log", "id", 3, "e1", 0, 5), TransactionState.UNKNOWN),          # undecided
    (Decision(3, "e1", frozenset({(0, 5)}), {}, ()), TxnTag("log", "id", 3, "e1", 0, 5),
     TransactionState.UNKNOWN),                                                   # the committer's
    (Decision(3, "e1", frozenset({(0, 5)}), {}, (), done=True), TxnTag("log", "id", 3, "e1", 0, 5),
     TransactionState.ROLLBACK),                     # finished: its committed copy is delivered
    (Decision(3, "e1", frozenset({(0, 5)}), {}, ()), TxnTag("log", "id", 3, "e1", 0, 4),
     TransactionState.ROLLBACK),                     # a failed task attempt
    (Decision(3, "e1", frozenset({(0, 5)}), {}, ()), TxnTag("log", "id", 3, "e0", 0, 5),
     TransactionState.ROLLBACK),                     # another attempt of the batch
])
def test_check_back_answers(decision, tag, answer) -> None:
    txns = Transactions()
    txns.log_of = lambda client, topic: StubLog({3: decision} if decision else {})  # type: ignore[method-assign]
    assert txns.state_of(object(), tag) == answer  # type: ignore[arg-type]


class EndClient:
    """Answers END_TRANSACTION calls when the test says so; records the order they were sent."""

    def __init__(self, fail: dict[str, Exception] | None = None) -> None:
        self.sent: list[tuple[str, int]] = []
        self.in_flight: dict[MessageQueue, int] = {}
        self.max_per_queue = 0
        self.fail = fail or {}
        self.lock = threading.Lock()

    def master_addr(self, topic: str, broker: str) -> str:
        return broker

    def end_transaction(self, h: HalfMessage, state: int, **kw):  # type: ignore[no-untyped-def]
        self.sent.append((h.msg_id, state))
        self.in_flight[h.queue] = self.in_flight.get(h.queue, 0) + 1
        self.max_per_queue = max(self.max_per_queue, self.in_flight[h.queue])
        fut: Future = Future()
        fut.h = h  # type: ignore[attr-defined]
        return fut

    def check_end_transaction(self, call, address: str) -> None:  # type: ignore[no-untyped-def]
        self.in_flight[call.h.queue] -= 1
        exc = self.fail.get(call.h.msg_id)
        if exc is not None:
            raise exc


def test_end_transactions_keep_queue_order_one_in_flight_per_queue() -> None:
    halves = [half(Q0, i) for i in range(5)] + [half(Q1, i) for i in range(5, 8)]
    c = EndClient()
    assert Transactions.end_all(c, "pg", halves, TransactionState.COMMIT) == 8  # type: ignore[arg-type]
    assert c.max_per_queue == 1
    assert [m for m, _ in c.sent if m in {h.msg_id for h in halves[:5]}] == [h.msg_id for h in halves[:5]]
    assert {s for _, s in c.sent} == {TransactionState.COMMIT}


def test_an_unanswered_end_transaction_stops_its_queue_and_is_reported() -> None:
    halves = [half(Q0, i) for i in range(4)] + [half(Q1, 9)]
    c = EndClient({halves[1].msg_id: TransportError("timed out")})
    with pytest.raises(TransportError, match="1 END_TRANSACTION requests got no answer"):
        Transactions.end_all(c, "pg", halves, TransactionState.COMMIT)  # type: ignore[arg-type]
    sent = [m for m, _ in c.sent]
    assert halves[2].msg_id not in sent and halves[3].msg_id not in sent   # never past the gap
    assert halves[4].msg_id in sent
    c = EndClient({halves[0].msg_id: BrokerError(1, "Find prepared transaction message failed")})
    with pytest.raises(BrokerError, match="Find prepared transaction message failed"):
        Transactions.end_all(c, "pg", halves, TransactionState.COMMIT)  # type: ignore[arg-type]


def test_a_busy_end_transaction_is_unknown_and_looked_for() -> None:
    halves = [half(Q0, 0), half(Q1, 1)]
    c = EndClient({halves[1].msg_id: BrokerError(2, "[TIMEOUT_CLEAN_QUEUE]broker busy")})
    with pytest.raises(TransportError, match="1 END_TRANSACTION requests got no answer"):
        Transactions.end_all(c, "pg", halves, TransactionState.COMMIT)  # type: ignore[arg-type]


class FinishClient(EndClient):
    """END_TRANSACTION answers that go missing in the first rounds; the target queues show
    what was applied."""

    def __init__(self, unanswered_rounds: int) -> None:
        super().__init__()
        self.rounds_left = unanswered_rounds
        self.applied: set[str] = set()

    def check_end_transaction(self, call, address: str) -> None:  # type: ignore[no-untyped-def]
        self.in_flight[call.h.queue] -= 1
        self.applied.add(call.h.msg_id)               # applied, whether answered or not
        if self.rounds_left > 0:
            raise TransportError("no answer within 30 s")


def test_finishing_looks_again_until_every_commit_is_answered_and_commits_each_once(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    halves = tuple(half(Q0, i) for i in range(3))
    d = Decision(4, "e1", frozenset({(0, 0)}), {Q0: 0}, halves)
    c = FinishClient(unanswered_rounds=2)
    sleeps: list[float] = []
    txns = Transactions(sleep=sleeps.append)
    log = StubLog({4: d})
    done: list[int] = []
    log.append_done = lambda txn_id, batch, epoch, group: done.append(batch)  # type: ignore[attr-defined]

    def delivered(client, decision):  # type: ignore[no-untyped-def]
        c.rounds_left -= 1
        return set(c.applied)
    monkeypatch.setattr(Transactions, "_delivered", staticmethod(delivered))
    txns._finish(c, "pg", log, d, "id")  # type: ignore[arg-type]
    assert done == [4]
    assert [m for m, _ in c.sent] == [h.msg_id for h in halves]   # each committed once: the rest were seen
    assert sleeps == [2.0, 4.0]


def test_check_backs_read_the_log_at_most_once_a_second_and_answer_from_what_was_read() -> None:
    now = [100.0]
    txns = Transactions(clock=lambda: now[0])
    log = StubLog({})
    txns.log_of = lambda client, topic: log  # type: ignore[method-assign]
    tag = TxnTag("log", "id", 3, "e1", 0, 5)
    client = object()
    assert [txns.state_of(client, tag) for _ in range(1000)] == [TransactionState.UNKNOWN] * 1000  # type: ignore[arg-type]
    assert log.reads == 1
    log.decisions = {3: Decision(3, "e1", frozenset({(0, 5)}), {}, (), done=True)}
    now[0] += 0.5
    assert txns.state_of(client, tag) == TransactionState.UNKNOWN      # not read yet: safe  # type: ignore[arg-type]
    now[0] += 0.6
    assert txns.state_of(client, tag) == TransactionState.ROLLBACK     # read: done  # type: ignore[arg-type]
    assert log.reads == 2
    now[0] += 0.1
    assert txns.state_of(client, tag) == TransactionState.ROLLBACK     # what was read stays true  # type: ignore[arg-type]
    assert log.reads == 2


class AnswerClient(EndClient):
    """A client whose END_TRANSACTION answers to check-backs are recorded (oneway)."""

    def __init__(self) -> None:
        super().__init__()
        self.answers: list[tuple[str, int, str]] = []

    def end_transaction(self, h: HalfMessage, state: int, **kw):  # type: ignore[no-untyped-def]
        if kw.get("from_check"):
            self.answers.append((h.msg_id, state, kw["address"]))
            return None
        return super().end_transaction(h, state, **kw)


def check_back(tag: TxnTag, msg_id: str) -> RemotingCommand:
    half_msg = MessageExt(topic="out", body=b"x", queue_id=0, properties={
        TAG_PROPERTY: tag.encode(), PROP_PRODUCER_GROUP: "pg", PROP_UNIQ_KEY: msg_id})
    header = CheckTransactionStateRequestHeader(tran_state_table_offset=7, commit_log_offset=700,
                                                msg_id=msg_id)
    return RemotingCommand(code=39, ext_fields=header.to_ext(), body=encode_message(half_msg))


def test_check_backs_answer_rollback_only_and_not_while_that_broker_ends_transactions() -> None:
    """UNKNOWN is never sent (the broker asks again at its next check either way); ROLLBACK
    is, except to a broker that a commit is ending transactions on at that moment: the
    answers would wait in the broker's queue ahead of the commit's END_TRANSACTIONs."""
    decided = Decision(3, "e1", frozenset({(0, 5)}), {}, ())
    txns = Transactions()
    stub = StubLog({3: decided})
    txns.log_of = lambda client, topic: stub  # type: ignore[method-assign]
    c = AnswerClient()
    committer = TxnTag("log", "id", 3, "e1", 0, 5)      # undecided for the check: UNKNOWN
    loser = TxnTag("log", "id", 3, "e1", 0, 4)          # a failed task attempt: ROLLBACK
    txns.answer_check(c, "broker-a", check_back(committer, "A" * 32))  # type: ignore[arg-type]
    assert c.answers == []
    txns.answer_check(c, "broker-a", check_back(loser, "B" * 32))  # type: ignore[arg-type]
    assert c.answers == [("B" * 32, TransactionState.ROLLBACK, "broker-a")]

    release = threading.Event()
    during: list[list[tuple[str, int, str]]] = []

    def answers_during_commit(call, address: str) -> None:  # type: ignore[no-untyped-def]
        txns.answer_check(c, "broker-a", check_back(loser, "C" * 32))  # type: ignore[arg-type]
        txns.answer_check(c, "broker-b", check_back(loser, "D" * 32))  # type: ignore[arg-type]
        during.append(list(c.answers))
        release.set()
        EndClient.check_end_transaction(c, call, address)

    c.check_end_transaction = answers_during_commit  # type: ignore[method-assign]
    assert txns.ending(c, "pg", [half(Q0, 0)], TransactionState.COMMIT) == 1  # type: ignore[arg-type]
    assert release.is_set()
    # during the commit to broker-a: broker-b's check-back answered, broker-a's not
    assert during == [[("B" * 32, TransactionState.ROLLBACK, "broker-a"),
                       ("D" * 32, TransactionState.ROLLBACK, "broker-b")]]
    txns.answer_check(c, "broker-a", check_back(loser, "E" * 32))  # type: ignore[arg-type]
    assert c.answers[-1] == ("E" * 32, TransactionState.ROLLBACK, "broker-a")   # after it: again
    assert not txns.ending_to("broker-a")
