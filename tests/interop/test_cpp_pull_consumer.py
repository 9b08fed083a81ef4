"""The C++ pull consumer against the cluster: queue discovery, reading every queue from
offset 0 with the right offsets, tag expressions, and the answers at and past the end.

A pull can fail inside the C++ client without reaching the broker: its heartbeat timer
(first run ~10 ms after start) may be connecting to the same broker, and a pull waits only
3 ms for that connection's lock ("GetTransport ... get timed_mutex timeout" in its log)
before giving up with BROKER_TIMEOUT. Such pulls are repeated (the package's own
``PullConsumer.pull`` loops on BROKER_TIMEOUT forever; here it is bounded).
"""

from __future__ import annotations

from rocketmq_spark.structs import Message
from tests.cluster import ClusterHandle
from tests.cppclient import (
    CppProducer, CppPullConsumer, MessageQueue, PullResult, PullStatus, ReceivedMessage)
from tests.interop.helpers import big, binary, wait_until


def _pull(consumer: CppPullConsumer, mq: MessageQueue, **kwargs: object) -> PullResult:
    """One pull, repeated while the C++ client answers BROKER_TIMEOUT (see the module docstring)."""
    def attempt() -> PullResult | None:
        result = consumer.pull(mq, **kwargs)  # type: ignore[arg-type]
        return None if result.status is PullStatus.BROKER_TIMEOUT else result

    return wait_until(attempt, timeout=10.0, what=f"a pull of {mq} that reaches the broker")


def _read_all(consumer: CppPullConsumer, mq: MessageQueue, page: int) -> list[ReceivedMessage]:
    """Pages of ``page`` messages from offset 0 until NO_NEW_MSG, checking every next offset."""
    out: list[ReceivedMessage] = []
    offset = 0
    for _ in range(1000):
        result = _pull(consumer, mq, offset=offset, max_nums=page)
        if result.status is PullStatus.NO_NEW_MSG:
            assert (result.next_offset, result.messages) == (offset, [])
            return out
        assert result.status is PullStatus.FOUND and 0 < len(result.messages) <= page, result
        assert [m.queue_offset for m in result.messages] == list(range(offset, offset + len(result.messages)))
        assert result.next_offset == offset + len(result.messages)
        out.extend(result.messages)
        offset = result.next_offset
    raise AssertionError(f"{mq} never reached its end")


def test_pull_consumer_reads_every_queue_from_offset_0(rocketmq: ClusterHandle, cpp_producer: CppProducer) -> None:
    topic = rocketmq.create_topic("cpp_pull", queues=2)
    ours_queues = sorted(rocketmq.admin.subscribe_queues(topic, refresh=True))
    target = ours_queues[1]
    # On one queue, in a known order, from our client: singles, a compressed body, a batch.
    expected: list[tuple[bytes, str]] = []
    for i in range(3):
        body, tags = binary(f"ours-{i}"), ("TagA" if i % 2 else "TagB")
        result = rocketmq.admin.send(Message(topic, body, tags=tags), queue=target)
        assert result.queue_offset == len(expected)
        expected.append((body, tags))
    compressed = big("ours-big")
    assert rocketmq.admin.send(Message(topic, compressed, tags="TagA"), queue=target).queue_offset == len(expected)
    expected.append((compressed, "TagA"))
    batch = [binary(f"ours-batch-{i}") for i in range(4)]
    result = rocketmq.admin.send_batch([Message(topic, b, tags="TagB") for b in batch], queue=target)
    assert result.queue_offset == len(expected)
    expected += [(b, "TagB") for b in batch]
    # Anywhere in the topic, from the C++ producer.
    cpp_bodies = [binary(f"cpp-{i}") for i in range(5)] + [big("cpp-big")]
    for body in cpp_bodies:
        cpp_producer.send(topic, body, tags="TagC")

    with CppPullConsumer(rocketmq.namesrv_addr, rocketmq.unique("cpp_pull_g")) as consumer:
        queues = sorted(consumer.queues(topic))
        assert queues == [MessageQueue(q.topic, q.broker_name, q.queue_id) for q in ours_queues]
        mq = MessageQueue(target.topic, target.broker_name, target.queue_id)
        on_target = _read_all(consumer, mq, page=3)
        everything = [m for q in queues for m in _read_all(consumer, q, page=32)]

        # Tag expressions, and the answers at and past the end of the queue.
        tag_a = _pull(consumer, mq, expression="TagA", offset=0, max_nums=32)
        none = _pull(consumer, mq, expression="TagZ", offset=0, max_nums=32)
        past = _pull(consumer, mq, offset=len(on_target) + 10)

    end = len(on_target)  # ours first, then whatever the C++ producer put there
    assert [(m.body, m.tags) for m in on_target[:len(expected)]] == expected
    assert all(m.tags == "TagC" for m in on_target[len(expected):])
    assert all(m.topic == topic and m.queue_id == target.queue_id for m in on_target)
    assert sorted(m.body for m in everything) == sorted([b for b, _ in expected] + cpp_bodies)
    assert tag_a.status is PullStatus.FOUND
    assert [m.body for m in tag_a.messages] == [b for b, t in expected if t == "TagA"]
    assert [m.queue_offset for m in tag_a.messages] == [i for i, (_, t) in enumerate(expected) if t == "TagA"]
    assert (none.status, none.next_offset, none.messages) == (PullStatus.NO_MATCHED_MSG, end, [])
    assert (past.status, past.next_offset, past.messages) == (PullStatus.OFFSET_ILLEGAL, end, [])
