"""deliveryGuarantee=exactly-once in the test session's Spark: a batch write and a RocketMQ ->
Spark -> RocketMQ stream deliver every row once (read back by the C++ client and ours), keys
keep their queue and order; a failed job leaves nothing visible; a transaction log that
cannot be written fails the batch with a clear error and commits nothing; the options are
checked. Kills and task retries: tests/sink/test_exactly_once_faults.py."""

from __future__ import annotations

from collections import Counter

import pytest

from rocketmq_spark.remoting.codes import MessageSysFlag, Perm
from rocketmq_spark.remoting.message import PROP_SHARDING_KEY
from rocketmq_spark.sidecar.model import TAG_PROPERTY
from tests.waiting import await_finished, wait_until

from .readback import count, cpp_read, ours_read, write

KEYS = [f"customer-{k}" for k in range(6)]


def eo(**more: str) -> dict[str, str]:
    return {"deliveryGuarantee": "exactly-once", **more}


def _check_keyed(stored: dict, n: int) -> None:
    """Every row once; each key on one queue, in row order."""
    got = [m for msgs in stored.values() for m in msgs]
    seqs = [int(m.payload().decode().split(":")[1]) for m in got]
    assert sorted(seqs) == list(range(n)), Counter(seqs).most_common(3)
    placed: dict[str, set] = {}
    for q, msgs in stored.items():
        per_key: dict[str, list[int]] = {}
        for m in msgs:
            key, seq = m.payload().decode().split(":")
            placed.setdefault(key, set()).add(q)
            per_key.setdefault(key, []).append(int(seq))
            assert m.properties[PROP_SHARDING_KEY] == key
        assert all(s == sorted(s) for s in per_key.values())
    assert all(len(qs) == 1 for qs in placed.values()), placed


def test_batch_write_delivers_every_row_once_as_ordinary_messages(spark, rocketmq, cpp_home):
    topic = rocketmq.create_topic("eo_batch", queues=2)
    n = 600
    rows = [(f"{KEYS[i % len(KEYS)]}:{i}", KEYS[i % len(KEYS)]) for i in range(n)]
    df = spark.createDataFrame(rows, "body string, sharding_key string").coalesce(2)
    write(df, rocketmq, topic=topic, batchSize=50, **eo())
    ours = ours_read(rocketmq, topic)
    _check_keyed(ours, n)
    for msgs in ours.values():
        for m in msgs:   # a committed transactional message, with the half message's properties
            assert m.sys_flag & MessageSysFlag.TRANSACTION_MASK == MessageSysFlag.TRANSACTION_COMMIT_TYPE
            assert m.properties["TRAN_MSG"] == "true" and m.properties[TAG_PROPERTY].count("|") == 5
    cpp = cpp_read(rocketmq, topic)            # an independent consumer sees the same, once
    assert {q: [m.body for m in msgs] for q, msgs in cpp.items()} == \
        {q: [m.payload() for m in msgs] for q, msgs in ours.items()}


def test_a_failed_job_leaves_nothing_visible(spark, rocketmq):
    topic = rocketmq.create_topic("eo_abort", queues=2)
    # partition 1 fails on its last row, after partition 0 and its own first rows were sent
    rows = [(f"p0-{i}", 0) for i in range(40)] + [(f"p1-{i}", 1) for i in range(39)] + [(None, 1)]
    df = spark.createDataFrame(rows, "body string, p int").repartition(2, "p").drop("p")
    with pytest.raises(Exception, match="column 'body' is null"):
        write(df, rocketmq, topic=topic, batchSize=8, **eo())
    assert count(rocketmq, topic) == 0


def test_stream_rocketmq_to_rocketmq_delivers_each_input_once(spark, rocketmq, tmp_path):
    source, sink = rocketmq.create_topic("eo_src", queues=2), rocketmq.create_topic("eo_dst", queues=2)
    from rocketmq_spark.structs import Message

    queues = sorted(rocketmq.admin.subscribe_queues(source, refresh=True))
    n = 300
    for i in range(n):
        rocketmq.admin.send(Message(source, f"{KEYS[i % len(KEYS)]}:{i}".encode()), queue=queues[i % 2])
    group = rocketmq.unique("eo_g")

    def run(limit: int | None) -> None:
        r = (spark.readStream.format("rocketmq").option("nameServer", rocketmq.namesrv_addr)
             .option("topic", source).option("consumerGroup", group).option("startingOffsets", "earliest"))
        if limit:
            r = r.option("maxMessagesPerTrigger", str(limit))
        q = (r.load().selectExpr("body", "split(CAST(body AS STRING), ':')[0] AS sharding_key")
             .writeStream.format("rocketmq").option("nameServer", rocketmq.namesrv_addr)
             .option("topic", sink).option("deliveryGuarantee", "exactly-once")
             .option("transactionalId", f"eo-stream-{group}")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
        await_finished(q, 180)

    run(100)                                    # three micro-batches
    _check_keyed(ours_read(rocketmq, sink), n)
    run(None)                                   # restarted on its checkpoint: nothing new, nothing again
    _check_keyed(ours_read(rocketmq, sink), n)


def test_an_unwritable_transaction_log_fails_the_batch_and_commits_nothing(spark, rocketmq):
    topic = rocketmq.create_topic("eo_nolog", queues=1)
    log_topic = rocketmq.unique("eo_readonly_log")
    rocketmq.admin.create_topic(log_topic, queues=1, perm=Perm.READ)       # no one may write it
    rocketmq.wait_for_route(log_topic, 1)
    df = spark.createDataFrame([(f"r{i}",) for i in range(20)], "body string").coalesce(1)
    with pytest.raises(Exception) as info:
        write(df, rocketmq, topic=topic, **eo(transactionLogTopic=log_topic))
    text = str(info.value)
    assert log_topic in text and "NO_PERMISSION" in text, text[-2000:]
    assert count(rocketmq, topic) == 0
    # its half messages are rolled back (abort), so nothing appears later either
    wait_until(lambda: count(rocketmq, topic) == 0, 2, "the topic to stay empty")


@pytest.mark.parametrize("options, message", [
    (eo(), "exactly-once needs option 'transactionalId'"),                  # a stream w/o either
    (eo(transactionalId="has space"), "'has space' must be 1..200 characters"),
    ({"transactionalId": "x"}, "option 'transactionalId' needs deliveryGuarantee=exactly-once"),
    ({"deliveryGuarantee": "twice"}, "'twice' is not one of at-least-once, exactly-once"),
])
def test_stream_options_are_checked_when_the_query_starts(spark, rocketmq, options, message, tmp_path):
    df = spark.readStream.format("rate").load().selectExpr("CAST(value AS STRING) AS body")
    w = df.writeStream.format("rocketmq").option("nameServer", rocketmq.namesrv_addr).option("topic", "t")
    for k, v in options.items():
        w = w.option(k, v)
    # the checkpoint through the session's conf: the sink does not see it
    spark.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path / "ck"))
    try:
        with pytest.raises(Exception, match=message):
            q = w.start()
            try:
                q.awaitTermination(60)
                raise AssertionError(f"query did not fail: {q.exception()}")
            finally:
                q.stop()
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")


def test_a_log_topic_with_a_bar_is_refused_before_anything_is_sent(spark, rocketmq):
    topic = rocketmq.create_topic("eo_bar", queues=1)
    df = spark.createDataFrame([("a",)], "body string")
    with pytest.raises(Exception, match="option 'transactionLogTopic': 'log|x' has a '|'"):
        write(df, rocketmq, topic=topic, **eo(transactionLogTopic="log|x"))
    assert count(rocketmq, topic) == 0


def test_delay_levels_cannot_be_written_exactly_once(spark, rocketmq):
    df = spark.createDataFrame([("a", 1)], "body string, delay_level int")
    with pytest.raises(Exception, match="column 'delay_level' cannot be written with deliveryGuarantee=exactly-once"):
        write(df, rocketmq, topic="t", **eo())
