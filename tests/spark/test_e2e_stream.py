"""readStream.format("rocketmq") for real: the session's cluster (embedded, or the one at
$ROCKETMQ_NAMESRV), the auto-started sidecar and Spark local[2], through Trigger.AvailableNow
queries."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from pyspark.sql import functions as F

from rocketmq_spark.spark import features
from rocketmq_spark.sidecar import Cluster, connect
from rocketmq_spark.spark.offsets import from_json

from .helpers import (after_available_now, after_last_store, create_topic, end_offsets, produce, rows_per_batch, run_available_now,
                      wait_until)


def source(spark, cluster, topic, group, **options):
    r = (spark.readStream.format("rocketmq").option("nameServer", cluster.namesrv_addr)
         .option("topic", topic).option("consumerGroup", group))
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


def committed(mq, group, queues):
    return {q: mq.query_consumer_offset(group, q) for q in queues}


def test_orderly_exactly_once_bytes_and_order_then_resume(spark, cluster, mq, names, tmp_path):
    topic, group = names("t"), names("g")
    queues = create_topic(mq, topic, 4, every_master=True)   # 4 queues on each master
    sent = produce(mq, queues, 120, salt="a")
    out, ck = str(tmp_path / "out"), str(tmp_path / "ck")

    df = source(spark, cluster, topic, group, startingOffsets="earliest")
    q = run_available_now(df, checkpoint=ck, sink="parquet", path=out)
    rows = spark.read.parquet(out).collect()

    # every message exactly once, bodies byte for byte, tags/keys/ids carried
    assert len(rows) == len(sent)
    got = {(r.broker, r.queue_id, r.queue_offset): r for r in rows}
    assert len(got) == len(rows)
    for s in sent:
        r = got[(s.queue.broker_name, s.queue.queue_id, s.offset)]
        assert bytes(r.body) == s.body
        assert r.topic == topic and r.keys == s.keys and r.msg_id and r.offset_msg_id
        assert r.properties["KEYS"] == s.keys
        assert r.reconsume_times == 0 and r.store_timestamp is not None
    # orderly: one partition per queue, rows in queue-offset order within it. The parquet
    # sink writes one file per partition, in the partition's row order.
    files = sorted(Path(out).glob("part-*.parquet"))
    assert len(files) == len(queues)
    for f in files:
        t = pq.read_table(f).to_pydict()
        assert len(set(zip(t["broker"], t["queue_id"]))) == 1, f"{f.name} holds rows of several queues"
        broker, qid = t["broker"][0], t["queue_id"][0]
        assert t["queue_offset"] == list(range(len(t["queue_offset"])))
        assert t["body"] == [s.body for s in sent if (s.queue.broker_name, s.queue.queue_id) == (broker, qid)]

    # the end offsets are each queue's max, and the group committed them on the broker
    end = from_json(end_offsets(q))
    assert end == {mq_: mq.max_offset(mq_) for mq_ in queues}
    assert committed(mq, group, queues) == after_available_now(end, {mq_: 0 for mq_ in queues})

    # the locks went with the query: another owner can now take every queue
    side = connect("auto")
    c = Cluster(cluster.namesrv_addr)
    got_all = wait_until(lambda: side.lock(c, group, "another-owner", queues, keep_renewed=False)
                         == frozenset(queues), 30, "the query's locks to be released")
    assert got_all
    side.unlock(c, group, "another-owner", queues)

    # run again from the checkpoint: only what came since
    more = produce(mq, queues, 20, salt="b")
    q2 = run_available_now(df, checkpoint=ck, sink="parquet", path=out)
    assert sum(rows_per_batch(q2)) == 20
    all_rows = spark.read.parquet(out).collect()
    assert sorted(bytes(r.body) for r in all_rows) == sorted(s.body for s in sent + more)
    assert committed(mq, group, queues) == after_available_now({mq_: mq.max_offset(mq_) for mq_ in queues}, end)


def test_max_messages_per_trigger_sizes_the_batches(spark, cluster, mq, names, tmp_path):
    topic, group = names("t"), names("g")
    queues = create_topic(mq, topic, 2)
    produce(mq, queues, 50)
    df = source(spark, cluster, topic, group, startingOffsets="earliest", maxMessagesPerTrigger=20)
    q = run_available_now(df, checkpoint=str(tmp_path / "ck"), name=names("m"))
    # before pyspark 4.2 Spark's Trigger.AvailableNow fallback runs one batch, unbounded
    assert [n for n in rows_per_batch(q) if n] == ([20, 20, 10] if features.ADMISSION_CONTROL else [50])
    assert spark.table(q.name).count() == 50
    assert committed(mq, group, queues) == after_available_now({mq_: 25 for mq_ in queues}, {mq_: 0 for mq_ in queues})


def test_starting_offsets_variants(spark, cluster, mq, names, tmp_path):
    topic = names("t")
    queues = create_topic(mq, topic, 2)
    first = produce(mq, queues, 20, salt="first")                 # 10 per queue
    q0, q1 = queues

    def read(ck: str, group: str, **options) -> list:
        name = names("m") + "_" + ck.replace("-", "_")
        run_available_now(source(spark, cluster, topic, group, **options),
                          checkpoint=str(tmp_path / ck), name=name)
        return [bytes(r.body) for r in spark.table(name).collect()]

    # JSON: queue 0 from offset 7; queue 1 not listed -> earliest
    spec = '{"%s": {"%s": {"%d": 7}}}' % (topic, q0.broker_name, q0.queue_id)
    got = read("json", names("g1"), startingOffsets=spec)
    want = [s.body for s in first if s.queue == q1 or s.offset >= 7]
    assert sorted(got) == sorted(want) and len(got) == 13

    # latest: only what is produced after the query started (a continuously running query)
    name = names("m") + "latest"
    live = (source(spark, cluster, topic, names("g2"), startingOffsets="latest")
            .writeStream.format("memory").queryName(name)
            .option("checkpointLocation", str(tmp_path / "latest"))
            .trigger(processingTime="200 milliseconds").start())
    try:
        wait_until(lambda: live.status["message"] == "Waiting for data to arrive", 60,
                   "the query to resolve its starting offsets")
        later = produce(mq, queues, 4, salt="later")
        wait_until(lambda: sum(p["numInputRows"] for p in live.recentProgress) >= 4, 60,
                   "the 4 new messages")
    finally:
        live.stop()
    assert sorted(bytes(r.body) for r in spark.table(name).collect()) == sorted(s.body for s in later)

    # group: a group that never committed starts at latest, and that position is committed,
    # so the next run of the group (even from a new checkpoint) reads what came since
    g3 = names("g3")
    assert read("group-new", g3) == []
    assert committed(mq, g3, queues) == {q: mq.max_offset(q) for q in queues}
    newest = produce(mq, queues, 6, salt="newest")
    assert sorted(read("group-again", g3)) == sorted(s.body for s in newest)

    # timestamp: the first message stored at or after it
    stamp = wait_until(lambda: after_last_store(mq, queues), 10, "the clock to pass the last store time")
    after = produce(mq, queues, 6, salt="after")
    got = read("ts", names("g4"), startingTimestamp=stamp)
    assert sorted(got) == sorted(s.body for s in after)


def test_tag_filter_reads_matching_tags_and_advances_past_the_rest(spark, cluster, mq, names, tmp_path):
    topic, group = names("t"), names("g")
    queues = create_topic(mq, topic, 2)
    tags = ["TagA", "TagB", "TagC"]
    sent = produce(mq, queues, 30, tags=lambda i: tags[i % 3])
    df = source(spark, cluster, topic, group, startingOffsets="earliest",
                subExpression="TagA || TagC")
    q = run_available_now(df, checkpoint=str(tmp_path / "ck"), name=names("m"))
    rows = spark.table(q.name).collect()
    assert sorted(bytes(r.body) for r in rows) == sorted(s.body for s in sent if s.tags != "TagB")
    assert {r.tags for r in rows} == {"TagA", "TagC"}
    assert committed(mq, group, queues) == after_available_now({mq_: 15 for mq_ in queues}, {mq_: 0 for mq_ in queues})


def test_queue_locked_by_another_client_does_not_advance(spark, cluster, mq, names, tmp_path):
    topic, group = names("t"), names("g")
    queues = create_topic(mq, topic, 2)
    sent = produce(mq, queues, 10)
    held, free = queues
    side, c = connect("auto"), Cluster(cluster.namesrv_addr)
    assert side.lock(c, group, "someone-else", [held], keep_renewed=True) == frozenset([held])
    try:
        df = source(spark, cluster, topic, group, startingOffsets="earliest")
        q = run_available_now(df, checkpoint=str(tmp_path / "ck"), name=names("m"))
        rows = spark.table(q.name).collect()
        assert sorted(bytes(r.body) for r in rows) == sorted(s.body for s in sent if s.queue == free)
        assert from_json(end_offsets(q)) == {held: 0, free: 5}
    finally:
        side.unlock(c, group, "someone-else", [held])


def test_concurrent_mode_splits_queues_into_min_partitions(spark, cluster, mq, names, tmp_path):
    topic, group = names("t"), names("g")
    queues = create_topic(mq, topic, 2)
    sent = produce(mq, queues, 40)
    df = (source(spark, cluster, topic, group, startingOffsets="earliest", consumeMode="concurrent",
                 minPartitions=6).withColumn("pid", F.spark_partition_id()))
    q = run_available_now(df, checkpoint=str(tmp_path / "ck"), name=names("m"))
    rows = spark.table(q.name).collect()
    assert sorted(bytes(r.body) for r in rows) == sorted(s.body for s in sent)
    assert len({r.pid for r in rows}) == 6
    assert committed(mq, group, queues) == after_available_now({mq_: 20 for mq_ in queues}, {mq_: 0 for mq_ in queues})
