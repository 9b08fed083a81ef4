"""Exactly-once writes: half messages, decisions, commits, rollbacks and check-backs.

How this works (docs/exactly-once.md tells it whole). Tasks send their rows as half
messages, each tagged (``RMQ_SPARK_TXN``) with the log topic, the sink's transactional id,
the batch, the writing attempt's epoch and the task attempt. The driver's commit comes
here with the accepted tasks' half messages:

1. earlier batches of the same id that were decided but not finished (a driver died while
   committing) are finished first;
2. when the batch has no decision yet, the decision is appended to the transaction log
   (``txnlog``) and the log read again: the first decision of a batch wins;
3. the winning attempt's half messages are committed, each with exactly one END_TRANSACTION
   COMMIT (rows with sharding keys queue by queue in send order, one request in flight per
   queue; others many at once); a losing attempt's are rolled back;
4. ``done`` is appended once every commit was answered.

A decided batch whose commits may have started (a retried call, a driver that died) is
finished by looking for each half message in its target queue (by UNIQ_KEY, from where the
queue ended before the commits) and committing only those not there: the broker keeps no
transaction state, so a second COMMIT would deliver a message twice. Before it looks, each
target broker must have dispatched its whole commit log (``MQClient.wait_dispatched``), and
a decision just appended is read back through its own offset (``TxnLog.read``): brokers
answer writes before pulls can see them.

Check-backs (CHECK_TRANSACTION_STATE) are answered from the log: ROLLBACK for a half
message of a decided batch that its decision does not accept, or that the finished batch
no longer needs (its committed copy is already delivered, and a rollback only marks the
half message resolved); UNKNOWN while the batch is undecided, and while its commits are in
progress: only the committer commits, so that no half message is ever committed twice. An
UNKNOWN is not sent: the broker asks again at its next check either way. Nor is any answer
to a broker that a commit, rollback or recovery is sending END_TRANSACTIONs to at that
moment: the answers would queue in the broker ahead of the commits.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import Counter, deque
from typing import Callable, Iterable, Iterator, Sequence

from rocketmq_spark.client import MQClient
from rocketmq_spark.client.transport import PendingCall
from rocketmq_spark.client.busy import is_busy
from rocketmq_spark.errors import BrokerError, ConfigError, RocketMQError, TransportError
from rocketmq_spark.remoting.codes import TransactionState
from rocketmq_spark.remoting.command import RemotingCommand
from rocketmq_spark.remoting.headers import CheckTransactionStateRequestHeader
from rocketmq_spark.remoting.message import PROP_PRODUCER_GROUP, PROP_UNIQ_KEY, decode_message
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.sidecar.model import TAG_PROPERTY, CommitOutcome, TxnRef, TxnTag
from rocketmq_spark.sidecar.txnlog import Decision, TxnLog
from rocketmq_spark.structs import HalfMessage, PullStatus

log = logging.getLogger(__name__)

SCAN_GROUP = "rocketmq_spark_txn_scan"
RETRY_PAUSE = 2.0          # after an END_TRANSACTION without an answer, before looking for it
UNORDERED_DEPTH = 64       # END_TRANSACTIONs in flight when their order does not matter
# Seconds an END_TRANSACTION may take to be answered, counted from when it was sent: a
# loaded broker (a real one beside Spark on 2 cores) answers some after more than the
# 3-second request timeout, with up to UNORDERED_DEPTH ahead of it.
END_TX_TIMEOUT = 30.0
FINISH_ROUNDS = 5          # look-and-commit rounds of a decided batch before the commit fails
# A check-back is answered from what was read of the log at most this long ago. A broker
# checks back every half message older than its transactionTimeOut at each check interval,
# so a batch still being written or committed draws one check-back per half message (71,184
# of them in a 50,000-row write against a broker checking every 5 s), and a log read per
# check-back (a pull of each log queue) cost more than the write itself.
CHECK_READ_INTERVAL = 1.0


class Transactions:
    """Commit, abort and check-back answers for every cluster the sidecar talks to."""

    def __init__(self, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._logs: dict[tuple[int, str], TxnLog] = {}
        self._clock = clock
        self._checked_at: dict[tuple[int, str, str], float] = {}   # (client, log, id) -> last read
        self._mutex = threading.Lock()
        # One commit (or recovery) of a transactional id at a time in this process.
        self._id_locks: dict[str, threading.Lock] = {}
        # Brokers (addresses) that END_TRANSACTIONs of a commit, rollback or recovery are going
        # to now: their check-backs are not answered meanwhile (see answer_check).
        self._ending: Counter[str] = Counter()
        self._sleep = sleep

    def log_of(self, client: MQClient, topic: str) -> TxnLog:
        with self._mutex:
            key = (id(client), topic)
            if key not in self._logs:
                self._logs[key] = TxnLog(client, topic)
            return self._logs[key]

    def _id_lock(self, txn_id: str) -> threading.Lock:
        with self._mutex:
            return self._id_locks.setdefault(txn_id, threading.Lock())

    def ending(self, client: MQClient, group: str, halves: Sequence[HalfMessage], state: int,
               per_queue: int = 1) -> int:
        """``end_all``, with the brokers it goes to marked as busy ending transactions."""
        addresses = {client.master_addr(q.topic, q.broker_name) for q in {h.queue for h in halves}}
        with self._ending_to(addresses):
            return self.end_all(client, group, halves, state, per_queue=per_queue)

    @contextlib.contextmanager
    def _ending_to(self, addresses: Iterable[str]) -> Iterator[None]:
        marked = list(addresses)
        with self._mutex:
            self._ending.update(marked)
        try:
            yield
        finally:
            with self._mutex:
                self._ending.subtract(marked)
                for a in marked:
                    if self._ending[a] <= 0:
                        del self._ending[a]

    def ending_to(self, address: str) -> bool:
        with self._mutex:
            return self._ending[address] > 0

    # ------------------------------------------------------------ commit

    def commit(self, client: MQClient, group: str, txn: TxnRef, tasks: Iterable[tuple[int, int]],
               halves: Sequence[HalfMessage], *, ordered: bool = True) -> CommitOutcome:
        started = time.monotonic()
        outcome = self._commit(client, group, txn, tasks, halves, ordered)
        log.info("commit of batch %d of %s: decided by %s, %d committed, %d rolled back, %d "
                 "recovered in %.3f s", txn.batch, txn.txn_id, outcome.decided_epoch,
                 outcome.committed, outcome.rolled_back, outcome.recovered, time.monotonic() - started)
        return outcome

    def _commit(self, client: MQClient, group: str, txn: TxnRef, tasks: Iterable[tuple[int, int]],
                halves: Sequence[HalfMessage], ordered: bool) -> CommitOutcome:
        txlog = self.log_of(client, txn.log_topic)
        with self._id_lock(txn.txn_id):
            recovered = self._finish_earlier(client, group, txlog, txn)
            decisions = txlog.read(txn.txn_id)
            fresh = False
            if txn.batch not in decisions:
                targets = {q: client.max_offset(q) for q in sorted({h.queue for h in halves})}
                ours = txlog.append_decision(txn.txn_id, txn.batch, txn.epoch, tasks, halves, targets, group)
                decisions = txlog.read(txn.txn_id, through=ours)
                fresh = True
            decision = decisions[txn.batch]
            if decision.epoch != txn.epoch:
                log.info("batch %d of %s was decided by attempt %s: rolling back the %d half "
                         "messages of attempt %s", txn.batch, txn.txn_id, decision.epoch, len(halves),
                         txn.epoch)
                rolled = self.ending(client, group, halves, TransactionState.ROLLBACK,
                                     per_queue=UNORDERED_DEPTH)
                recovered += self._finish(client, group, txlog, decision, txn.txn_id)
                return CommitOutcome(decision.epoch, 0, rolled, recovered)
            if fresh:
                try:
                    committed = self.ending(client, group, decision.halves, TransactionState.COMMIT,
                                            per_queue=1 if ordered else UNORDERED_DEPTH)
                    txlog.append_done(txn.txn_id, txn.batch, txn.epoch, group)
                except _Unanswered as exc:
                    log.warning("%s; looking in the target queues for what was delivered", exc)
                    committed = self._finish(client, group, txlog, decision, txn.txn_id)
            else:
                committed = self._finish(client, group, txlog, decision, txn.txn_id)
            return CommitOutcome(txn.epoch, committed, 0, recovered)

    def _finish_earlier(self, client: MQClient, group: str, txlog: TxnLog, txn: TxnRef) -> int:
        n = 0
        for batch, d in sorted(txlog.read(txn.txn_id).items()):
            if batch != txn.batch and not d.done:
                log.warning("batch %d of %s was decided (attempt %s) but its commits did not "
                            "finish: finishing them now", batch, txn.txn_id, d.epoch)
                n += self._finish(client, group, txlog, d, txn.txn_id)
        return n

    def _finish(self, client: MQClient, group: str, txlog: TxnLog, d: Decision, txn_id: str) -> int:
        """Commit the half messages of ``d`` that are not in their target queues yet. First a
        pause: END_TRANSACTION requests of a process that died committing can still be in
        flight (written before it died), and must land before we look. Commits that get no
        answer again are looked for again, up to ``FINISH_ROUNDS`` rounds."""
        if d.done:
            return 0
        n = 0
        for round_ in range(1, FINISH_ROUNDS + 1):
            self._sleep(RETRY_PAUSE * round_)
            delivered = self._delivered(client, d)
            missing = [h for h in d.halves if h.msg_id not in delivered]
            try:
                n += self.ending(client, group, missing, TransactionState.COMMIT)
            except _Unanswered as exc:
                if round_ == FINISH_ROUNDS:
                    raise
                log.warning("finishing batch %d of %s (round %d): %s; looking again", d.batch, txn_id, round_, exc)
                continue
            txlog.append_done(txn_id, d.batch, d.epoch, group)
            return n
        raise AssertionError("unreachable")

    @staticmethod
    def _delivered(client: MQClient, d: Decision) -> set[str]:
        """UNIQ_KEYs of the messages in ``d``'s target queues since the commits began. Each
        broker is asked first to have dispatched what its commit log holds: a commit's copy
        is in the commit log when END_TRANSACTION is answered, in the queue a moment later,
        and a copy looked for too early would be committed twice."""
        out: set[str] = set()
        queues = sorted({h.queue for h in d.halves})
        for addr in sorted({client.master_addr(q.topic, q.broker_name) for q in queues}):
            client.wait_dispatched(addr)
        for q in queues:
            offset = d.targets.get(q, 0)
            while True:
                r = client.pull(q, offset, group=SCAN_GROUP, max_nums=32)
                if r.status is not PullStatus.FOUND or r.next_begin_offset <= offset:
                    break
                out.update(m.properties.get(PROP_UNIQ_KEY, "") for m in r.messages)
                offset = r.next_begin_offset
        return out

    # ------------------------------------------------------------ END_TRANSACTION, pipelined

    @staticmethod
    def end_all(client: MQClient, group: str, halves: Sequence[HalfMessage], state: int,
                per_queue: int = 1, total: int = UNORDERED_DEPTH) -> int:
        """END_TRANSACTION ``state`` for each half message: queue by queue in order (a
        broker may handle requests of one connection in parallel, and commit order is the
        order consumers see), the queues side by side; each answer checked."""
        lanes: dict[MessageQueue, list[HalfMessage]] = {}
        for h in halves:
            lanes.setdefault(h.queue, []).append(h)
        cursors = {q: 0 for q in lanes}
        busy = {q: 0 for q in lanes}          # requests in flight per queue
        addresses = {q: client.master_addr(q.topic, q.broker_name) for q in lanes}
        in_flight: deque[tuple[HalfMessage, PendingCall, str]] = deque()
        done = 0
        unanswered: list[str] = []
        while cursors or in_flight:
            for q in list(cursors):
                while busy[q] < per_queue and len(in_flight) < total and q in cursors:
                    h = lanes[q][cursors[q]]
                    addr = addresses[q]
                    call = client.end_transaction(h, state, producer_group=group, address=addr,
                                                  timeout=END_TX_TIMEOUT)
                    assert call is not None
                    in_flight.append((h, call, addr))
                    busy[q] += 1
                    cursors[q] += 1
                    if cursors[q] == len(lanes[q]):
                        del cursors[q]
            h, call, addr = in_flight.popleft()
            busy[h.queue] -= 1
            try:
                client.check_end_transaction(call, addr)
                done += 1
            except (TransportError, BrokerError) as exc:
                if isinstance(exc, BrokerError) and not is_busy(exc):
                    raise
                # no answer, or a busy broker's refusal before it did anything: unknown
                # whether it was applied (the look in the target queues tells)
                unanswered.append(f"{h.queue.topic}/{h.queue.broker_name}/{h.queue.queue_id} "
                                  f"{h.msg_id}: {exc}")
                cursors.pop(h.queue, None)     # nothing more on that queue: order would break
        if unanswered:
            raise _Unanswered(f"{len(unanswered)} END_TRANSACTION requests got no answer "
                              f"(first: {unanswered[0]})")
        return done

    # ------------------------------------------------------------ abort

    def abort(self, client: MQClient, group: str, txn: TxnRef, halves: Sequence[HalfMessage]) -> tuple[int, bool]:
        """Roll ``halves`` back, but never a half message the batch's decision accepted (a
        commit that failed half way is finished, never undone). (rolled back, decided)."""
        txlog = self.log_of(client, txn.log_topic)
        with self._id_lock(txn.txn_id):
            decision = txlog.read(txn.txn_id).get(txn.batch)
            if decision is not None and decision.epoch == txn.epoch:
                self._finish(client, group, txlog, decision, txn.txn_id)
                accepted = {h.msg_id for h in decision.halves}
                halves = [h for h in halves if h.msg_id not in accepted]
            rolled = self.ending(client, group, halves, TransactionState.ROLLBACK)
            return rolled, decision is not None

    # ------------------------------------------------------------ check-backs

    def answer_check(self, client: MQClient, address: str, cmd: RemotingCommand) -> None:
        """CHECK_TRANSACTION_STATE from the broker at ``address``: answer from the log."""
        header = CheckTransactionStateRequestHeader.from_ext(cmd.ext)
        half, _ = decode_message(cmd.body)
        tag = TxnTag.parse(half.properties.get(TAG_PROPERTY))
        group = half.properties.get(PROP_PRODUCER_GROUP)
        if tag is None or not group:
            log.info("check-back for %s: not a half message of this sink; left unanswered", header.msg_id)
            return
        try:
            state = self.state_of(client, tag)
        except RocketMQError as exc:       # the broker asks again at its next check
            log.info("check-back for %s of %s batch %d: the transaction log cannot be read now "
                     "(%s); left to the next check", header.msg_id, tag.txn_id, tag.batch, exc)
            return
        if state == TransactionState.UNKNOWN:
            # The answer to every half message of a batch still being written or committed
            # (tens of thousands in a large batch). Not sent: a broker does nothing with an
            # UNKNOWN answer but queue it behind the commits (Apache's EndTransactionProcessor
            # returns at once for it), and asks again at its next check either way. Answered,
            # a 50,000-row write against a broker checking every 5 s queued 14,224 of them
            # ahead of the commits, which the broker then refused as busy (TIMEOUT_CLEAN_QUEUE).
            log.debug("check-back for half message %s of %s batch %d attempt %s: undecided, "
                      "not answered", header.msg_id, tag.txn_id, tag.batch, tag.epoch)
            return
        if self.ending_to(address):
            # A commit (or rollback) is ending transactions on that broker now, and its
            # END_TRANSACTIONs wait in the same queue of the broker as these answers: a
            # 50,000-row commit met tens of thousands of check-backs and was refused busy
            # (TIMEOUT_CLEAN_QUEUE). The half message stays unresolved until the next check,
            # which a ROLLBACK then answers; nothing is delivered meanwhile.
            log.debug("check-back for half message %s of %s batch %d attempt %s: answered at a "
                      "later check (transactions are being ended on %s)", header.msg_id,
                      tag.txn_id, tag.batch, tag.epoch, address)
            return
        name = {TransactionState.COMMIT: "COMMIT", TransactionState.ROLLBACK: "ROLLBACK"}[state]
        log.info("check-back for half message %s of %s batch %d attempt %s: %s", header.msg_id,
                 tag.txn_id, tag.batch, tag.epoch, name)
        target = HalfMessage(MessageQueue(half.topic, "", half.queue_id), header.commit_log_offset,
                             header.tran_state_table_offset,
                             header.msg_id or half.properties.get(PROP_UNIQ_KEY, ""))
        client.end_transaction(target, state, producer_group=group, from_check=True,
                               transaction_id=header.transaction_id, oneway=True, address=address)

    def state_of(self, client: MQClient, tag: TxnTag) -> int:
        """A check-back's answer. What the log says of a batch only ever grows (undecided,
        decided, done), and every answer from a stale view is safe (UNKNOWN: the broker asks
        again; ROLLBACK: only from facts that never change), so the log is read at most
        every ``CHECK_READ_INTERVAL`` seconds per transactional id."""
        txlog = self.log_of(client, tag.log_topic)
        key = (id(client), tag.log_topic, tag.txn_id)
        now = self._clock()
        with self._mutex:
            fresh = now - self._checked_at.get(key, float("-inf")) < CHECK_READ_INTERVAL
            if not fresh:
                self._checked_at[key] = now
        decisions = txlog.known(tag.txn_id) if fresh else txlog.read(tag.txn_id)
        decision = decisions.get(tag.batch)
        if decision is None:
            return TransactionState.UNKNOWN
        if not decision.accepts(tag.epoch, tag.partition, tag.attempt) or decision.done:
            return TransactionState.ROLLBACK
        return TransactionState.UNKNOWN


class _Unanswered(TransportError):
    """END_TRANSACTION requests whose outcome is unknown (no answer arrived)."""


def validate_halves(halves: Sequence[HalfMessage]) -> None:
    for h in halves:
        if not h.msg_id or h.commit_log_offset < 0 or h.tran_state_table_offset < 0:
            raise ConfigError(f"half message {h} is incomplete")


__all__ = ["Transactions", "validate_halves"]
