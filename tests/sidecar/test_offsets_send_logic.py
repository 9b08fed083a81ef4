"""GetOffsets' committed rule, SearchOffsets' stepping and Send's routing (pure logic)."""

from __future__ import annotations

import pytest

from rocketmq_spark.remoting.message import java_string_hash
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.sidecar.model import Outgoing
from rocketmq_spark.sidecar.offsets import first_offset_at_or_after, queue_offsets
from rocketmq_spark.sharding import RoundRobin, select_queue
from rocketmq_spark.sidecar.send import send_all, send_halves
from rocketmq_spark.structs import Message
from tests.sidecar.fakes import FakeOffsetClient, FakeQueue, FakeSender, make_messages

A0 = MessageQueue("orders", "broker-a", 0)
A1 = MessageQueue("orders", "broker-a", 1)
P0 = MessageQueue("payments", "broker-a", 0)


def test_committed_only_where_consume_stats_lists_the_topic() -> None:
    client = FakeOffsetClient({A0: FakeQueue(make_messages(5)), A1: FakeQueue(make_messages(3)),
                               P0: FakeQueue(make_messages(4))},
                              committed={("g", A0): 4, ("g", A1): 0},
                              stats_topics={"g": {"orders"}})
    got = {o.queue: o for o in queue_offsets(client, [A0, A1, P0], "g")}
    assert (got[A0].min_offset, got[A0].max_offset, got[A0].committed) == (0, 5, 4)
    assert got[A1].committed == 0          # committed 0 is a real commit
    # QUERY_CONSUMER_OFFSET answers 0 for P0 too, but the group never committed it
    assert client.query_consumer_offset("g", P0) == 0
    assert got[P0].committed is None
    assert all(o.committed is None for o in queue_offsets(client, [A0, P0], None))
    assert [o.queue for o in queue_offsets(client, [P0, A1, A0], "g")] == [P0, A1, A0]


@pytest.mark.parametrize("ts,expected", [
    (0, 0),          # before the first message
    (1000, 0),       # exactly the first
    (1001, 1),       # just after the first: nearest is 0, but 1 is the first at or after
    (1009, 1),       # nearest is 1 (stored 1010)
    (1010, 1),
    (1055, 6),       # between 5 and 6, equally near: broker answers 5
    (1090, 9),
    (1091, 10),      # after the last: max offset
    (99999, 10),
])
def test_first_offset_at_or_after(ts: int, expected: int) -> None:
    client = FakeOffsetClient({A0: FakeQueue(make_messages(10, start_ts=1000, step_ms=10))})
    assert first_offset_at_or_after(client, A0, ts) == expected


def test_search_steps_back_over_equal_store_times() -> None:
    msgs = make_messages(80, start_ts=1000, step_ms=0)        # all stored at 1000
    client = FakeOffsetClient({A0: FakeQueue(msgs, min_offset=3)})
    client.search_offset = lambda q, ts: 70                   # a broker answering mid-run
    assert first_offset_at_or_after(client, A0, 1000) == 3
    assert first_offset_at_or_after(client, A0, 1001) == 80


def test_search_empty_queue() -> None:
    client = FakeOffsetClient({A0: FakeQueue([])})
    assert first_offset_at_or_after(client, A0, 5) == 0


def test_sharding_key_picks_java_hash_queue() -> None:
    qs = [MessageQueue("t", "b", i) for i in range(4)]
    assert select_queue("order-42", qs) == qs[abs(java_string_hash("order-42")) % 4]
    # Java's SelectMessageQueueByHash: hashCode() % n, then abs (Integer.MIN_VALUE included)
    assert java_string_hash("polygenelubricants") == -2**31
    assert select_queue("polygenelubricants", qs) == qs[0]
    assert select_queue("Aa", qs) == select_queue("BB", qs)   # equal Java hashes


def test_send_routes_batches_and_keeps_request_order() -> None:
    qs = [MessageQueue("orders", "broker-a", i) for i in range(4)]
    sender = FakeSender(qs)
    keys = ["k1", "k2", "k1", "k2", "k1"]
    items = [Outgoing(Message("orders", b"%d" % i), k) for i, k in enumerate(keys)]
    items.append(Outgoing(Message("orders", b"delayed", delay_level=2), "k1"))
    items.append(Outgoing(Message("orders", b"after-delay"), "k1"))
    results = send_all(sender, items, "pg")
    assert len(results) == len(items)
    q1, q2 = select_queue("k1", qs), select_queue("k2", qs)
    assert [r.queue for r in results] == [q1, q2, q1, q2, q1, q1, q1]
    # k1's messages are stored in request order, the delayed one alone
    assert [m.body for m in sender.stored[q1]] == [b"0", b"2", b"4", b"delayed", b"after-delay"]
    assert ("batch", q1, 3) in sender.calls and ("send", q1, 1) in sender.calls
    assert sender.stored[q1][0].properties["__SHARDINGKEY"] == "k1"
    # per-message ids and offsets out of a batch result
    assert [(r.msg_id, r.queue_offset) for r in results[:5:2]] == [("ID0", 0), ("ID1", 1), ("ID2", 2)]


def test_send_without_keys_batches_per_topic_and_splits_runs() -> None:
    sender = FakeSender([MessageQueue("t", "b", 0), MessageQueue("t", "b", 1)])
    items = [Outgoing(Message("t", b"x" * 10)) for _ in range(7)]
    results = send_all(sender, items, "pg", max_batch_messages=3)
    assert [c[2] for c in sender.calls] == [3, 3, 1]
    assert len({(r.queue, r.msg_id, r.queue_offset) for r in results}) == 7


def test_calls_in_a_row_take_turns_over_the_queues() -> None:
    """Successive Send calls (a sink's 256 rows each) and half-message sends go on where the
    last call stopped, not each from the first queue."""
    qs = [MessageQueue("t", "b", i) for i in range(4)]
    sender, turns = FakeSender(qs), RoundRobin(seed=11)
    for call in range(4):
        send_all(sender, [Outgoing(Message("t", b"%d" % i)) for i in range(3)], "pg", depth=1)
    assert sorted(len(m) for m in sender.stored.values()) == [3, 3, 3, 3]
    halves = FakeSender(qs)
    for call in range(2):
        results = send_halves(halves, [Outgoing(Message("t", b"h"))] * 6, "pg", "tx", tag_property="TAG",
                              rotation=turns)
        assert all(r.queue == qs[(qs.index(results[0].queue) + i) % 4] for i, r in enumerate(results))
    assert sorted(len(m) for m in halves.stored.values()) == [3, 3, 3, 3]
    assert all(m.properties["TAG"] == "tx" for msgs in halves.stored.values() for m in msgs)


def test_a_half_message_a_busy_broker_refused_is_sent_again_once() -> None:
    """SYSTEM_BUSY stores nothing: the refused half message goes again to its queue, each
    message is stored once, and the results stay in request order (the order the commits
    go in, which is the order consumers see; where the half messages sit does not matter)."""
    from rocketmq_spark.errors import BrokerError

    class Busy(FakeSender):
        refusals = 2

        def send_async(self, message, *, queue, producer_group="", **kw):  # type: ignore[no-untyped-def]
            if self.refusals:
                self.refusals -= 1
                return Refused()
            return super().send_async(message, queue=queue, producer_group=producer_group)

    class Refused:
        def result(self):  # type: ignore[no-untyped-def]
            raise BrokerError(2, "[TIMEOUT_CLEAN_QUEUE]broker busy, start flow control for a while")

    qs = [MessageQueue("t", "broker-a", i) for i in range(2)]
    halves = Busy(qs)
    items = [Outgoing(Message("t", f"h{i}".encode()), sharding_key="k") for i in range(5)]
    results = send_halves(halves, items, "pg", "tx", tag_property="TAG")
    (q,) = {r.queue for r in results}
    assert sorted(m.body for m in halves.stored[q]) == [f"h{i}".encode() for i in range(5)]
    assert [halves.stored[q][r.queue_offset].body for r in results] == [f"h{i}".encode() for i in range(5)]
    assert halves.refusals == 0


def test_a_half_message_without_an_answer_in_time_is_sent_again_and_its_answer_kept() -> None:
    """The broker stored the first copy but its answer did not come in time: the copy sent
    again is the one whose result comes back (the decision will name it); the first is
    left for its check-back to roll back. Past the retries the timeout is raised."""
    from rocketmq_spark.errors import RequestTimeout

    class Slow(FakeSender):
        timeouts = 1

        def send_async(self, message, *, queue, producer_group="", **kw):  # type: ignore[no-untyped-def]
            stored = super().send_async(message, queue=queue, producer_group=producer_group)
            if self.timeouts:
                self.timeouts -= 1
                return Late()
            return stored

    class Late:
        def result(self):  # type: ignore[no-untyped-def]
            raise RequestTimeout("no answer from 127.0.0.1:10911 to request code 310 within 3 s")

    qs = [MessageQueue("t", "broker-a", 0)]
    halves = Slow(qs)
    (result,) = send_halves(halves, [Outgoing(Message("t", b"h"), sharding_key="k")], "pg", "tx", tag_property="TAG")
    assert len(halves.stored[qs[0]]) == 2 and result.queue_offset == 1     # the second copy's answer

    never = Slow(qs)
    never.timeouts = 99
    with pytest.raises(RequestTimeout):
        send_halves(never, [Outgoing(Message("t", b"h"))], "pg", "tx", tag_property="TAG")
    assert len(never.stored[qs[0]]) == 3                                    # sent, then twice again
