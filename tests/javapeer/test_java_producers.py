"""RocketMQ's Java producers -> our source: every message once, with the body, keys, tags and
properties the Java client sent. One topic per way of sending (sync, async, oneway, batch,
orderly with a MessageQueueSelector on a key, transactional with a check-back, bodies over
4 KiB that the producer zlib-compresses by default, and on 5.x clients LZ4 and ZSTD),
all read by one Spark batch read of the topics."""

from __future__ import annotations

from collections import defaultdict

import pytest

from tests.java.peer import JavaPeer, major

COUNTS = {"sync": 20, "async": 20, "oneway": 10, "batch": 20, "orderly": 30, "transaction": 12}
BIG = 8 * 1024                # over the producer's compressMsgBodyOverHowmuch (4 KiB)


def expected_body(mode: str, i: int, size: int) -> bytes:
    body = f"{mode}-{i}".encode()
    return body + b"." * max(0, size - len(body))


def runs(java: JavaPeer) -> list[tuple[str, str, int, int, str]]:
    """(name, mode, count, body size, compression) of every run for this client."""
    out = [(m, m, n, 0, "default") for m, n in COUNTS.items()]
    out.append(("big_zlib", "sync", 6, BIG, "default"))
    if major(java.version) >= 5:
        out += [("big_lz4", "sync", 6, BIG, "lz4"), ("big_zstd", "sync", 6, BIG, "zstd")]
    return out


def test_every_java_producer_reaches_the_source_once_as_sent(spark, rocketmq, java: JavaPeer) -> None:
    topics: dict[str, tuple[str, int, int]] = {}
    for name, mode, count, size, compress in runs(java):
        topic = rocketmq.create_topic(f"java_{name}", queues=4)
        events = java.produce(rocketmq.namesrv_addr, topic, mode, count, size, compress)
        if mode not in ("oneway", "batch"):
            assert {e["seq"] for e in events if e["event"] == "sent"} == set(range(count))
        topics[topic] = (mode, count, size)
    if "transaction" in {m for m, _n, _s in topics.values()}:
        wait_committed(rocketmq, topics)
    rows = (spark.read.format("rocketmq").option("nameServer", rocketmq.namesrv_addr)
            .option("topic", ",".join(topics)).option("startingOffsets", "earliest")
            .load().collect())
    by_topic: dict[str, list] = defaultdict(list)
    for r in rows:
        by_topic[r.topic].append(r)
    for topic, (mode, count, size) in topics.items():
        got = by_topic[topic]
        want = {i for i in range(count) if not (mode == "transaction" and i % 3 == 1)}
        seqs = [int(r.properties["seq"]) for r in got]
        assert sorted(seqs) == sorted(want), (topic, mode, sorted(seqs))
        for r in got:
            i = int(r.properties["seq"])
            assert bytes(r.body) == expected_body(mode, i, size), (topic, i)
            assert r.keys == f"k-{i}" and r.tags == f"T{i % 3}"
            assert r.properties["mode"] == mode
            assert r.msg_id == r.properties["UNIQ_KEY"]
        if mode == "orderly":
            check_orderly(got)


def check_orderly(rows: list) -> None:
    """Each order key on one queue, its messages in send order by queue offset."""
    by_key: dict[str, list] = defaultdict(list)
    for r in rows:
        by_key[r.properties["order"]].append(r)
    for key, rs in by_key.items():
        assert len({(r.broker, r.queue_id) for r in rs}) == 1, key
        ordered = sorted(rs, key=lambda r: r.queue_offset)
        assert [int(r.properties["seq"]) for r in ordered] == sorted(int(r.properties["seq"]) for r in rs)


def wait_committed(rocketmq, topics: dict[str, tuple[str, int, int]]) -> None:
    """The Java producer returned after every check-back was answered: wait until the
    committed copies are in their queues (the broker writes them on the check-back)."""
    from tests.waiting import wait_until

    for topic, (mode, count, _size) in topics.items():
        if mode == "transaction":
            want = sum(1 for i in range(count) if i % 3 != 1)
            wait_until(lambda: sum(rocketmq.admin.max_offset(q) for q in
                                   rocketmq.admin.subscribe_queues(topic, refresh=True)) >= want,
                       30, f"the {want} committed messages of {topic}")


@pytest.mark.parametrize("compress", ["lz4", "zstd"])
def test_a_5x_producer_s_lz4_and_zstd_bodies_are_stored_with_their_type(rocketmq, java5: JavaPeer,
                                                                         compress: str) -> None:
    """What the source decodes is what a 5.x producer wrote: the codec in sysFlag bits 8-10
    (compressType is a 5.x producer setting: the 4.x client zlib-compresses only)."""
    java = java5
    from rocketmq_spark.remoting.codes import MessageSysFlag as F
    from rocketmq_spark.remoting.compression import DEFLATE
    from tests.interop.helpers import read_queue

    topic = rocketmq.create_topic(f"java_type_{compress}", queues=1)
    java.produce(rocketmq.namesrv_addr, topic, "sync", 2, BIG, compress)
    group = rocketmq.unique("g")
    stored = sorted((m for q in rocketmq.admin.subscribe_queues(topic, refresh=True)
                     for m in read_queue(rocketmq.admin, q, group)), key=lambda m: int(m.properties["seq"]))
    assert [m.sys_flag & (F.COMPRESSED | F.COMPRESSION_TYPE_MASK) for m in stored] == \
        [F.COMPRESSED | DEFLATE[compress][0]] * 2
    assert [m.payload() for m in stored] == [expected_body("sync", i, BIG) for i in range(2)]
    assert all(len(m.body) < BIG // 4 for m in stored), [len(m.body) for m in stored]
