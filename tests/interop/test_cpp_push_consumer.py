"""The C++ push consumer against the cluster: concurrent, two members sharing a group's
queues (GET_CONSUMER_LIST_BY_GROUP, NOTIFY_CONSUMER_IDS_CHANGED) and committing offsets a new
member resumes from, orderly, broadcasting, tag filtering, and RECONSUME_LATER through
``%RETRY%<group>``.

Messages come from both sides: our client (SEND_MESSAGE_V2, SEND_BATCH_MESSAGE, bodies it
compresses) and the C++ producer. A new group starts at offset 0 of a fresh queue (as
Apache 4.9.8 answers QUERY_CONSUMER_OFFSET then), so messages sent before a consumer
starts are delivered too.
"""

from __future__ import annotations

from collections import defaultdict
from contextlib import contextmanager
from typing import Callable, Iterator

import pytest

from rocketmq_spark.remoting.codes import retry_topic
from rocketmq_spark.structs import Message
from tests.cluster import ClusterHandle
from tests.cppclient import CppProducer, CppPushConsumer, ReceivedMessage
from tests.interop.helpers import (
    BINARY, big, binary, is_compressed, read_topic, same_bodies, single, wait_until)

TIMEOUT = 30.0
PROBE = "Probe"  # tag of probe messages


class Sent:
    """Messages sent to one topic by both clients: body -> (msg id or None, tags, keys, properties)."""

    def __init__(self, rocketmq: ClusterHandle, producer: CppProducer, topic: str) -> None:
        self.rocketmq, self.producer, self.topic = rocketmq, producer, topic
        self.expected: dict[bytes, tuple[str | None, str, str, dict[str, str]]] = {}

    def ours(self, body: bytes, tags: str = "Ours", keys: str = "ok", **props: str) -> None:
        result = self.rocketmq.admin.send(Message(self.topic, body, tags=tags, keys=keys, properties=props))
        self.expected[body] = (result.msg_id, tags, keys, props)

    def ours_batch(self, bodies: list[bytes], tags: str = "OursBatch", **props: str) -> None:
        messages = [Message(self.topic, b, tags=tags, keys=f"ob{i}", properties=props) for i, b in enumerate(bodies)]
        result = self.rocketmq.admin.send_batch(messages)  # SEND_BATCH_MESSAGE
        for i, (body, msg_id) in enumerate(zip(bodies, result.msg_id.split(","), strict=True)):
            self.expected[body] = (msg_id, tags, f"ob{i}", props)

    def cpp(self, body: bytes, tags: str = "Cpp", keys: str = "ck", **props: str) -> None:
        result = self.producer.send(self.topic, body, tags=tags, keys=keys, properties=props)
        self.expected[body] = (result.msg_id, tags, keys, props)

    def cpp_oneway(self, body: bytes, tags: str = "CppOneway", **props: str) -> None:
        self.producer.send_oneway(self.topic, body, tags=tags, keys="cow", properties=props)
        self.expected[body] = (None, tags, "cow", props)

    def mixed(self, label: str) -> None:
        """One of each kind, all bodies binary, two of them over 4 KiB."""
        self.ours(binary(f"{label}-ours"), p=label)
        self.ours(big(f"{label}-ours-big"), p=label)  # compressed by our client
        self.ours_batch([binary(f"{label}-ours-batch-{i}") for i in range(3)], p=label)
        self.cpp(binary(f"{label}-cpp"), p=label)
        self.cpp(big(f"{label}-cpp-big"), p=label)  # compressed by the C++ client
        self.cpp_oneway(binary(f"{label}-cpp-oneway"), p=label)

    def check(self, received: list[ReceivedMessage]) -> None:
        """Every message exactly once, byte for byte, with its topic, tags, keys, properties and id."""
        assert same_bodies((m.body for m in received), self.expected)
        for m in received:
            msg_id, tags, keys, props = self.expected[m.body]
            assert (m.topic, m.tags, m.keys, m.reconsume_times) == (self.topic, tags, keys, 0)
            assert {k: m.properties.get(k) for k in props} == props
            assert m.msg_id == m.properties["UNIQ_KEY"] and (msg_id is None or m.msg_id == msg_id)


def bodies(consumer: CppPushConsumer) -> set[bytes]:
    return {m.body for m in consumer.messages}


def not_probe(m: ReceivedMessage) -> bool:
    return m.tags != PROBE


def probe_until(rocketmq: ClusterHandle, topic: str, label: str, done: Callable[[set[bytes]], bool]) -> None:
    """Send a probe (tag ``Probe``) to every queue of ``topic``, again every second, until
    ``done(probe bodies)``: a way to see which queues a C++ consumer is pulling."""
    probes = {mq: f"probe:{label}:{mq.broker_name}:{mq.queue_id}".encode()
              for mq in rocketmq.admin.publish_queues(topic, refresh=True)}

    def one_round() -> bool:
        for mq, body in probes.items():
            rocketmq.admin.send(Message(topic, body, tags=PROBE), queue=mq)
        try:
            return wait_until(lambda: done(set(probes.values())), timeout=1.0, what=f"probes {label}")
        except TimeoutError:
            return False

    wait_until(one_round, TIMEOUT, f"probes {label} of {topic} seen")


@contextmanager
def group_of_two(rocketmq: ClusterHandle, group: str, topic: str,
                 **options: bool) -> Iterator[tuple[CppPushConsumer, CppPushConsumer]]:
    """Two started consumers of one group (different instance names), shut down in an order
    the C++ client survives.

    When ``second`` joins, ``first`` drops half its queues while their long-polling pulls are
    still held by the brokers. Were ``first`` the one left behind, it would take those queues
    back on the NOTIFY_CONSUMER_IDS_CHANGED of each broker, and the C++ client resumes a
    dropped queue by spinning (in the thread that handles the notification) until the old
    pull is answered, up to 15 s later; with the other broker's notification blocking the
    second thread of the pool that handles answers (one thread per core), nobody reads that
    answer and the consumer hangs for ever (its log repeats "has unfinished pullMsgEvent"). Apache brokers notify and
    hold pulls the same way. So ``first`` leaves first: ``second`` only gains queues it never
    had. And it is shut down only once it pulls all of them, since ``ShutdownPushConsumer``
    during a rebalance can wait for ever on a pull that is never sent.
    """
    first = CppPushConsumer(rocketmq.namesrv_addr, group, topic, **options)
    first.start()
    second: CppPushConsumer | None = None
    try:
        second = CppPushConsumer(rocketmq.namesrv_addr, group, topic, **options)
        second.start()
        yield first, second
    finally:
        first.shutdown()
        if second is not None:
            survivor = second
            try:
                probe_until(rocketmq, topic, f"{group}-drain", lambda probes: probes <= bodies(survivor))
            finally:
                survivor.shutdown()


def test_concurrent_consumer_receives_everything_from_both_clients(
        rocketmq: ClusterHandle, cpp_producer: CppProducer) -> None:
    topic = rocketmq.create_topic("cpp_push", queues=2)
    sent = Sent(rocketmq, cpp_producer, topic)
    sent.mixed("before")  # stored before the group exists
    with CppPushConsumer(rocketmq.namesrv_addr, rocketmq.unique("cpp_cg"), topic) as consumer:
        sent.mixed("after")  # delivered by long polling
        consumer.wait_for(len(sent.expected), timeout=TIMEOUT)
        sent.check(consumer.messages)
    stored = read_topic(rocketmq, topic, count=len(sent.expected))
    assert is_compressed(single(stored, big("before-ours-big")))  # the C++ client inflated our compression
    assert is_compressed(single(stored, big("after-cpp-big")))


# Against Apache 4.9.7 and 5.5.0 brokers (with a slave), the first consumer's shutdown
# waited for ever in ShutdownPushConsumer (the C++ client's rebalance, group_of_two), and with
# it the whole test session: these run against the embedded cluster only.
GROUP_OF_TWO_HANGS = pytest.mark.embedded_only(
    "two C++ push consumers of one group: against a real broker ShutdownPushConsumer waited for ever")


@GROUP_OF_TWO_HANGS
def test_one_group_shares_the_queues_and_resumes_from_committed_offsets(
        rocketmq: ClusterHandle, cpp_producer: CppProducer) -> None:
    topic = rocketmq.create_topic("cpp_share", queues=4)
    group = rocketmq.unique("cpp_scg")
    with group_of_two(rocketmq, group, topic) as (first, second):
        members = {first.client_id, second.client_id}
        wait_until(lambda: rocketmq.group_members(group, topic) == members, TIMEOUT, "both in the group")
        probe_until(rocketmq, topic, "split", lambda probes: all(probes & bodies(c) for c in (first, second)))
        sent = Sent(rocketmq, cpp_producer, topic)
        for i in range(4):
            sent.mixed(f"share-{i}")
        wait_until(lambda: bodies(first) | bodies(second) >= set(sent.expected), TIMEOUT,
                   "every message consumed by the group")
        # The queues were split between the two (a message may come twice while they rebalance).
        real = [m for m in first.messages + second.messages if not_probe(m)]
        assert set(sent.expected) & bodies(first) and set(sent.expected) & bodies(second)
        sent.check(list({m.body: m for m in real}.values()))
    # Shutting down commits every queue (UPDATE_CONSUMER_OFFSET) to the end...
    queues = rocketmq.admin.subscribe_queues(topic)
    wait_until(lambda: all(rocketmq.admin.query_consumer_offset(group, q) == rocketmq.admin.max_offset(q)
                           for q in queues), TIMEOUT, "offsets committed to the end of every queue")
    # ...and a new member of the group resumes there.
    with CppPushConsumer(rocketmq.namesrv_addr, group, topic) as third:
        later = Sent(rocketmq, cpp_producer, topic)
        later.mixed("resumed")
        third.wait_for(len(later.expected), timeout=TIMEOUT)
        later.check(third.messages)


def test_orderly_consumer_keeps_order_per_sharding_key(rocketmq: ClusterHandle, cpp_producer: CppProducer) -> None:
    topic = rocketmq.create_topic("cpp_orderly_push", queues=2)
    keys, rounds = 6, 12  # 6 keys on 4 queues: keys 0/4 and 1/5 share a queue
    with CppPushConsumer(rocketmq.namesrv_addr, rocketmq.unique("cpp_ocg"), topic, orderly=True) as consumer:
        for seq in range(rounds):
            for key in range(keys):
                cpp_producer.send_orderly(topic, f"{key}:{seq}".encode() + BINARY, sharding_arg=key, tags="Ord")
        consumer.wait_for(keys * rounds, timeout=TIMEOUT)
        received = consumer.messages
    assert len(received) == keys * rounds and len({m.body for m in received}) == keys * rounds
    order: dict[int, list[int]] = defaultdict(list)
    for m in received:  # arrival order
        key, seq = m.body[:m.body.index(BINARY)].split(b":")
        order[int(key)].append(int(seq))
    assert order == {key: list(range(rounds)) for key in range(keys)}


def test_broadcasting_consumers_each_receive_every_message(
        rocketmq: ClusterHandle, cpp_producer: CppProducer) -> None:
    topic = rocketmq.create_topic("cpp_bcast", queues=2)
    group = rocketmq.unique("cpp_bcg")
    with group_of_two(rocketmq, group, topic, broadcasting=True) as consumers:
        assert consumers[0].client_id != consumers[1].client_id
        # Broadcasting consumers start at the end of each queue: wait until both pull all of them.
        probe_until(rocketmq, topic, "start", lambda probes: all(probes <= bodies(c) for c in consumers))
        sent = Sent(rocketmq, cpp_producer, topic)
        sent.mixed("bcast")
        for consumer in consumers:
            consumer.wait_for(len(sent.expected), timeout=TIMEOUT, predicate=not_probe)
        for consumer in consumers:
            sent.check([m for m in consumer.messages if not_probe(m)])


def test_tag_filter_delivers_only_the_subscribed_tags(rocketmq: ClusterHandle, cpp_producer: CppProducer) -> None:
    topic = rocketmq.create_topic("cpp_tags", queues=1)
    queues = sorted(rocketmq.admin.publish_queues(topic, refresh=True))
    wanted: list[bytes] = []
    for n, mq in enumerate(queues):  # all sent before the consumer starts: one pull per queue
        for i, tags in enumerate(["TagA", "TagC", None, "TagB", "TagAB", "taga", "TagA", "TagC", "TagB"]):
            body = f"{n}-{i}-{tags}".encode() + BINARY
            rocketmq.admin.send(Message(topic, body, tags=tags), queue=mq)
            if tags in ("TagA", "TagB"):
                wanted.append(body)
    for i, tags in enumerate(["TagB", "TagC", "TagA", "TagD"]):  # and some from the C++ producer
        body = f"cpp-{i}-{tags}".encode() + BINARY
        cpp_producer.send(topic, body, tags=tags)
        if tags in ("TagA", "TagB"):
            wanted.append(body)
    fences = [f"fence-{mq.broker_name}".encode() for mq in queues]  # the last message of each queue
    for mq, fence in zip(queues, fences):
        rocketmq.admin.send(Message(topic, fence, tags="TagB"), queue=mq)
    wanted += fences
    with CppPushConsumer(rocketmq.namesrv_addr, rocketmq.unique("cpp_tcg"), topic, expression="TagA || TagB") \
            as consumer:
        consumer.wait_for(len(fences), timeout=TIMEOUT, predicate=lambda m: m.body in fences)
        consumer.wait_for(len(wanted), timeout=TIMEOUT)
        received = consumer.messages
    assert {m.tags for m in received} == {"TagA", "TagB"}
    assert same_bodies((m.body for m in received), wanted)


def test_reconsume_later_comes_back_through_the_retry_topic(
        rocketmq: ClusterHandle, cpp_producer: CppProducer) -> None:
    """The C++ client sends the message back (CONSUMER_SEND_MSG_BACK, delay level 0: the broker
    picks level 3 = 10 s); the copy lands in %RETRY%<group> and is delivered again."""
    topic = rocketmq.create_topic("cpp_retry", queues=1)
    group = rocketmq.unique("cpp_rcg")
    body = binary("retry-me")
    original = rocketmq.admin.send(Message(topic, body, tags="Retry", keys="rk", properties={"u": "1"}))
    with CppPushConsumer(rocketmq.namesrv_addr, group, topic,
                         reconsume_later=lambda m: m.reconsume_times == 0) as consumer:
        [first] = consumer.wait_for(1, timeout=TIMEOUT)
        assert (first.accepted, first.reconsume_times, first.body, first.msg_id) == \
            (False, 0, body, original.msg_id)
        [copy] = read_topic(rocketmq, retry_topic(group), count=1, timeout=TIMEOUT)
        assert (copy.topic, copy.payload(), copy.reconsume_times, copy.msg_id) == \
            (retry_topic(group), body, 1, original.msg_id)
        assert {k: copy.properties.get(k) for k in ("RETRY_TOPIC", "ORIGIN_MESSAGE_ID", "TAGS", "KEYS", "u",
                                                     "WAIT", "DELAY", "REAL_TOPIC")} == {
            "RETRY_TOPIC": topic, "ORIGIN_MESSAGE_ID": original.offset_msg_id, "TAGS": "Retry", "KEYS": "rk",
            "u": "1", "WAIT": "false", "DELAY": "3", "REAL_TOPIC": retry_topic(group)}
        assert copy.store_timestamp - first.store_timestamp >= 9_000  # delay level 3 (10 s) was applied
        again = consumer.wait_for(1, timeout=TIMEOUT, predicate=lambda m: m.reconsume_times == 1)[0]
    # The client restores the original topic from RETRY_TOPIC; the id stays the UNIQ_KEY.
    assert (again.accepted, again.topic, again.body, again.msg_id, again.tags, again.keys) == \
        (True, topic, body, original.msg_id, "Retry", "rk")
    assert (again.properties["RETRY_TOPIC"], again.properties["ORIGIN_MESSAGE_ID"]) == \
        (topic, original.offset_msg_id)
    assert len(consumer.messages) == 2  # delivered once, redelivered once
