"""The source against the independent C++ client (``rocketmq==0.4.4``).

* The C++ producer sends orderly by sharding key (queue = key % queue count), with tags,
  keys and binary bodies (NUL bytes, every byte value, a body the client compresses);
  the source reads everything exactly once into parquet (Trigger.AvailableNow with a
  checkpoint), byte for byte, each queue in one file in queue-offset order.
* An orderly C++ push consumer of the same group gets nothing while an orderly query
  holds the queues (its lock attempts are refused; the query's locks are renewed), and
  consumes the rest once ``query.stop()`` unlocked them.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq

from rocketmq_spark.spark import features
from rocketmq_spark.sidecar import Cluster, connect
from rocketmq_spark.structs import Message

from .streams import group_offsets, input_rows, run_available_now, source, wait_until

KEYS = 6


def cpp_body(key: int, seq: int) -> bytes:
    head = f"{key}:{seq}:".encode()
    if seq == 7:
        return head + bytes(range(256)) * 24          # > 4 KiB: the C++ client compresses it
    return head + b"\x00" + bytes([(key * 31 + seq * 7 + k) % 256 for k in range(seq % 40)]) + b"\x00"


def test_cpp_orderly_producer_read_exactly_once_byte_for_byte_in_queue_order(
        spark, rocketmq, cpp_home, tmp_path):
    from tests.cppclient import CppProducer, SendStatus
    from tests.interop.helpers import warm_up

    topic = rocketmq.create_topic("cppord", queues=2)          # 2 per broker
    queues = sorted(rocketmq.admin.subscribe_queues(topic, refresh=True))
    group = rocketmq.unique("gcpp")
    sent = {}                                                  # body -> (key, seq, tags, keys, uniq, offset)

    def produce(producer, seqs):
        for seq in seqs:
            for key in range(KEYS):
                body, tags, keys = cpp_body(key, seq), f"Tag{key % 3}", f"order-{key}-{seq}"
                r = producer.send_orderly(topic, body, key, tags=tags, keys=keys)
                assert r.status == SendStatus.OK, r
                sent[body] = (key, seq, tags, keys, r.msg_id, r.offset)

    out, ck = tmp_path / "out", tmp_path / "ck"
    df = source(spark, rocketmq.namesrv_addr, topic, group, startingOffsets="earliest")
    with CppProducer(rocketmq.namesrv_addr, rocketmq.unique("pcpp")) as producer:
        # right after start the C++ producer races its own connections (tests/interop/
        # conftest.py): once, the first message of a key went to another queue than the rest
        warm_up(producer, rocketmq)
        produce(producer, range(20))
        run_available_now(df, checkpoint=str(ck), path=str(out))
        first = spark.read.parquet(str(out)).collect()
        assert len(first) == len(sent) == 20 * KEYS
        first_end = {q: rocketmq.admin.max_offset(q) for q in queues}

        # the same checkpoint again: only what the C++ client sent since
        produce(producer, range(20, 25))
        q = run_available_now(df, checkpoint=str(ck), path=str(out))
        assert input_rows(q) == 5 * KEYS

    rows = spark.read.parquet(str(out)).collect()
    assert len(rows) == len(sent)
    assert len({(r.broker, r.queue_id, r.queue_offset) for r in rows}) == len(rows)
    by_queue: dict[tuple[str, int], list] = defaultdict(list)
    for r in rows:
        body = bytes(r.body)
        assert body in sent, f"a row with a body nobody sent: {body[:40]!r}"
        key, seq, tags, keys, uniq, offset = sent[body]
        assert (r.topic, r.tags, r.keys, r.msg_id, r.queue_offset) == (topic, tags, keys, uniq, offset)
        assert r.properties["UNIQ_KEY"] == uniq and r.reconsume_times == 0
        by_queue[(r.broker, r.queue_id)].append(r)
    assert len({bytes(r.body) for r in rows}) == len(sent)

    # orderly sending: each sharding key went to exactly one queue, all queues were used,
    # and within a queue every key's messages are in sending order
    queue_of_key = defaultdict(set)
    for qk, qrows in by_queue.items():
        for r in qrows:
            queue_of_key[sent[bytes(r.body)][0]].add(qk)
        assert sorted(r.queue_offset for r in qrows) == list(range(len(qrows)))
        for key in {sent[bytes(r.body)][0] for r in qrows}:
            seqs = [sent[bytes(r.body)][1] for r in sorted(qrows, key=lambda r: r.queue_offset)
                    if sent[bytes(r.body)][0] == key]
            assert seqs == sorted(seqs) == list(range(25))
    assert all(len(v) == 1 for v in queue_of_key.values()) and len(queue_of_key) == KEYS
    assert len(by_queue) == len(queues)

    # one parquet file per queue and run, its rows in queue-offset order
    for f in sorted(Path(out).glob("part-*.parquet")):
        t = pq.read_table(f).to_pydict()
        assert len({(b, i) for b, i in zip(t["broker"], t["queue_id"])}) == 1, f.name
        assert t["queue_offset"] == sorted(t["queue_offset"]) and len(set(t["queue_offset"])) == len(t["queue_offset"])
    # the group's offsets on the broker: where the last run ended. Spark never commits the
    # last batch of a Trigger.AvailableNow run; from pyspark 4.2 its end comes back as the
    # next latestOffset's start, before that only as the start the next run plans
    ended = {q: rocketmq.admin.max_offset(q) for q in queues} if features.ADMISSION_CONTROL else first_end
    assert group_offsets(rocketmq.admin, group, queues) == ended


def lock_holders(rocketmq, group: str, queues) -> dict | str:  # type: ignore[no-untyped-def]
    """Which client holds each queue's lock on the embedded brokers (a failure's context)."""
    if rocketmq.embedded is None:
        return "unknown (external cluster)"
    brokers = rocketmq.embedded.brokers
    return {f"{q.broker_name}/{q.queue_id}": brokers[q.broker_name].locks.holder(group, q)
            for q in queues}


def query_owner(namesrv: str, topic: str, group: str) -> str:
    """The lock owner the query's options resolve to (as ``source`` sets them)."""
    from rocketmq_spark.spark import options

    return options.parse({"nameServer": namesrv, "topic": topic, "consumerGroup": group}).lock_owner


def test_cpp_orderly_push_consumer_waits_while_the_query_holds_the_queues(
        spark, rocketmq, cpp_home, tmp_path):
    from tests.cppclient import CppPushConsumer

    topic = rocketmq.create_topic("cpplock", queues=2)
    queues = sorted(rocketmq.admin.subscribe_queues(topic, refresh=True))
    group = rocketmq.unique("gcpplock")
    mq = rocketmq.admin
    side, cluster = connect("auto"), Cluster(rocketmq.namesrv_addr)
    where: dict[bytes, tuple] = {}                       # body -> (queue, offset)

    def produce(salt: str, n: int) -> list[bytes]:
        bodies = []
        for i in range(n):
            body = f"{salt}-{i}".encode() + b"\x00\x01"
            r = mq.send(Message(topic, body), queue=queues[i % len(queues)])
            assert r.status == "SEND_OK"
            where[body] = (r.queue, r.queue_offset)
            bodies.append(body)
        return bodies

    seen: list[bytes] = []

    def collect(df, batch_id):  # type: ignore[no-untyped-def]
        seen.extend(bytes(r.body) for r in df.select("body").collect())

    def committed() -> dict:
        return group_offsets(mq, group, queues)

    first = produce("before", 8)
    before = {q: sum(where[b][0] == q for b in first) for q in queues}   # per queue, from offset 0
    query = (source(spark, rocketmq.namesrv_addr, topic, group, startingOffsets="earliest")
             .writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(processingTime="200 milliseconds").start())
    cpp = None
    try:
        try:
            wait_until(lambda: sorted(seen) == sorted(first), 90, "the query to read the first messages")
            wait_until(lambda: committed() == before, 30, "the query's progress on the broker")
            # the query holds every queue: another owner is refused
            assert side.lock(cluster, group, "someone-else", queues, keep_renewed=False) == frozenset()

            cpp = CppPushConsumer(rocketmq.namesrv_addr, group, topic, orderly=True)
            cpp.start()
            wait_until(lambda: cpp.client_id in rocketmq.group_members(group, topic), 30,
                       "the C++ consumer to register")
            during = produce("during", 12)
            wait_until(lambda: sorted(seen) == sorted(first + during), 60,
                       "the query to read what came while the C++ consumer ran")
            # one more round: the C++ consumer, asking for locks all along, still got nothing,
            # and the query kept its locks (renewed)
            more = produce("more", 4)
            wait_until(lambda: len(seen) == len(first + during + more), 60, "the next batch")
            assert cpp.messages == []
            assert side.lock(cluster, group, "someone-else", queues, keep_renewed=False) == frozenset()
            # (the broker's offsets are not compared with the query's here: the C++ client
            # persists every 5 s the offset of each queue rebalancing assigned it, locked or
            # not, so while it is in the group it writes its own stale view over the query's)
        finally:
            query.stop()
        assert query.exception() is None and cpp is not None
        assert sorted(seen) == sorted(first + during + more)       # each once
        # stop() unlocked: the C++ consumer takes the queues and consumes the rest
        rest = produce("after", 8)
        # the C++ client keeps asking for its locks while it waits (its log shows attempts
        # many times a second, and a rebalance every 20 s): it takes a queue once it is free
        try:
            got = cpp.wait_for(len(rest), timeout=120, predicate=lambda m: m.body in rest)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}; the queues' lock holders now: "
                                 f"{lock_holders(rocketmq, group, queues)} (the query's owner "
                                 f"was {query_owner(rocketmq.namesrv_addr, topic, group)!r})") from exc
        got = cpp.messages
    finally:
        if cpp is not None:
            cpp.shutdown()      # also when an assertion above fails: a running C++ consumer
                                # hangs the test process at exit
    assert {m.topic for m in got} == {topic}
    assert len({m.body for m in got}) == len(got), "the C++ consumer got a message twice"
    # The C++ client computes a queue's start offset when rebalancing assigns it the queue
    # and keeps it while it waits for the lock, so besides everything sent after the stop
    # it may get again a suffix of what the query read meanwhile. Per queue: a contiguous
    # run of offsets up to the end, in order, never below the group's offset at its start.
    assert set(rest) <= {m.body for m in got} <= set(during + more + rest)
    for q in queues:
        offsets = [where[m.body][1] for m in got if where[m.body][0] == q]
        assert offsets == list(range(offsets[0], mq.max_offset(q))), (q, offsets)
        assert offsets[0] >= before[q]
