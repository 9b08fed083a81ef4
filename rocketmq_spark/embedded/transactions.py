"""Transaction check-backs: Apache 4.9.8's ``TransactionalMessageCheckService`` and the
``check`` of ``TransactionalMessageServiceImpl``, on the broker's clock.

How this works. Every ``check_interval_ms`` (transactionCheckInterval, by the injected
clock; a ``FakeClock`` wakes the thread when a test moves it) one *round* walks each half
queue from the check progress (the consume offset of CID_RMQ_SYS_TRANS, see
``half_messages``). It first reads the op queue: half offsets named there are resolved
and skipped. For every other half message, in order:

- its check count (TRANSACTION_CHECK_TIMES, 1 when absent) goes up by one; a message
  already checked ``check_max`` times (transactionCheckMax), or older than the 72 h a
  commit log is kept, goes to TRANS_CHECK_MAX_TIME_TOPIC instead;
- a message stored after the round started (a copy made this round) ends the round;
- a message younger than ``timeout_ms`` (transactionTimeOut; CHECK_IMMUNITY_TIME_IN_SECONDS
  overrides it per message) ends the round, or, with an immunity time, is put back;
- otherwise a copy with the new count is appended to the half queue and the producer
  group (PGROUP) is asked: CHECK_TRANSACTION_STATE, oneway, to one of the group's
  connections, with the copy's offsets and the message (topic and queue id set back to
  REAL_TOPIC / REAL_QID, WAIT=false) as body. No connection, no question; the count grows
  all the same.

The progress then moves past everything handled (copies and moves are fsynced first, so
a crash can only repeat a check-back, never lose a half message). The producer answers
with END_TRANSACTION on its own time; an op message then keeps the copy from being asked
about again. With transactionCheckMax = 3 that is three check-backs and the move in the
third round, as recorded on 4.9.8.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

from rocketmq_spark.embedded.clock import Clock, FakeClock
from rocketmq_spark.embedded.half_messages import (PROP_PREPARED_QUEUE_OFFSET, REMOVE_TAG, HalfMessages)
from rocketmq_spark.embedded.service_thread import ServiceThread
from rocketmq_spark.embedded.store import GetStatus, Stored
from rocketmq_spark.remoting.codes import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from rocketmq_spark.remoting.message import (PROP_CHECK_IMMUNITY_TIME, PROP_PRODUCER_GROUP, PROP_REAL_QID,
                                             PROP_REAL_TOPIC, PROP_TRANSACTION_CHECK_TIMES, PROP_UNIQ_KEY,
                                             PROP_WAIT, MessageExt, encode_message)

log = logging.getLogger(__name__)

TRANSACTION_TIMEOUT_MS = 6_000            # transactionTimeOut
TRANSACTION_CHECK_INTERVAL_MS = 60_000    # transactionCheckInterval
TRANSACTION_CHECK_MAX = 15                # transactionCheckMax
MAX_ROUND_MS = 60_000                     # MAX_PROCESS_TIME_LIMIT: one queue's share of a round
FILE_RESERVED_MS = 72 * 3600 * 1000       # fileReservedTime: older half messages are given up on
OP_PULL_COUNT = 32
_NO_NEW = frozenset({GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MESSAGE_IN_QUEUE})
_ILLEGAL = frozenset({GetStatus.NO_MATCHED_MESSAGE, GetStatus.MESSAGE_WAS_REMOVING, GetStatus.NO_MATCHED_LOGIC_QUEUE,
                      GetStatus.OFFSET_FOUND_NULL, GetStatus.OFFSET_OVERFLOW_BADLY, GetStatus.OFFSET_TOO_SMALL})

AskProducer = Callable[[str, Mapping[str, str], bytes], bool]
"""(producer group, CHECK_TRANSACTION_STATE extFields, body) -> whether a connection took it."""


@dataclass(frozen=True)
class TransactionConfig:
    """Apache's three settings, in milliseconds and times."""

    timeout_ms: int = TRANSACTION_TIMEOUT_MS
    check_interval_ms: int = TRANSACTION_CHECK_INTERVAL_MS
    check_max: int = TRANSACTION_CHECK_MAX

    def __post_init__(self) -> None:
        if self.timeout_ms < 0:
            raise ValueError(f"transaction timeout must be >= 0 ms, not {self.timeout_ms}")
        if self.check_interval_ms < 1:
            raise ValueError(f"transaction check interval must be >= 1 ms, not {self.check_interval_ms}")
        if self.check_max < 0:
            raise ValueError(f"transaction check max must be >= 0, not {self.check_max}")


@dataclass(frozen=True)
class CheckBack:
    """One CHECK_TRANSACTION_STATE: its extFields, the message sent as its body, and
    whether a connection of the producer group took it."""

    producer_group: str | None
    ext: Mapping[str, str]
    message: MessageExt
    sent: bool


@dataclass(frozen=True)
class CheckRound:
    """What one round did to one half queue: offsets are (before, after)."""

    queue_id: int
    started_ms: int
    half_offset: tuple[int, int]
    op_offset: tuple[int, int]
    check_backs: tuple[CheckBack, ...] = ()
    discarded: tuple[int, ...] = ()       # half-queue offsets moved to TRANS_CHECK_MAX_TIME_TOPIC


@dataclass
class _Ops:
    """The op messages read so far: found = the last read returned messages."""

    found: bool
    next_offset: int
    last_born: int = 0
    removed: dict[int, int] = field(default_factory=dict)     # half offset -> op offset
    done: list[int] = field(default_factory=list)             # op offsets dealt with


def _long(text: str | None) -> int:
    try:
        return int(text) if text is not None else -1
    except ValueError:
        return -1


class TransactionCheckService(ServiceThread):
    def __init__(self, half: HalfMessages, ask: AskProducer, *, clock: Clock,
                 config: TransactionConfig = TransactionConfig(), name: str = "transaction-check") -> None:
        super().__init__(name, join_timeout=10)
        self.half = half
        self.ask = ask
        self.clock = clock
        self.config = config
        self._round_lock = threading.Lock()
        self._rounds_done = threading.Condition()
        self.rounds = 0

    # ------------------------------------------------------------ life cycle

    def start(self) -> None:
        if isinstance(self.clock, FakeClock):
            self.clock.add_listener(self._wake)
        self.start_thread()

    def stop(self) -> None:
        if isinstance(self.clock, FakeClock):
            self.clock.remove_listener(self._wake)
        self.stop_thread()

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify()

    def _run(self) -> None:
        due = self.clock.now_ms() + self.config.check_interval_ms
        while True:
            with self._cond:
                while True:
                    if self._stopping:
                        return
                    now = self.clock.now_ms()
                    if now >= due:
                        break
                    self._cond.wait(min((due - now) / 1000, 3600.0))
            try:
                self.check_now()
            except Exception:
                log.exception("%s: check round failed", self.thread_name)
            due = self.clock.now_ms() + self.config.check_interval_ms

    def wait_rounds(self, count: int, timeout: float = 10.0) -> bool:
        """Wait until ``count`` rounds have run in all (tests)."""
        with self._rounds_done:
            return self._rounds_done.wait_for(lambda: self.rounds >= count, timeout)

    # ------------------------------------------------------------ one round

    def check_now(self) -> list[CheckRound]:
        """One round over every half queue, now (what the thread runs each interval)."""
        try:
            with self._round_lock:
                return [self._check_queue(qid) for qid in self.half.half_queue_ids()]
        finally:
            with self._rounds_done:
                self.rounds += 1
                self._rounds_done.notify_all()

    def _check_queue(self, qid: int) -> CheckRound:
        cfg = self.config
        start = self.clock.now_ms()
        half_offset = self.half.consume_offset(TRANS_HALF_TOPIC, qid)
        op_offset = self.half.consume_offset(TRANS_OP_HALF_TOPIC, qid)
        ops = _Ops(found=False, next_offset=op_offset)
        self._read_ops(ops, qid, op_offset, half_offset)
        checks: list[CheckBack] = []
        discarded: list[int] = []
        last_end = 0
        null_reads = 1
        i = new_offset = half_offset
        while self.clock.now_ms() - start <= MAX_ROUND_MS:
            if i in ops.removed:                       # resolved: an op message names it
                ops.done.append(ops.removed.pop(i))
                new_offset = i = i + 1
                continue
            msg, got = self.half.half_at(qid, i)
            if msg is None:                            # one more try past a hole, none at the end
                if null_reads > 1 or got.status in _NO_NEW:
                    break
                null_reads += 1
                i = new_offset = got.next_begin_offset
                continue
            msg, give_up = self._count_check(msg)
            now = self.clock.now_ms()
            if give_up or now - msg.born_timestamp > FILE_RESERVED_MS:
                moved = self.half.discard(msg)
                last_end = max(last_end, moved.commit_log_offset + moved.size)
                discarded.append(i)
                new_offset = i = i + 1
                continue
            if msg.store_timestamp >= start:           # a copy made in this round
                break
            age = now - msg.born_timestamp
            immunity_text = msg.properties.get(PROP_CHECK_IMMUNITY_TIME)
            immunity = cfg.timeout_ms
            if immunity_text is not None:
                value = _long(immunity_text)
                immunity = cfg.timeout_ms if value == -1 else value * 1000
                if age < immunity:
                    end = self._immune(ops, msg)
                    if end is not None:
                        last_end = max(last_end, end)
                        new_offset = i = i + 1
                        continue
            elif 0 <= age < immunity:                  # too young to ask about: later
                break
            if (not ops.found and age > immunity) or age <= -1 or \
                    (ops.found and ops.last_born - start > cfg.timeout_ms):
                stored = self.half.put_back(msg)
                last_end = max(last_end, stored.commit_log_offset + stored.size)
                checks.append(self._ask(msg, stored))
                new_offset = i = i + 1
                continue
            if not ops.found:  # nothing more to learn from the op queue (Apache spins here until MAX_ROUND_MS)
                break
            self._read_ops(ops, qid, ops.next_offset, half_offset)
        new_op_offset = self._op_progress(ops.done, op_offset)
        if not self.half.wait_durable(last_end):
            log.error("%s: copies not fsynced; the progress stays at %d", self.thread_name, half_offset)
            return CheckRound(qid, start, (half_offset, half_offset), (op_offset, op_offset), tuple(checks),
                              tuple(discarded))
        if new_offset != half_offset:
            self.half.commit_offset(TRANS_HALF_TOPIC, new_offset, qid)
        if new_op_offset != op_offset:
            self.half.commit_offset(TRANS_OP_HALF_TOPIC, new_op_offset, qid)
        return CheckRound(qid, start, (half_offset, new_offset), (op_offset, new_op_offset), tuple(checks),
                          tuple(discarded))

    def _count_check(self, msg: MessageExt) -> tuple[MessageExt, bool]:
        """``isNeedDiscard``: True when checked ``check_max`` times already; else the
        message with its count raised (the copy and the check-back carry it)."""
        text = msg.properties.get(PROP_TRANSACTION_CHECK_TIMES)
        times = 1
        if text is not None:
            times = _long(text)  # Apache's getInt: -1 when unreadable
            if times >= self.config.check_max:
                return msg, True
            times += 1
        return replace(msg, properties={**msg.properties, PROP_TRANSACTION_CHECK_TIMES: str(times)}), False

    def _read_ops(self, ops: _Ops, qid: int, offset: int, min_half: int) -> None:
        """``fillOpRemoveMap``: the next op messages; offsets below ``min_half`` are done,
        the others wait in ``removed`` for their half message."""
        found, got = self.half.ops_from(qid, offset, OP_PULL_COUNT)
        ops.next_offset = got.next_begin_offset
        ops.found = bool(found)
        if got.status in _ILLEGAL:
            self.half.commit_offset(TRANS_OP_HALF_TOPIC, got.next_begin_offset, qid)
            return
        for op in found:
            if op.tags != REMOVE_TAG:
                log.error("%s: op message at %d has tag %r", self.thread_name, op.queue_offset, op.tags)
                continue
            half_offset = _long(op.body.decode("utf-8", "replace"))
            if half_offset < min_half:
                ops.done.append(op.queue_offset)
            else:
                ops.removed[half_offset] = op.queue_offset
        if found:
            ops.last_born = found[-1].born_timestamp

    def _immune(self, ops: _Ops, msg: MessageExt) -> int | None:
        """``checkPrepareQueueOffset``: a message within its CHECK_IMMUNITY_TIME_IN_SECONDS.
        Resolved (its first copy's offset is in ``removed``) -> 0; else put back again,
        remembering that offset -> the copy's end; None -> decide as for any message."""
        first = msg.properties.get(PROP_PREPARED_QUEUE_OFFSET)
        if first is not None:
            at = _long(first)
            if at == -1:
                return None
            if at in ops.removed:
                ops.done.append(ops.removed.pop(at))
                return 0
        extra = {PROP_WAIT: "false", PROP_PREPARED_QUEUE_OFFSET: first or str(msg.queue_offset)}
        stored = self.half.put_back(msg, extra)
        return stored.commit_log_offset + stored.size

    @staticmethod
    def _op_progress(done: list[int], offset: int) -> int:
        """``calculateOpOffset``: past the run of done op offsets starting at ``offset``."""
        for value in sorted(done):
            if value != offset:
                break
            offset += 1
        return offset

    def _ask(self, msg: MessageExt, copy: Stored) -> CheckBack:
        """``sendCheckMessage``: ask a producer of the message's group about ``copy``."""
        props = {**msg.properties, PROP_WAIT: "false"}
        uniq = props.get(PROP_UNIQ_KEY)
        fields = {"commitLogOffset": str(copy.commit_log_offset), "msgId": uniq,
                  "tranStateTableOffset": str(copy.queue_offset), "offsetMsgId": copy.msg_id, "transactionId": uniq}
        ext = {k: v for k, v in fields.items() if v is not None}  # Java leaves null fields out
        group = props.get(PROP_PRODUCER_GROUP)
        try:
            body = replace(msg, topic=props[PROP_REAL_TOPIC], queue_id=int(props[PROP_REAL_QID]),
                           queue_offset=copy.queue_offset, commit_log_offset=copy.commit_log_offset,
                           properties=props)
        except (KeyError, ValueError) as exc:
            log.error("%s: half message %s names no real queue (%s): not checked", self.thread_name,
                      copy.msg_id, exc)
            return CheckBack(group, ext, msg, False)
        sent = bool(group) and self.ask(group or "", ext, encode_message(body))
        return CheckBack(group, ext, body, sent)
