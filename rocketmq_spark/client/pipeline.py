"""Sending many messages fast: batches per queue, several requests in flight.

How it works. ``SendPipeline.add(message, key, ref)`` puts a message in its queue's batch (a
sharding key picks the queue with ``sharding.select_queue``; no key takes the next turn of
the process's ``sharding.ROUND_ROBIN`` over the topic's send queues, a batch at a time, so
pipelines one after the other go on where the last stopped); a batch goes out as
SEND_BATCH_MESSAGE once it holds ``batch_size`` messages or ``batch_bytes`` bytes (a single message as
SEND_MESSAGE_V2; delayed and timer messages and %RETRY%/%DLQ% topics alone: brokers refuse them in
batches). Bodies at or over ``compression``'s threshold are compressed; a batch holds
compressed bodies only or none (the broker stores each item with the batch's sysFlag), so a
lane's batch goes out when the next body would change that. A request a busy broker refused (SYSTEM_BUSY: nothing stored) goes again to the
same queue after a pause (``busy``). A request without a key that a broker refuses with
another retriable code is sent once more to another broker's queue (never after a
timeout: it may have been stored); one whose broker cannot be reached (no connection, no
master in the route: nothing sent) likewise. A keyed request whose broker cannot be
reached is sent again to its own queue (its key's order) after growing pauses, for up to
``unreachable_timeout`` seconds (a master restarting), then fails naming the queue and the
option. Up to ``depth`` requests are in
flight at once; a queue whose order matters (``ordered``: every queue a sharding key chose)
has one in flight at a time, because a broker may handle the requests of one connection in
parallel (5.x does), and a message's position in its queue is the order consumers see.
Every message is acknowledged: ``close`` returns once every answer came, and raises
``PipelineFailed`` naming the refs (say, line numbers) of each failed request when any did.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Protocol, Sequence

from rocketmq_spark.client.busy import send_again, unreachable
from rocketmq_spark.errors import BrokerError, RequestTimeout, RocketMQError
from rocketmq_spark.remoting import timer
from rocketmq_spark.remoting.codes import DLQ_PREFIX, RETRY_PREFIX
from rocketmq_spark.remoting.compression import DEFAULT_COMPRESSION, Compression
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.sharding import ROUND_ROBIN, RoundRobin, select_queue
from rocketmq_spark.structs import Message, SendResult

SEND_OK = "SEND_OK"


class Sender(Protocol):
    def send_queues(self, topic: str, *, keyed: bool = False) -> list[MessageQueue]: ...
    def send_async(self, message: Message, *, queue: MessageQueue, producer_group: str = ...,
                   compression: Compression | None = None) -> Any: ...
    def send_batch_async(self, messages: Sequence[Message], *, queue: MessageQueue,
                         producer_group: str = ..., compression: Compression | None = None) -> Any: ...


@dataclass(frozen=True)
class Failure:
    refs: tuple[Hashable, ...]       # what the caller named the messages of the failed request
    queue: MessageQueue
    error: str


class NotStored(RocketMQError):
    """The broker answered, but not SEND_OK (FLUSH_DISK_TIMEOUT, SLAVE_NOT_AVAILABLE, ...)."""


class PipelineFailed(RocketMQError):
    def __init__(self, failures: Sequence[Failure], acknowledged: int,
                 errors: Sequence[RocketMQError] = ()) -> None:
        self.errors = tuple(errors)
        self.failures = tuple(failures)
        self.acknowledged = acknowledged
        first = failures[0]
        super().__init__(f"{sum(len(f.refs) for f in failures)} messages in {len(failures)} requests "
                         f"failed ({acknowledged} acknowledged); first: {_span(first.refs)} to "
                         f"{first.queue.topic}/{first.queue.broker_name}/{first.queue.queue_id}: "
                         f"{first.error}")


    def cause(self) -> RocketMQError:
        """The first failed request's own error (a BrokerError keeps its code), else this."""
        return self.errors[0] if self.errors else self


def _span(refs: Sequence[Hashable]) -> str:
    return f"{refs[0]}" if len(refs) == 1 else f"{refs[0]}..{refs[-1]}"


@dataclass
class _Lane:
    queue: MessageQueue
    ordered: bool = False
    batch: list[Message] = field(default_factory=list)
    refs: list[Hashable] = field(default_factory=list)
    size: int = 0
    in_flight: int = 0
    compressed: bool = False         # the batch's bodies go compressed


class SendPipeline:
    def __init__(self, client: Sender, *, producer_group: str, batch_size: int = 256,
                 batch_bytes: int = 1 << 20, depth: int = 16,
                 on_result: Callable[[Sequence[Hashable], SendResult], None] | None = None,
                 rotation: RoundRobin = ROUND_ROBIN, unreachable_timeout: float = 0.0,
                 compression: Compression = DEFAULT_COMPRESSION) -> None:
        if batch_size < 1 or depth < 1:
            raise ValueError("batch_size and depth must be >= 1")
        self.compression = compression
        self.unreachable_timeout = unreachable_timeout
        self.client, self.group = client, producer_group
        self.batch_size, self.batch_bytes, self.depth = batch_size, batch_bytes, depth
        self.on_result, self.rotation = on_result, rotation
        self._queues: dict[str, list[MessageQueue]] = {}
        self._keyed: dict[str, list[MessageQueue]] = {}
        self._turn: dict[str, int] = {}        # a topic's unkeyed messages: the turn they are on
        self._lanes: dict[MessageQueue, _Lane] = {}
        self._pending: deque[tuple[_Lane, list[Hashable], Any, int]] = deque()
        self.failures: list[Failure] = []
        self.errors: list[RocketMQError] = []
        self.acknowledged = 0
        self.requests = 0

    def _topic_queues(self, topic: str) -> list[MessageQueue]:
        queues = self._queues.get(topic)
        if queues is None:
            queues = self._queues[topic] = self.client.send_queues(topic)
        return queues

    def _keyed_queues(self, topic: str) -> list[MessageQueue]:
        """The queues a sharding key picks among: with a broker whose master is away too, so
        that a key keeps its queue through the outage (``send_queues(keyed=True)``)."""
        queues = self._keyed.get(topic)
        if queues is None:
            queues = self._keyed[topic] = self.client.send_queues(topic, keyed=True)
        return queues

    def _queue_for(self, topic: str, key: str | None) -> MessageQueue:
        if key:
            return select_queue(key, self._keyed_queues(topic))
        queues = self._topic_queues(topic)
        turn = self._turn.get(topic)
        if turn is None:                # the first unkeyed message since the last batch went
            turn = self._turn[topic] = self.rotation.take(topic)
        return queues[turn % len(queues)]

    def add(self, message: Message, key: str | None = None, ref: Hashable = None) -> None:
        """Queue ``message`` for sending. After a request failed nothing more is sent: the
        requests in flight are answered and PipelineFailed raised."""
        if self.failures:
            self.flush_in_flight()
            raise PipelineFailed(self.failures, self.acknowledged, self.errors)
        queue = self._queue_for(message.topic, key)
        lane = self._lanes.get(queue)
        if lane is None:
            lane = self._lanes[queue] = _Lane(queue)
        lane.ordered = lane.ordered or bool(key)
        size = len(message.body) + 64 + sum(len(k) + len(v) for k, v in message.properties.items())
        if (message.delay_level > 0 or timer.is_timed(message.properties)
                or message.topic.startswith((RETRY_PREFIX, DLQ_PREFIX))):
            self._flush(lane)
            lane.batch, lane.refs, lane.size = [message], [ref], size
            self._flush(lane)
            return
        compressed = self.compression.applies(len(message.body))
        if lane.batch and (lane.size + size > self.batch_bytes or lane.compressed != compressed):
            self._flush(lane)
        lane.compressed = compressed
        lane.batch.append(message)
        lane.refs.append(ref)
        lane.size += size
        if len(lane.batch) >= self.batch_size:
            self._flush(lane)

    def _flush(self, lane: _Lane) -> None:
        if not lane.batch:
            return
        batch, refs = lane.batch, lane.refs
        lane.batch, lane.refs, lane.size = [], [], 0
        if not lane.ordered:                      # the next unkeyed batch of the topic goes elsewhere
            self._turn.pop(lane.queue.topic, None)
        while len(self._pending) >= self.depth or (lane.ordered and lane.in_flight >= 1):
            self._settle()
        if self.failures:               # nothing is sent after a failure (order, and the report)
            return
        lane.in_flight += 1
        self.requests += 1
        self._pending.append((lane, refs, self._submit(batch, lane.queue), batch))

    def _submit(self, batch: list[Message], queue: MessageQueue) -> Any:
        """The request in flight; one that could not even go out (no connection, no
        master address) as an answer that raises its error."""
        try:
            if len(batch) == 1:
                return self.client.send_async(batch[0], queue=queue, producer_group=self.group,
                                              compression=self.compression)
            return self.client.send_batch_async(batch, queue=queue, producer_group=self.group,
                                                compression=self.compression)
        except RocketMQError as exc:
            return NotSent(exc)

    def _answer(self, lane: _Lane, batch: list[Message], call: Any) -> SendResult:
        """The request's answer: again while its broker is busy, and a keyed request again
        while its broker cannot be reached (``unreachable_timeout``)."""
        try:
            return call.result()
        except RocketMQError as first:
            exc = first

        return send_again(lambda: self._submit(batch, lane.queue).result(), exc, queue=lane.queue,
                          unreachable_timeout=self.unreachable_timeout if lane.ordered else 0.0,
                          route=getattr(self.client, "route", None))

    def _settle(self) -> None:
        lane, refs, call, batch = self._pending.popleft()
        lane.in_flight -= 1
        n = len(batch)
        try:
            result = self._answer(lane, batch, call)
        except RocketMQError as exc:
            other = self._elsewhere(lane, exc)
            if other is None:
                self._fail(Failure(tuple(refs), lane.queue, str(exc)), exc)
                return
            try:                               # once more, elsewhere, waiting for the answer
                result = self._submit(batch, other).result()
            except RocketMQError as again:
                self._fail(Failure(tuple(refs), other, f"{exc}; then on {other.broker_name}: {again}"), again)
                return
        if result.status != SEND_OK:
            text = (f"the broker stored the message(s) in {result.queue.topic}/{result.queue.broker_name}/"
                    f"{result.queue.queue_id} at offset {result.queue_offset} with status "
                    f"{result.status}, not {SEND_OK}")
            self._fail(Failure(tuple(refs), lane.queue, text), NotStored(text))
            return
        self.acknowledged += n
        if self.on_result is not None:
            self.on_result(refs, result)

    def _fail(self, failure: Failure, error: RocketMQError) -> None:
        self.failures.append(failure)
        self.errors.append(error)

    def _elsewhere(self, lane: _Lane, exc: RocketMQError) -> MessageQueue | None:
        """Another broker's queue for a refused request without a key, when a retry can help."""
        if lane.ordered or isinstance(exc, RequestTimeout):
            return None
        if not unreachable(exc) and not (isinstance(exc, BrokerError) and exc.retriable):
            return None
        others = [q for q in self._topic_queues(lane.queue.topic) if q.broker_name != lane.queue.broker_name]
        return others[0] if others else None

    def flush_in_flight(self) -> None:
        while self._pending:
            self._settle()

    def flush(self) -> None:
        """Send every batch now; return once every request was answered."""
        for lane in list(self._lanes.values()):
            if self.failures:
                break
            self._flush(lane)
        self.flush_in_flight()

    def close(self) -> int:
        """``flush``; the number of messages acknowledged, or PipelineFailed."""
        self.flush()
        if self.failures:
            raise PipelineFailed(self.failures, self.acknowledged, self.errors)
        return self.acknowledged


@dataclass(frozen=True)
class NotSent:
    """A request that could not go out: its answer is the error."""

    error: RocketMQError

    def result(self) -> SendResult:
        raise self.error
