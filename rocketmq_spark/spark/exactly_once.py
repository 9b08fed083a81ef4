"""The sink's exactly-once mode: tasks write half messages, the driver commits them once.

How this works (docs/exactly-once.md tells it whole). A writer (one per streaming query
run, or per batch write) draws an epoch. Each task sends its rows as half messages, tagged
with the transactional id, the batch, the epoch and its own task attempt, and returns their
handles in its commit message; nothing it sent is visible yet. Spark calls the driver's
``commit`` with the messages of the task attempts that succeeded, after every task of the
batch did; the sidecar records the decision in the transaction log on the brokers and
commits the half messages, or, when an earlier attempt of the same batch already decided
it (a batch replayed after a driver crash), rolls this attempt's back. ``abort`` rolls
back, unless the batch was decided for this attempt. Half messages of task attempts that
failed are rolled back by their task, or by the brokers' check-backs once the batch is
decided.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Sequence, TypeVar

from pyspark.sql.datasource import WriterCommitMessage

from rocketmq_spark.errors import ConfigError, RocketMQError, TransportError
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.sidecar import Outgoing
from rocketmq_spark.sidecar.errors import SidecarUnavailable
from rocketmq_spark.sidecar.model import TxnRef, TxnTag, check_id
from rocketmq_spark.spark.sink_options import SinkOptions
from rocketmq_spark.structs import HalfMessage, SendResult

log = logging.getLogger(__name__)
T = TypeVar("T")

BATCH_ID_PROPERTY = "streaming.sql.batchId"      # Spark's local property in micro-batch tasks


def new_epoch() -> str:
    return uuid.uuid4().hex[:16]


def stream_txn_id(opts: SinkOptions, options: dict[str, str]) -> str:
    """The streaming sink's transactional id: option ``transactionalId``, else derived from
    the query's checkpoint location (stable across restarts of the query)."""
    if opts.transactional_id:
        return opts.transactional_id
    location = {k.lower(): v for k, v in options.items()}.get("checkpointlocation")
    if not location:
        raise ConfigError("option 'deliveryGuarantee': exactly-once needs option 'transactionalId' "
                          "(a name for the query that stays the same across its restarts), or the "
                          "query's checkpointLocation set with .option('checkpointLocation', ...)")
    return "ck-" + hashlib.sha256(location.rstrip("/").encode()).hexdigest()[:24]


def batch_txn_id(opts: SinkOptions) -> str:
    """A batch write is a transaction of its own."""
    return f"{opts.transactional_id or 'write'}-{uuid.uuid4().hex[:16]}"


@dataclass(frozen=True)
class Transactional:
    """What a writer's tasks need to know of its transaction (pickled to the executors)."""

    log_topic: str
    txn_id: str
    epoch: str
    streaming: bool

    def __post_init__(self) -> None:
        check_id("transactional id", self.txn_id)
        if "|" in self.log_topic:           # '|' separates a half message's tag fields
            raise ConfigError(f"option 'transactionLogTopic': {self.log_topic!r} has a '|', which "
                              f"exactly-once writes cannot use in the log's name")

    def ref(self, batch: int) -> TxnRef:
        return TxnRef(self.log_topic, self.txn_id, batch, self.epoch)


@dataclass(frozen=True)
class HalfQueue:
    """The half messages a task sent to one queue, in order (compact for pickling)."""

    topic: str
    broker: str
    queue_id: int
    commit_log_offsets: tuple[int, ...]
    table_offsets: tuple[int, ...]
    msg_ids: tuple[str, ...]

    def halves(self) -> list[HalfMessage]:
        q = MessageQueue(self.topic, self.broker, self.queue_id)
        return [HalfMessage(q, c, t, m) for c, t, m in
                zip(self.commit_log_offsets, self.table_offsets, self.msg_ids)]


def pack(halves: Sequence[HalfMessage]) -> tuple[HalfQueue, ...]:
    by: dict[MessageQueue, list[HalfMessage]] = {}
    for h in halves:
        by.setdefault(h.queue, []).append(h)
    return tuple(HalfQueue(q.topic, q.broker_name, q.queue_id,
                           tuple(h.commit_log_offset for h in hs), tuple(h.tran_state_table_offset for h in hs),
                           tuple(h.msg_id for h in hs)) for q, hs in by.items())


@dataclass(frozen=True)
class TxnCommit(WriterCommitMessage):
    """What one task attempt of an exactly-once write sent: half messages, not visible yet."""

    partition: int
    attempt: int
    batch: int
    messages: int
    send_calls: int
    queues: tuple[HalfQueue, ...]

    def halves(self) -> list[HalfMessage]:
        return [h for q in self.queues for h in q.halves()]


def task_identity() -> tuple[int, int, int]:
    """(partition, task attempt id, batch id) of the running task; batch 0 outside streams."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return 0, 0, 0
    batch = ctx.getLocalProperty(BATCH_ID_PROPERTY)
    return ctx.partitionId(), ctx.taskAttemptId(), int(batch) if batch else 0


Send = Callable[[Sequence[Outgoing]], list[SendResult]]


def sidecar_send(opts: SinkOptions, tag: str) -> Send:
    from rocketmq_spark.spark import link

    cluster = opts.cluster

    def send(items: Sequence[Outgoing]) -> list[SendResult]:
        return link.call(opts.sidecar, lambda c: c.send(cluster, items, producer_group=opts.group,
                                                        transaction_tag=tag,
                                                        broker_unavailable_timeout_ms=opts.broker_unavailable_ms,
                                                        compression=opts.compression))
    return send


class HalfCollector:
    """Wraps a task's send: remembers every half message the broker stored."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.halves: list[HalfMessage] = []

    def __call__(self, items: Sequence[Outgoing]) -> list[SendResult]:
        results = self._send(items)
        self.halves.extend(HalfMessage.of(r) for r in results)
        return results


def tag_for(txn: Transactional, batch: int, partition: int, attempt: int) -> str:
    return TxnTag(txn.log_topic, txn.txn_id, batch, txn.epoch, partition, attempt).encode()


# ------------------------------------------------------------------ driver side

def commit(opts: SinkOptions, txn: Transactional, messages: Sequence[Any], batch: int, *,
           ordered: bool = True) -> None:
    """``ordered``: rows have sharding keys, whose order in each queue must be kept."""
    from rocketmq_spark.spark import link

    commits = [m for m in messages if isinstance(m, TxnCommit)]
    tasks = [(m.partition, m.attempt) for m in commits]
    halves = [h for m in commits for h in m.halves()]
    ref = txn.ref(batch)
    outcome = _while_brokers_away(opts, batch, txn, lambda: link.call(
        opts.sidecar, lambda c: c.commit_transaction(opts.cluster, opts.group, ref, tasks, halves, ordered=ordered)))
    if outcome.decided_epoch != txn.epoch:
        log.warning("rocketmq sink: batch %d of %s was already committed by an earlier attempt "
                    "(%s); this attempt's %d messages were rolled back", batch, txn.txn_id,
                    outcome.decided_epoch, outcome.rolled_back)
    else:
        log.info("rocketmq sink: batch %d of %s committed: %d messages", batch, txn.txn_id,
                 outcome.committed)
    if outcome.recovered:
        log.warning("rocketmq sink: %d messages of an earlier, unfinished commit of %s were "
                    "committed", outcome.recovered, txn.txn_id)


COMMIT_PAUSE_MAX = 2.0      # seconds between commit calls while a broker is away, at most


def _while_brokers_away(opts: SinkOptions, batch: int, txn: Transactional, attempt: Callable[[], T]) -> T:
    """``attempt()`` (the commit), again after growing pauses while a broker it needs does
    not answer (a master killed, restarting, or replaced by an elected one), for at most
    ``brokerUnavailableTimeoutMs``. Calling the commit again is what Spark does when a
    query is restarted on its checkpoint: the sidecar finishes a batch already decided by
    looking for each half message in its target queue (sidecar/transactions.py), so no
    message is committed twice. Other errors, and the last one past the bound, are raised."""
    deadline = time.monotonic() + opts.broker_unavailable_ms / 1000
    pause = 0.1
    while True:
        try:
            return attempt()
        except TransportError as exc:        # the broker's, as the sidecar forwards it
            if isinstance(exc, SidecarUnavailable) or time.monotonic() + pause > deadline:
                raise
            log.warning("rocketmq sink: committing batch %d of %s: %s; again in %.1f s (option "
                        "'brokerUnavailableTimeoutMs' is %d)", batch, txn.txn_id, exc, pause,
                        opts.broker_unavailable_ms)
            time.sleep(pause)
            pause = min(pause * 2, COMMIT_PAUSE_MAX)


def abort(opts: SinkOptions, txn: Transactional, messages: Sequence[Any], batch: int) -> None:
    from rocketmq_spark.spark import link

    halves = [h for m in messages if isinstance(m, TxnCommit) for h in m.halves()]
    ref = txn.ref(batch)
    try:
        rolled, decided = link.call(opts.sidecar, lambda c: c.abort_transaction(
            opts.cluster, opts.group, ref, halves))
    except RocketMQError as exc:    # the brokers' check-backs roll them back later
        log.warning("rocketmq sink: rolling back batch %d of %s failed (%s); the brokers roll "
                    "its half messages back when they check them", batch, txn.txn_id, exc)
        return
    log.info("rocketmq sink: batch %d of %s aborted: %d half messages rolled back%s", batch,
             txn.txn_id, rolled, " (the batch was decided: its commit was finished)" if decided else "")


def roll_back_task(opts: SinkOptions, txn: Transactional, halves: Sequence[HalfMessage], batch: int) -> None:
    """A failing task's half messages, rolled back at once (best effort)."""
    if not halves:
        return
    from rocketmq_spark.spark import link

    try:
        link.call(opts.sidecar, lambda c: c.abort_transaction(opts.cluster, opts.group, txn.ref(batch), halves))
    except RocketMQError as exc:
        log.info("rocketmq sink: rolling back a failed task's %d half messages failed (%s); the "
                 "brokers' check-backs roll them back", len(halves), exc)
