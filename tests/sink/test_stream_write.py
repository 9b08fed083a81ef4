"""df.writeStream.format("rocketmq") for real: micro-batches with a checkpoint, a rocketmq
topic copied into another through Spark, and errors of a streaming query."""

from __future__ import annotations

from pathlib import Path

import pytest

from rocketmq_spark.remoting.message import PROP_SHARDING_KEY
from rocketmq_spark.structs import Message
from tests.interop.helpers import binary
from tests.waiting import await_finished

from .readback import count, ours_read


def _run(df, rocketmq, checkpoint: Path, **options) -> None:
    w = (df.writeStream.format("rocketmq").option("nameServer", rocketmq.namesrv_addr)
         .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True))
    for k, v in options.items():
        w = w.option(k, str(v))
    await_finished(w.start(), 120)


def test_stream_sends_each_new_row_once_across_restarts(spark, rocketmq, tmp_path):
    topic = rocketmq.create_topic("sink_stream", queues=2)
    src, ck = tmp_path / "in", tmp_path / "ck"
    schema = "body binary, tags string, sharding_key string"

    def add_file(name: str, first: int, n: int) -> list[bytes]:
        rows = [(binary(f"stream-{i}"), f"T{i % 2}", f"k{i % 3}") for i in range(first, first + n)]
        spark.createDataFrame(rows, schema).coalesce(1).write.parquet(str(src / name))
        return [r[0] for r in rows]

    def stream():
        return spark.readStream.schema(schema).parquet(str(src / "*"))

    bodies = add_file("a", 0, 30)
    _run(stream(), rocketmq, ck, topic=topic)
    assert count(rocketmq, topic) == 30

    bodies += add_file("b", 30, 20)          # the restarted query sends only the new file
    _run(stream(), rocketmq, ck, topic=topic)
    stored = ours_read(rocketmq, topic)
    got = [m for msgs in stored.values() for m in msgs]
    assert sorted(m.payload() for m in got) == sorted(bodies)
    assert {m.tags for m in got} == {"T0", "T1"}
    for key in ("k0", "k1", "k2"):
        assert len({q for q, msgs in stored.items() for m in msgs
                    if m.properties[PROP_SHARDING_KEY] == key}) == 1


def test_a_topic_copied_through_spark_keeps_bodies_and_per_key_order(spark, rocketmq, tmp_path):
    source = rocketmq.create_topic("sink_copy_src", queues=2)
    target = rocketmq.create_topic("sink_copy_dst", queues=2)
    queues = sorted(rocketmq.admin.publish_queues(source, refresh=True))
    sent, offsets = [], []
    for i in range(40):                       # key k always on source queue k (one key per queue)
        key, body = i % len(queues), binary(f"copy-{i}")
        r = rocketmq.admin.send(Message(source, body, tags="src", keys=f"key-{key}"), queue=queues[key])
        sent.append((f"key-{key}", body))
        offsets.append(r.queue_offset)

    df = (spark.readStream.format("rocketmq").option("nameServer", rocketmq.namesrv_addr)
          .option("topic", source).option("consumerGroup", rocketmq.unique("copy"))
          .option("startingOffsets", "earliest").load()
          .selectExpr("body", "'copied' AS tags", "keys", "keys AS sharding_key",
                      "map('source_offset', CAST(queue_offset AS STRING)) AS properties"))
    _run(df, rocketmq, tmp_path / "ck", topic=target)

    stored = ours_read(rocketmq, target)
    got = [m for msgs in stored.values() for m in msgs]
    assert sorted(m.payload() for m in got) == sorted(b for _, b in sent)
    assert {m.tags for m in got} == {"copied"}
    assert sorted(int(m.properties["source_offset"]) for m in got) == sorted(offsets)
    for key in {k for k, _ in sent}:
        on = [(q, m) for q, msgs in stored.items() for m in msgs if m.keys == key]
        assert len({q for q, _ in on}) == 1, f"{key} spread over several queues"
        assert [m.payload() for _, m in on] == [b for k, b in sent if k == key]   # source order


def test_a_streaming_query_with_a_bad_column_fails_naming_it(spark, rocketmq, tmp_path):
    topic = rocketmq.create_topic("sink_stream_bad", queues=1)
    spark.createDataFrame([(b"x", 1)], "body binary, n int").write.parquet(str(tmp_path / "in" / "a"))
    df = spark.readStream.schema("body binary, n int").parquet(str(tmp_path / "in" / "*"))
    with pytest.raises(Exception, match="column 'n' is not a column of the rocketmq sink"):
        _run(df, rocketmq, tmp_path / "ck", topic=topic)
    assert count(rocketmq, topic) == 0
