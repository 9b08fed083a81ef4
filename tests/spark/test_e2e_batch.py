"""spark.read.format("rocketmq") for real, and send-back through %RETRY% in concurrent mode."""

from __future__ import annotations

import pytest

from rocketmq_spark.spark import send_back
from rocketmq_spark.spark.offsets import from_json

from .helpers import after_last_store, create_topic, end_offsets, produce, wait_until


def batch(spark, cluster, topic, **options):
    r = spark.read.format("rocketmq").option("nameServer", cluster.namesrv_addr).option("topic", topic)
    for k, v in options.items():
        r = r.option(k, str(v))
    return r.load()


def test_batch_read_between_starting_and_ending_offsets(spark, cluster, mq, names):
    topic = names("t")
    queues = create_topic(mq, topic, 2)
    sent = produce(mq, queues, 30)                      # offsets 0..14 in each queue
    q0, q1 = queues

    everything = batch(spark, cluster, topic).collect()
    assert sorted(bytes(r.body) for r in everything) == sorted(s.body for s in sent)

    start = '{"%s": {"%s": {"%d": 3, "%d": 10}}}' % (topic, q0.broker_name, q0.queue_id, q1.queue_id)
    end = '{"%s": {"%s": {"%d": 8}}}' % (topic, q0.broker_name, q0.queue_id)   # q1: latest
    rows = batch(spark, cluster, topic, startingOffsets=start, endingOffsets=end).collect()
    want = {(s.queue, s.offset) for s in sent
            if (s.queue == q0 and 3 <= s.offset < 8) or (s.queue == q1 and s.offset >= 10)}
    assert {(q0 if r.queue_id == q0.queue_id else q1, r.queue_offset) for r in rows} == want
    assert len(rows) == len(want) == 10

    df = batch(spark, cluster, topic, consumeMode="concurrent", minPartitions=5,
               consumerGroup=names("g"))
    assert df.rdd.getNumPartitions() == 5
    assert df.count() == 30


def test_batch_read_rejects_an_end_before_the_start(spark, cluster, mq, names):
    topic = names("t")
    queues = create_topic(mq, topic, 1)
    produce(mq, queues, 5)
    q0 = queues[0]
    spec = lambda n: '{"%s": {"%s": {"%d": %d}}}' % (topic, q0.broker_name, q0.queue_id, n)  # noqa: E731
    with pytest.raises(Exception, match="endingOffsets.*ends at 1, before its starting offset 3"):
        batch(spark, cluster, topic, startingOffsets=spec(3), endingOffsets=spec(1)).collect()
    with pytest.raises(Exception, match="startingOffsets.*names queue .*/9, which does not exist"):
        bad = '{"%s": {"%s": {"9": 0}}}' % (topic, q0.broker_name)
        batch(spark, cluster, topic, startingOffsets=bad).collect()


def test_batch_read_of_a_time_window(spark, cluster, mq, names):
    topic = names("t")
    queues = create_topic(mq, topic, 2)
    before = produce(mq, queues, 8, salt="before")
    t1 = wait_until(lambda: after_last_store(mq, queues), 10, "the clock to pass the last store time")
    inside = produce(mq, queues, 10, salt="inside")
    t2 = wait_until(lambda: after_last_store(mq, queues), 10, "the clock to pass the last store time")
    after = produce(mq, queues, 6, salt="after")

    def bodies(**window):
        return sorted(bytes(r.body) for r in batch(spark, cluster, topic, **window).collect())

    assert bodies(startingTimestamp=t1, endingTimestamp=t2) == sorted(s.body for s in inside)
    assert bodies(endingTimestamp=t1) == sorted(s.body for s in before)
    assert bodies(startingTimestamp=t2) == sorted(s.body for s in after)
    assert bodies(endingTimestamp=t2 + 3_600_000) == sorted(s.body for s in before + inside + after)
    assert bodies(endingTimestamp=0) == []
    with pytest.raises(Exception, match="startingTimestamp.*after.*endingTimestamp"):
        bodies(startingTimestamp=t2, endingTimestamp=t1)


def test_send_back_redelivers_through_the_retry_topic(spark, cluster, mq, names, tmp_path):
    topic, group = names("t"), names("g")
    queues = create_topic(mq, topic, 2)
    sent = produce(mq, queues, 6)
    ck = str(tmp_path / "ck")
    options = {"nameServer": cluster.namesrv_addr, "topic": topic, "consumerGroup": group,
               "consumeMode": "concurrent", "startingOffsets": "earliest"}
    failed_bodies = [s.body for s in sent[:2]]
    sent_back: list[int] = []
    seen: list = []

    def fail_some(df, batch_id):
        sent_back.append(send_back(df.where(df.body.isin(failed_bodies)), options=options,
                                   delay_level=1))

    def collect(df, batch_id):
        seen.extend(df.collect())

    def run(fn):
        df = spark.readStream.format("rocketmq").options(**options).load()
        q = (df.writeStream.foreachBatch(fn).option("checkpointLocation", ck)
             .trigger(availableNow=True).start())
        assert q.awaitTermination(120)
        assert q.exception() is None, q.exception()
        return q

    run(fail_some)
    assert sum(sent_back) == 2
    # the broker redelivers them to %RETRY%<group> after delay level 1 (1 s)
    retry = f"%RETRY%{group}"
    wait_until(lambda: _retry_count(mq, retry) >= 2, 30, "the sent-back messages in " + retry)

    q = run(collect)
    assert sorted(bytes(r.body) for r in seen) == sorted(failed_bodies)
    assert {r.topic for r in seen} == {topic}          # the original topic, restored
    assert {r.reconsume_times for r in seen} == {1}
    end = from_json(end_offsets(q))
    assert sum(o for mq_, o in end.items() if mq_.topic == retry) == 2


def _retry_count(mq, retry_topic):
    try:
        return sum(mq.max_offset(q) for q in mq.subscribe_queues(retry_topic, refresh=True))
    except Exception:
        return 0
