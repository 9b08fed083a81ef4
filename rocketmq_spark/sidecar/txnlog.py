"""The transaction log: where the exactly-once sink's decisions live, on the brokers.

How this works. One topic (the sink's ``transactionLogTopic``) holds the records of every
exactly-once sink that names it. Records are ordinary messages, tagged with their sink's
transactional id (a reader asks the brokers for its own records only, by tag) and all
written to the topic's first queue (its send queues sorted by broker name and queue id),
so that one queue orders every record of a transactional id. A record's kind is in the
``RMQ_SPARK_TXN_KIND`` property:

``part``      some half messages of a batch's deciding attempt (packed, zlib), written
              before its decision so that any host can finish the commit after a crash
``decision``  batch B is committed by attempt E: the accepted task attempts, the number of
              parts, and where each target queue ended before the commits began
``done``      every half message of B's decided attempt was committed

The first decision of a batch in the log is the one that counts: a writer appends its
decision, reads the log again, and yields when another decision came first. Records of
one transactional id are read once per process and kept (``TxnLog`` caches what it read
and reads only what is new).

Reading back what was just written: a broker answers SEND_OK once a record is in its
commit log, and builds the consume queue that pulls read from another thread, a moment
later (Apache's ReputMessageService). So a read right after an append can miss the
record. ``read(txn_id, through=result)`` reads until the log's queue has given the record
at ``result.queue_offset`` (and everything before it), waiting within
``READ_BACK_TIMEOUT``; only then is the decision known to be first or not.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from rocketmq_spark.client import MQClient
from rocketmq_spark.errors import BrokerError, RequestTimeout
from rocketmq_spark.remoting.codes import ResponseCode
from rocketmq_spark.remoting.message import MessageExt
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.structs import HalfMessage, Message, PullStatus, SendResult

log = logging.getLogger(__name__)

DEFAULT_LOG_TOPIC = "rocketmq_spark_txn_log"
LOG_READER_GROUP = "rocketmq_spark_txn_log_reader"
PROP_KIND = "RMQ_SPARK_TXN_KIND"
PROP_BATCH = "RMQ_SPARK_TXN_BATCH"
PROP_EPOCH = "RMQ_SPARK_TXN_EPOCH"
PART_SIZE = 16_384                     # half messages per part record (well under 1 MiB packed)
READ_BACK_TIMEOUT = 30.0               # seconds a record just appended may take to be readable


@dataclass(frozen=True)
class Decision:
    """What the log says of one batch of one transactional id."""

    batch: int
    epoch: str
    tasks: frozenset[tuple[int, int]]          # accepted (partition, task attempt)
    targets: Mapping[MessageQueue, int]        # each target queue's end before the commits
    halves: tuple[HalfMessage, ...]            # the decided attempt's half messages
    done: bool = False

    def accepts(self, epoch: str, partition: int, attempt: int) -> bool:
        return epoch == self.epoch and (partition, attempt) in self.tasks


# ------------------------------------------------------------------ packing (no I/O)

def _queue_key(q: MessageQueue) -> str:
    return f"{q.broker_name}/{q.queue_id}/{q.topic}"


def _queue_of(key: str) -> MessageQueue:
    broker, qid, topic = key.split("/", 2)
    return MessageQueue(topic, broker, int(qid))


def pack_halves(halves: Sequence[HalfMessage]) -> bytes:
    """Half messages, grouped by target queue in their order, as zlib'd JSON."""
    by_queue: dict[str, list[HalfMessage]] = {}
    for h in halves:
        by_queue.setdefault(_queue_key(h.queue), []).append(h)
    doc = {k: [[h.commit_log_offset for h in hs], [h.tran_state_table_offset for h in hs],
               [h.msg_id for h in hs]] for k, hs in by_queue.items()}
    return zlib.compress(json.dumps(doc, separators=(",", ":")).encode(), 6)


def unpack_halves(data: bytes) -> list[HalfMessage]:
    doc = json.loads(zlib.decompress(data))
    out = []
    for key, (offsets, table_offsets, ids) in doc.items():
        q = _queue_of(key)
        out.extend(HalfMessage(q, c, t, m) for c, t, m in zip(offsets, table_offsets, ids, strict=True))
    return out


def decision_body(tasks: Iterable[tuple[int, int]], parts: int, targets: Mapping[MessageQueue, int]) -> bytes:
    return json.dumps({"tasks": sorted([p, a] for p, a in tasks), "parts": parts,
                       "targets": {_queue_key(q): o for q, o in sorted(targets.items())}},
                      separators=(",", ":")).encode()


# ------------------------------------------------------------------ one transactional id

@dataclass
class _TxnState:
    """Records of one transactional id, folded as they are read."""

    decisions: dict[int, Decision] = field(default_factory=dict)
    parts: dict[tuple[int, str], list[HalfMessage]] = field(default_factory=dict)
    done: set[int] = field(default_factory=set)
    next_offset: dict[MessageQueue, int] = field(default_factory=dict)

    def fold(self, m: MessageExt) -> None:
        kind = m.properties.get(PROP_KIND)
        try:
            batch = int(m.properties.get(PROP_BATCH, ""))
        except ValueError:
            log.warning("transaction log record at %s/%d has no batch; skipped", m.topic, m.queue_offset)
            return
        epoch = m.properties.get(PROP_EPOCH, "")
        if kind == "part":
            self.parts.setdefault((batch, epoch), []).extend(unpack_halves(m.payload()))
        elif kind == "decision":
            if batch in self.decisions:       # a later decision of the same batch lost
                return
            doc = json.loads(m.payload())
            halves = tuple(self.parts.pop((batch, epoch), []))
            self.decisions[batch] = Decision(
                batch, epoch, frozenset((int(p), int(a)) for p, a in doc["tasks"]),
                {_queue_of(k): int(v) for k, v in doc["targets"].items()}, halves,
                batch in self.done)
        elif kind == "done":
            self.done.add(batch)
            d = self.decisions.get(batch)
            if d is not None and not d.done:
                self.decisions[batch] = Decision(d.batch, d.epoch, d.tasks, d.targets, d.halves, True)


class TxnLog:
    """The log topic of one cluster: reads (cached per transactional id) and appends."""

    def __init__(self, client: MQClient, topic: str) -> None:
        self.client = client
        self.topic = topic
        self._states: dict[str, _TxnState] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------ reading

    def read(self, txn_id: str, *, through: SendResult | None = None,
             timeout: float = READ_BACK_TIMEOUT) -> dict[int, Decision]:
        """Every decision of ``txn_id`` so far, by batch (reading only what is new). With
        ``through``, the answer of an append of ours: not before that record was read."""
        deadline = time.monotonic() + timeout
        pause = 0.005
        with self._lock:
            state = self._states.setdefault(txn_id, _TxnState())
            while True:
                for q in self._queues(through):
                    self._read_queue(state, q, txn_id)
                if through is None or state.next_offset.get(through.queue, 0) > through.queue_offset:
                    return dict(state.decisions)
                if time.monotonic() > deadline:
                    raise RequestTimeout(
                        f"the transaction log record at {through.queue.topic}/{through.queue.broker_name}/"
                        f"{through.queue.queue_id} offset {through.queue_offset} was not readable "
                        f"{timeout:.0f} s after the broker stored it")
                time.sleep(pause)
                pause = min(pause * 2, 0.1)

    def known(self, txn_id: str) -> dict[int, Decision]:
        """The decisions of ``txn_id`` this process has read so far, without asking the
        broker (``read`` asks)."""
        with self._lock:
            state = self._states.get(txn_id)
            return dict(state.decisions) if state is not None else {}

    def _queues(self, through: SendResult | None = None) -> list[MessageQueue]:
        try:
            queues = set(self.client.subscribe_queues(self.topic))
        except BrokerError as exc:
            if exc.code != ResponseCode.TOPIC_NOT_EXIST:
                raise
            queues = set()                    # nothing was ever written (or not routed yet)
        if through is not None:               # a topic our append created, not yet in the route
            queues.add(through.queue)
        return sorted(queues)

    def _read_queue(self, state: _TxnState, q: MessageQueue, txn_id: str) -> None:
        offset = state.next_offset.get(q, 0)
        while True:
            r = self.client.pull(q, offset, group=LOG_READER_GROUP, max_nums=32, expression=txn_id)
            if r.status is PullStatus.OFFSET_ILLEGAL and r.next_begin_offset > offset:
                offset = r.next_begin_offset  # below the min offset: retention removed old records
                continue
            if r.status not in (PullStatus.FOUND, PullStatus.NO_MATCHED_MSG):
                break
            for m in r.messages:
                if m.queue_offset >= offset and m.tags == txn_id:
                    state.fold(m)
            if r.next_begin_offset <= offset:
                break
            offset = r.next_begin_offset
        state.next_offset[q] = offset

    # ------------------------------------------------------------ writing

    def _record(self, txn_id: str, kind: str, batch: int, epoch: str, body: bytes) -> Message:
        return Message(self.topic, body, tags=txn_id, keys=f"{txn_id}#{batch}",
                       properties={PROP_KIND: kind, PROP_BATCH: str(batch), PROP_EPOCH: epoch})

    def _append(self, message: Message, producer_group: str) -> SendResult:
        queue = sorted(self.client.send_queues(self.topic))[0]
        result = self.client.send(message, queue=queue, producer_group=producer_group)
        if result.status != "SEND_OK":
            raise BrokerError(ResponseCode.SYSTEM_ERROR,
                              f"the transaction log record was stored with status {result.status}, "
                              f"not SEND_OK: its durability is not known")
        return result

    def append_decision(self, txn_id: str, batch: int, epoch: str, tasks: Iterable[tuple[int, int]],
                        halves: Sequence[HalfMessage], targets: Mapping[MessageQueue, int],
                        producer_group: str) -> SendResult:
        """The parts, then the decision (the moment the batch is decided); the decision's
        send result, for ``read(through=...)``."""
        chunks = [halves[i:i + PART_SIZE] for i in range(0, len(halves), PART_SIZE)]
        for chunk in chunks:
            self._append(self._record(txn_id, "part", batch, epoch, pack_halves(chunk)), producer_group)
        return self._append(self._record(txn_id, "decision", batch, epoch,
                                         decision_body(tasks, len(chunks), targets)), producer_group)

    def append_done(self, txn_id: str, batch: int, epoch: str, producer_group: str) -> None:
        self._append(self._record(txn_id, "done", batch, epoch, b"done"), producer_group)
