"""In-memory stand-ins for the client, for the sidecar's pure logic (offset loops, search,
send routing). Integration tests use the real client and the embedded cluster."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable, Sequence

from rocketmq_spark.remoting.bodies import ConsumeStats, OffsetWrapper
from rocketmq_spark.remoting.message import MessageExt, encode_message, parse_subscription
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.sidecar.columnar import BodyBatcher, Window
from rocketmq_spark.sidecar.model import PullSpec
from rocketmq_spark.structs import Message, PullResult, PullStatus, SendResult

Q = MessageQueue("orders", "broker-a", 0)


@dataclass
class FakeQueue:
    """One queue: offsets [min_offset, len(messages)) readable, tags filtered like a broker."""

    messages: list[MessageExt]
    min_offset: int = 0
    visible: int | None = None       # max offset the broker shows (None: all)
    calls: list[tuple[int, int]] = field(default_factory=list)

    @property
    def max_offset(self) -> int:
        return len(self.messages) if self.visible is None else self.visible

    def pull(self, queue: MessageQueue, offset: int, *, group: str, max_nums: int = 32,
             expression: str = "*", commit_offset: int | None = None, suspend_ms: int = 0,
             timeout: float | None = None, decode: bool = True, expression_type: str = "TAG") -> PullResult:
        assert expression_type == "TAG", "the fake broker filters by tags only"
        res = self._pull(offset, max_nums, expression)
        if decode or not res.messages:
            return res
        raw = b"".join(encode_message(m) for m in res.messages)   # as stored, before tag matching
        return replace(res, messages=(), raw_body=raw)

    def _pull(self, offset: int, max_nums: int, expression: str) -> PullResult:
        self.calls.append((offset, max_nums))
        lo, hi = self.min_offset, self.max_offset
        if offset < lo:
            return PullResult(PullStatus.OFFSET_ILLEGAL, lo, lo, hi)
        if offset > hi:
            return PullResult(PullStatus.OFFSET_ILLEGAL, hi, lo, hi)
        if offset == hi:
            return PullResult(PullStatus.NO_NEW_MSG, offset, lo, hi)
        tags = parse_subscription(expression)
        scanned = self.messages[offset:min(hi, offset + max_nums)]
        found = tuple(m for m in scanned if not tags or m.tags in tags)
        nxt = offset + len(scanned)
        if not found:
            return PullResult(PullStatus.NO_MATCHED_MSG, nxt, lo, hi)
        return PullResult(PullStatus.FOUND, nxt, lo, hi, found)

    # offsets
    def min_offset_of(self) -> int:
        return self.min_offset


def make_messages(n: int, *, tags: Sequence[str] = ("TagA",), start_ts: int = 1000,
                  step_ms: int = 10, topic: str = "orders") -> list[MessageExt]:
    return [MessageExt(topic=topic, body=b"m%d" % i, queue_offset=i, commit_log_offset=100 * i,
                       store_timestamp=start_ts + step_ms * i, born_timestamp=start_ts + step_ms * i,
                       properties={"TAGS": tags[i % len(tags)], "UNIQ_KEY": f"U{i}"})
            for i in range(n)]


class FakeOffsetClient:
    """Offsets and store times over FakeQueues; search answers the *nearest* store time
    (4.9.8 rule: ties go to the earlier message, after the last -> max - 1)."""

    def __init__(self, queues: dict[MessageQueue, FakeQueue],
                 committed: dict[tuple[str, MessageQueue], int] | None = None,
                 stats_topics: dict[str, set[str]] | None = None) -> None:
        self.queues = queues
        self.committed = committed or {}
        self.stats_topics = stats_topics or {}   # group -> topics it committed

    def min_offset(self, queue: MessageQueue, *, replica: bool = False) -> int:
        return self.queues[queue].min_offset

    def max_offset(self, queue: MessageQueue, *, replica: bool = False) -> int:
        return self.queues[queue].max_offset

    def query_consumer_offset(self, group: str, queue: MessageQueue) -> int | None:
        # Apache: SUCCESS 0 for a group that never committed while min offset is 0
        if (group, queue) in self.committed:
            return self.committed[(group, queue)]
        return 0 if self.queues[queue].min_offset == 0 else None

    def consume_stats(self, group: str, topic: str | None = None) -> ConsumeStats:
        # Apache 4.9.8: with a topic, every queue of it; without, the group's topics only
        topics = {topic} if topic else self.stats_topics.get(group, set())
        table = {q: OffsetWrapper(fq.max_offset, self.committed.get((group, q), 0))
                 for q, fq in self.queues.items() if q.topic in topics}
        return ConsumeStats(table)

    def search_offset(self, queue: MessageQueue, timestamp_ms: int) -> int:
        fq = self.queues[queue]
        live = fq.messages[fq.min_offset:fq.max_offset]
        if not live:
            return fq.max_offset
        best = min(live, key=lambda m: (abs(m.store_timestamp - timestamp_ms), m.queue_offset))
        return best.queue_offset

    def pull(self, queue: MessageQueue, offset: int, **kw: object) -> PullResult:
        return self.queues[queue].pull(queue, offset, **kw)  # type: ignore[arg-type]


class FakeSender:
    """Records sends; assigns queue offsets per queue like a broker would."""

    def __init__(self, queues: list[MessageQueue]) -> None:
        self.queues = queues
        self.next_offset: dict[MessageQueue, int] = {}
        self.calls: list[tuple[str, MessageQueue | None, int]] = []
        self.stored: dict[MessageQueue, list[Message]] = {}
        self._rr = 0

    def send_queues(self, topic: str, *, keyed: bool = False) -> list[MessageQueue]:
        return [q for q in self.queues if q.topic == topic]

    def _store(self, msgs: Sequence[Message], queue: MessageQueue | None) -> SendResult:
        if queue is None:
            qs = self.send_queues(msgs[0].topic)
            queue = qs[self._rr % len(qs)]
            self._rr += 1
        first = self.next_offset.get(queue, 0)
        self.next_offset[queue] = first + len(msgs)
        self.stored.setdefault(queue, []).extend(msgs)
        ids = ",".join(f"ID{first + i}" for i in range(len(msgs)))
        offs = ",".join(f"OFF{first + i}" for i in range(len(msgs)))
        return SendResult("SEND_OK", ids, offs, queue, first)

    def send(self, message: Message, *, queue: MessageQueue | None = None,
             producer_group: str = "", timeout: float | None = None) -> SendResult:
        self.calls.append(("send", queue, 1))
        return self._store([message], queue)

    def send_batch(self, messages: Sequence[Message], *, queue: MessageQueue | None = None,
                   producer_group: str = "") -> SendResult:
        self.calls.append(("batch", queue, len(messages)))
        return self._store(messages, queue)

    # the pipelined calls: stored when sent (a broker handles one connection's requests in order)
    def send_async(self, message: Message, *, queue: MessageQueue, producer_group: str = "",
                   **kw: object) -> "Done":
        return Done(self.send(message, queue=queue))

    def send_batch_async(self, messages: Sequence[Message], *, queue: MessageQueue,
                         producer_group: str = "", **kw: object) -> "Done":
        return Done(self.send_batch(messages, queue=queue))


class Done:
    def __init__(self, result: SendResult) -> None:
        self._result = result

    def result(self) -> SendResult:
        return self._result


def rows(bodies: Iterable[bytes], spec: PullSpec) -> list[int]:
    """The queue offsets of the rows the sidecar streams from ``read_range``'s bodies."""
    window = Window(spec.start, spec.end, parse_subscription(spec.sub_expression), spec.queue.broker_name)
    return [o for b in BodyBatcher(window, 1000).batches(bodies) for o in b.column("queue_offset").to_pylist()]
