"""The C++ producer against the cluster: what it sends is stored as sent.

Sync, oneway, batch (SEND_MESSAGE with ``batch`` "1") and orderly sends of the C++ client,
each read back with our client's pulls: bodies byte for byte (NUL bytes, bodies the C++
client compresses), tags, keys, user properties, queue offsets.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from rocketmq_spark.remoting.message import MessageExt, decode_batch
from tests.cluster import ClusterHandle
from tests.cppclient import CppProducer, SendStatus
from tests.interop.helpers import COMPRESS_AT, BINARY, big, binary, is_compressed, read_topic, single

# What brokers add to the stored properties: CLUSTER (4.9.8 and 5.x, the embedded broker too);
# 5.x also MSG_REGION, TRACE_ON and keeps WAIT (tests/data/vectors/apache-broker-5 pulls).
BROKER_ADDED = {"CLUSTER", "MSG_REGION", "TRACE_ON", "WAIT"}


def test_sync_sends_are_stored_byte_for_byte(rocketmq: ClusterHandle, cpp_producer: CppProducer) -> None:
    topic = rocketmq.create_topic("cpp_sync", queues=2)
    cases = [  # body, tags, keys, user properties
        (b"plain text", "TagA", ["k1", "k2"], {"color": "red", "n": "1"}),
        (BINARY, "TagB", ["bin"], {"kind": "binary"}),
        (b"\x00", None, None, {}),
        (big("sync-big"), "TagC", ["big"], {"kind": "big"}),
        (b"x" * (COMPRESS_AT - 1), "TagD", None, {}),
    ]
    results = [cpp_producer.send(topic, body, tags=tags, keys=keys, properties=props)
               for body, tags, keys, props in cases]
    assert all(r.status is SendStatus.OK and len(r.msg_id) == 32 for r in results)
    stored = read_topic(rocketmq, topic, count=len(cases))
    assert len(stored) == len(cases)
    for (body, tags, keys, props), result in zip(cases, results):
        m = single(stored, body)
        assert (m.topic, m.msg_id, m.queue_offset, m.reconsume_times) == (topic, result.msg_id, result.offset, 0)
        assert is_compressed(m) == (len(body) >= COMPRESS_AT)  # the C++ client compressed it, the broker kept it
        properties = dict(m.properties)
        assert properties["CLUSTER"]
        expected = {**props, "UNIQ_KEY": result.msg_id}
        if tags:
            expected["TAGS"] = tags
        if keys:
            expected["KEYS"] = " ".join(keys)
        # every sent property stored as sent; anything else is the broker's own
        assert {k: v for k, v in properties.items() if k not in BROKER_ADDED} == expected
        if not rocketmq.external:          # the embedded broker answers as 4.9.8: CLUSTER only
            assert set(properties) - set(expected) == {"CLUSTER"}


def test_oneway_sends_arrive(rocketmq: ClusterHandle, cpp_producer: CppProducer) -> None:
    topic = rocketmq.create_topic("cpp_oneway", queues=2)
    bodies = [binary(f"oneway-{i}") for i in range(5)] + [big("oneway-big")]
    for i, body in enumerate(bodies):
        cpp_producer.send_oneway(topic, body, tags="Oneway", keys=f"ow{i}", properties={"i": str(i)})
    stored = read_topic(rocketmq, topic, count=len(bodies))  # no answer to wait for: poll the queues
    assert len(stored) == len(bodies)
    for i, body in enumerate(bodies):
        m = single(stored, body)
        assert (m.tags, m.keys, m.properties["i"], len(m.properties["UNIQ_KEY"])) == ("Oneway", f"ow{i}", str(i), 32)
    assert len({m.msg_id for m in stored}) == len(bodies)


def _batch_as_stored(rocketmq: ClusterHandle, stored: list[MessageExt], size: int) -> list[tuple[bytes, dict]]:
    """(body, properties) of each batch item as stored. The embedded broker splits a batch
    sent with ``batch`` "1"; Apache 4.9.8 stores it as one message holding the encoded batch
    (cpp-client README, quirk 1), which is accepted only when the cluster is external."""
    if rocketmq.external and len(stored) == 1 and size > 1:
        return [(item.body, dict(item.properties)) for item in decode_batch(stored[0].payload())]
    assert len(stored) == size
    return [(m.payload(), dict(m.properties)) for m in stored]


@pytest.mark.parametrize("item_size", [40, 2000], ids=["plain", "compressed-as-a-whole"])
def test_batch_is_stored_as_separate_messages(rocketmq: ClusterHandle, cpp_producer: CppProducer,
                                              item_size: int) -> None:
    topic = rocketmq.create_topic("cpp_batch", queues=2)
    bodies = [big(f"batch-{i}", item_size) for i in range(3)]  # 3 x 2000 B: the batch body is >= 4096
    result = cpp_producer.send_batch(topic, bodies, tags="TagB", keys=["bk1", "bk2"], properties={"b": "yes"})
    assert (result.status, result.msg_id) == (SendStatus.OK, "")
    stored = read_topic(rocketmq, topic, count=1)
    items = _batch_as_stored(rocketmq, stored, len(bodies))
    assert [body for body, _ in items] == bodies  # in order
    for _, props in items:
        assert (props["TAGS"], props["KEYS"], props["b"], len(props["UNIQ_KEY"])) == ("TagB", "bk1 bk2", "yes", 32)
    if not rocketmq.external:  # split: one queue, consecutive offsets from the reported one, own ids
        assert len({(m.queue_id, m.store_host) for m in stored}) == 1
        assert [m.queue_offset for m in stored] == [result.offset + i for i in range(len(bodies))]
        assert len({m.msg_id for m in stored}) == len(bodies) and not any(is_compressed(m) for m in stored)


def test_orderly_sends_keep_one_queue_per_sharding_arg(rocketmq: ClusterHandle, cpp_producer: CppProducer) -> None:
    topic = rocketmq.create_topic("cpp_orderly", queues=4)
    queue_count = len(rocketmq.admin.publish_queues(topic, refresh=True))  # 4 per master
    args = list(range(queue_count + 2))  # the last two share queues with args 0 and 1
    rounds = 6
    offsets: dict[bytes, int] = {}
    for seq in range(rounds):
        for arg in args:
            body = f"{arg}:{seq}".encode()
            result = cpp_producer.send_orderly(topic, body, sharding_arg=arg, tags="Ordered")
            assert result.status is SendStatus.OK
            offsets[body] = result.offset
    stored = read_topic(rocketmq, topic, count=len(offsets))
    by_arg: dict[int, list[MessageExt]] = defaultdict(list)
    for m in stored:  # ordered by queue, then offset
        assert m.queue_offset == offsets[m.body]
        by_arg[int(m.body.split(b":")[0])].append(m)
    queue_of = {}
    for arg, messages in by_arg.items():
        queues = {(m.store_host, m.queue_id) for m in messages}
        assert len(queues) == 1, f"sharding arg {arg} spread over {queues}"
        queue_of[arg] = queues.pop()
        assert [int(m.body.split(b":")[1]) for m in messages] == list(range(rounds))  # send order
    assert len({queue_of[arg] for arg in range(queue_count)}) == queue_count  # arg % queues: all distinct
    assert queue_of[queue_count] == queue_of[0] and queue_of[queue_count + 1] == queue_of[1]


def test_delayed_send_is_delivered_after_its_level(rocketmq: ClusterHandle, cpp_producer: CppProducer) -> None:
    topic = rocketmq.create_topic("cpp_delay", queues=1)
    body = binary("delayed")
    result = cpp_producer.send(topic, body, tags="Later", delay_level=1)  # level 1 = 1 s
    assert result.status is SendStatus.OK
    [m] = read_topic(rocketmq, topic, count=1)
    assert (m.payload(), m.msg_id, m.tags) == (body, result.msg_id, "Later")
    assert (m.properties["DELAY"], m.properties["REAL_TOPIC"], m.properties["REAL_QID"]) == \
        ("1", topic, str(m.queue_id))
    assert m.store_timestamp - m.born_timestamp >= 900  # stored in the topic once the level's 1 s passed


def test_send_to_an_unknown_topic_creates_it(rocketmq: ClusterHandle, cpp_producer: CppProducer) -> None:
    """The C++ producer falls back to TBW102's route and the broker creates the topic on the
    first send (Apache's default ``autoCreateTopicEnable=true``)."""
    topic = rocketmq.unique("cpp_auto")
    result = cpp_producer.send(topic, BINARY, tags="Auto")
    assert result.status is SendStatus.OK
    [m] = read_topic(rocketmq, topic, count=1)
    assert (m.payload(), m.msg_id, m.queue_offset) == (BINARY, result.msg_id, result.offset)
