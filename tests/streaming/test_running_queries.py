"""Continuously running queries (processing-time triggers) against a changing cluster:

* concurrent mode: rows sent back from ``foreachBatch`` come again through
  ``%RETRY%<group>`` with ``reconsume_times + 1`` and reach ``%DLQ%<group>`` after the
  maximum;
* a queue added to the topic while the query runs is read from its earliest offset.
"""

from __future__ import annotations

from rocketmq_spark.remoting.codes import dlq_topic, retry_topic
from rocketmq_spark.spark import send_back
from rocketmq_spark.structs import Message, PullStatus

from .streams import group_offsets, source, wait_until

MAX_RECONSUME = 2


def _queues_of(mq, topic):  # type: ignore[no-untyped-def]
    try:
        return sorted(mq.subscribe_queues(topic, refresh=True))
    except Exception:  # noqa: BLE001 - the broker creates it on the first send-back
        return []


def _stored(mq, topic):  # type: ignore[no-untyped-def]
    return sum(mq.max_offset(q) for q in _queues_of(mq, topic))


def _pull_all(mq, topic, group):  # type: ignore[no-untyped-def]
    out = []
    for q in _queues_of(mq, topic):
        offset = mq.min_offset(q)
        while offset < mq.max_offset(q):
            r = mq.pull(q, offset, group=group, max_nums=32)
            assert r.status is PullStatus.FOUND, (q, offset, r.status)
            out.extend(r.messages)
            offset = r.next_begin_offset
    return out


def test_sent_back_rows_return_with_one_more_reconsume_and_end_in_the_dlq(spark, rocketmq, tmp_path):
    mq = rocketmq.admin
    topic = rocketmq.create_topic("retry", queues=1)          # one queue per broker
    queues = sorted(mq.subscribe_queues(topic, refresh=True))
    group = rocketmq.unique("gretry")
    options = {"nameServer": rocketmq.namesrv_addr, "topic": topic, "consumerGroup": group,
               "consumeMode": "concurrent", "startingOffsets": "earliest",
               "queueRefreshIntervalMs": "300"}
    bodies = [f"m{i}".encode() + b"\x00" + bytes([i, 255]) for i in range(6)]
    for i, body in enumerate(bodies):
        r = mq.send(Message(topic, body, tags="T", keys=f"k{i}"), queue=queues[i % len(queues)])
        assert r.status == "SEND_OK"
    failing = bodies[:2]
    seen: list[tuple[bytes, int, str]] = []

    def process(df, batch_id):  # type: ignore[no-untyped-def]
        seen.extend((bytes(r.body), r.reconsume_times, r.topic)
                    for r in df.select("body", "reconsume_times", "topic").collect())
        send_back(df.where(df.body.isin(failing)), options=options, delay_level=1,
                  max_reconsume_times=MAX_RECONSUME)

    query = (spark.readStream.format("rocketmq").options(**options).load()
             .writeStream.foreachBatch(process).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(processingTime="200 milliseconds").start())
    dlq, retry = dlq_topic(group), retry_topic(group)
    try:
        wait_until(lambda: query.exception() is not None or _stored(mq, dlq) >= len(failing), 120,
                   f"both failing messages in {dlq}")
        assert query.exception() is None, query.exception()
        # the query read every redelivery: its group offsets reached the retry topic's end
        wait_until(lambda: all(o == mq.max_offset(q) for q, o in
                               group_offsets(mq, group, _queues_of(mq, retry)).items()), 60,
                   "the query to read the retry topic to its end")
    finally:
        query.stop()
    assert query.exception() is None

    for body in bodies:
        times = [t for b, t, _ in seen if b == body]
        # a failing message: the original, then one redelivery per send-back until the max
        assert times == (list(range(MAX_RECONSUME + 1)) if body in failing else [0]), (body, times)
    assert {t for _, _, t in seen} == {topic}           # redeliveries carry the original topic

    if rocketmq.external:   # an Apache broker creates DLQ topics write-only
        mq.create_topic(dlq, queues=1)
    dead = _pull_all(mq, dlq, group)
    assert sorted(m.body for m in dead) == sorted(failing)
    for m in dead:
        assert m.reconsume_times == MAX_RECONSUME + 1
        assert m.properties.get("RETRY_TOPIC") == topic
    assert _stored(mq, retry) == len(failing) * MAX_RECONSUME


def test_a_queue_added_mid_stream_is_read_from_its_earliest_offset(spark, rocketmq, tmp_path):
    mq = rocketmq.admin
    topic = rocketmq.create_topic("grow", queues=1)           # one queue per broker
    group = rocketmq.unique("ggrow")
    sent: dict[tuple, bytes] = {}

    def produce(queues, n: int, salt: str) -> None:
        for q in queues:
            for i in range(n):
                body = f"{salt}-{q.broker_name}-{q.queue_id}-{i}".encode() + b"\x00"
                r = mq.send(Message(topic, body), queue=q)
                assert r.status == "SEND_OK"
                sent[(r.queue.broker_name, r.queue.queue_id, r.queue_offset)] = body

    seen: list[tuple] = []

    def collect(df, batch_id):  # type: ignore[no-untyped-def]
        seen.extend((r.broker, r.queue_id, r.queue_offset, bytes(r.body))
                    for r in df.select("broker", "queue_id", "queue_offset", "body").collect())

    old = sorted(mq.subscribe_queues(topic, refresh=True))
    produce(old, 3, "old")
    query = (source(spark, rocketmq.namesrv_addr, topic, group, startingOffsets="earliest",
                    queueRefreshIntervalMs=1500)
             .writeStream.foreachBatch(collect).option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(processingTime="200 milliseconds").start())
    try:
        wait_until(lambda: len(seen) == len(sent), 90, "the first messages")
        mq.create_topic(topic, queues=3)                      # UPDATE_AND_CREATE_TOPIC, running topic
        new = [q for q in rocketmq.wait_for_route(topic, 3) if q.queue_id >= 1]
        assert len(new) == 2 * len(old)
        # sent at once, before the query's next queue-list refresh
        produce(new, 4, "new")
        produce(old, 2, "old2")
        wait_until(lambda: query.exception() is not None or len(seen) >= len(sent), 90,
                   "the messages of the new queues")
        assert query.exception() is None, query.exception()
        everything = old + new
        wait_until(lambda: group_offsets(mq, group, everything) == {q: mq.max_offset(q) for q in everything},
                   30, "the progress of every queue on the broker")
    finally:
        query.stop()
    assert len(seen) == len(sent)
    assert {(b, i, o): body for b, i, o, body in seen} == sent
    for q in new:
        assert sorted(o for b, i, o, _ in seen if (b, i) == (q.broker_name, q.queue_id)) == [0, 1, 2, 3]
