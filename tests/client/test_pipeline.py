"""SendPipeline's logic against a scripted sender (answers settle when awaited): batches per
queue, one request in flight per keyed queue, delays alone, the depth bound, a failure
that stops the pipeline and names the refs of the failed request, and the turns unkeyed
messages take across pipelines (the sidecar makes one a Send call)."""

from __future__ import annotations

import threading

import pytest

from rocketmq_spark.client.pipeline import PipelineFailed, SendPipeline
from rocketmq_spark.errors import BrokerError
from rocketmq_spark.remoting.compression import Compression
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.sharding import RoundRobin, select_queue
from rocketmq_spark.structs import Message, SendResult

QS = [MessageQueue("t", "broker-a", i) for i in range(4)]


class Call:
    def __init__(self, sender: "Scripted", queue: MessageQueue, messages: list[Message]) -> None:
        self.sender, self.queue, self.messages = sender, queue, messages

    def result(self) -> SendResult:
        self.sender.in_flight[self.queue] -= 1
        if self.sender.busy > 0:
            self.sender.busy -= 1
            raise BrokerError(2, "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while")
        if any(m.body in self.sender.refuse for m in self.messages):
            raise BrokerError(13, "the message is illegal")
        stored = self.sender.stored.setdefault(self.queue, [])
        first = len(stored)
        stored.extend(self.messages)
        return SendResult("SEND_OK", "id", "off", self.queue, first)


class Scripted:
    def __init__(self, refuse: set[bytes] = frozenset(), busy: int = 0) -> None:  # type: ignore[assignment]
        self.refuse = refuse
        self.busy = busy                  # answers SYSTEM_BUSY to the first `busy` requests
        self.requests: list[tuple[MessageQueue, int]] = []
        self.stored: dict[MessageQueue, list[Message]] = {}
        self.in_flight: dict[MessageQueue, int] = {}
        self.peak: dict[MessageQueue, int] = {}
        self.total_peak = 0

    def send_queues(self, topic: str, *, keyed: bool = False) -> list[MessageQueue]:
        return QS

    def _call(self, queue: MessageQueue, messages: list[Message]) -> Call:
        self.requests.append((queue, len(messages)))
        self.in_flight[queue] = self.in_flight.get(queue, 0) + 1
        self.peak[queue] = max(self.peak.get(queue, 0), self.in_flight[queue])
        self.total_peak = max(self.total_peak, sum(self.in_flight.values()))
        return Call(self, queue, messages)

    def send_async(self, message, *, queue, producer_group="g", compression=None):  # type: ignore[no-untyped-def]
        return self._call(queue, [message])

    def send_batch_async(self, messages, *, queue, producer_group="g", compression=None):  # type: ignore[no-untyped-def]
        return self._call(queue, list(messages))


def msg(i: int, **kw) -> Message:  # type: ignore[no-untyped-def]
    return Message("t", b"m%d" % i, **kw)


def test_keyed_messages_keep_their_queue_and_order_with_one_request_in_flight() -> None:
    s = Scripted()
    pipe = SendPipeline(s, producer_group="g", batch_size=10, depth=8)
    for i in range(95):
        pipe.add(msg(i), f"k{i % 3}", i)
    assert pipe.close() == 95
    for k in ("k0", "k1", "k2"):
        q = select_queue(k, QS)
        mine = [int(m.body[1:]) for m in s.stored[q] if int(m.body[1:]) % 3 == int(k[1])]
        assert mine == [i for i in range(95) if i % 3 == int(k[1])]
    assert max(s.peak.values()) == 1
    assert all(n <= 10 for _q, n in s.requests)


def test_unkeyed_messages_spread_in_batches_with_several_in_flight() -> None:
    s = Scripted()
    pipe = SendPipeline(s, producer_group="g", batch_size=16, depth=3)
    for i in range(640):
        pipe.add(msg(i), None, i)
    assert pipe.close() == 640
    assert {q for q, _ in s.requests} == set(QS)
    assert all(n == 16 for _q, n in s.requests) and len(s.requests) == 40
    assert s.total_peak == 3 and max(s.peak.values()) >= 1


def test_delayed_messages_go_alone_and_big_ones_cut_batches() -> None:
    s = Scripted()
    pipe = SendPipeline(s, producer_group="g", batch_size=100, batch_bytes=1000, depth=4)
    pipe.add(msg(0), "k", 0)
    pipe.add(msg(1, delay_level=3), "k", 1)
    pipe.add(Message("t", b"x" * 900), "k", 2)
    pipe.add(Message("t", b"y" * 900), "k", 3)
    assert pipe.close() == 4
    assert [n for _q, n in s.requests] == [1, 1, 1, 1]


def test_a_batch_holds_bodies_to_compress_or_bodies_to_leave_alone_never_both() -> None:
    s = Scripted()
    pipe = SendPipeline(s, producer_group="g", batch_size=100, depth=4, compression=Compression("zlib", 100))
    for i, size in enumerate([10, 10, 200, 300, 10, 150]):
        pipe.add(Message("t", bytes([65 + i]) * size), "k", i)
    assert pipe.close() == 6
    assert [n for _q, n in s.requests] == [2, 2, 1, 1]
    assert [len(m.body) for m in s.stored[s.requests[0][0]]] == [10, 10, 200, 300, 10, 150]   # order kept


def test_a_failure_names_its_refs_and_stops_the_pipeline() -> None:
    s = Scripted(refuse={b"m25"})
    pipe = SendPipeline(s, producer_group="g", batch_size=10, depth=2)
    with pytest.raises(PipelineFailed) as info:
        for i in range(1000):
            pipe.add(msg(i), "one-key", i + 1)      # refs are 1-based line numbers
        pipe.close()
    (failure,) = info.value.failures
    assert failure.refs == tuple(range(21, 31)) and "MESSAGE_ILLEGAL (13)" in failure.error
    assert "the message is illegal" in failure.error and "21..30" in str(info.value)
    assert info.value.acknowledged == 20
    assert sum(len(v) for v in s.stored.values()) == 20     # nothing after the failed request


def test_short_sends_in_a_row_go_on_where_the_last_one_stopped() -> None:
    """A sink's Send calls are 256 rows or fewer, each a pipeline of its own: with turns
    kept per pipeline every one of them started on the first queue (all of a write's rows
    on one queue of one broker)."""
    s, turns = Scripted(), RoundRobin(seed=7)
    for call in range(8):
        pipe = SendPipeline(s, producer_group="g", batch_size=256, rotation=turns)
        for i in range(5):
            pipe.add(msg(call * 5 + i), None, i)
        assert pipe.close() == 5
    assert len(s.requests) == 8 and all(n == 5 for _q, n in s.requests)
    used = [q for q, _ in s.requests]
    assert all(QS[(QS.index(used[0]) + k) % 4] == used[k] for k in range(8))   # in turn
    assert {len(msgs) for msgs in s.stored.values()} == {10} and len(s.stored) == 4


def test_turns_start_at_random_and_are_never_handed_out_twice() -> None:
    starts = {RoundRobin().take("t") for _ in range(20)}
    assert len(starts) > 1                      # not every process on the first queue
    turns = RoundRobin(seed=3)
    first = turns.take("t")
    assert [turns.take("t") for _ in range(3)] == [first + 1, first + 2, first + 3]
    turns.take("other")                         # each topic its own turns
    assert turns.take("t") == first + 4
    taken: list[int] = []

    def take_many() -> None:
        mine = [turns.take("u") for _ in range(2000)]
        taken.extend(mine)

    threads = [threading.Thread(target=take_many) for _ in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(set(taken)) == len(taken) == 8000
    assert turns.select("u", QS) == QS[(max(taken) + 1) % 4]
    with pytest.raises(ValueError):
        turns.select("u", [])


def test_a_busy_broker_gets_the_same_request_again_on_the_same_queue() -> None:
    """SYSTEM_BUSY stores nothing: each refused request goes again, to its queue, and every
    message is stored once, in its key's order."""
    s = Scripted(busy=3)
    pipe = SendPipeline(s, producer_group="g", batch_size=4, depth=8)
    for i in range(20):
        pipe.add(msg(i), f"k{i % 2}", i)
    assert pipe.close() == 20
    got = sorted(int(m.body[1:]) for ms in s.stored.values() for m in ms)
    assert got == list(range(20)) and s.busy == 0
    for k in ("k0", "k1"):
        q = select_queue(k, QS)
        assert [int(m.body[1:]) for m in s.stored[q]] == [i for i in range(20) if f"k{i % 2}" == k]
    assert len(s.requests) == 2 * 3 + 3          # per key 4 + 4 + 2, and the three sent again
