"""failOnDataLoss both ways, with retention for real: a private embedded cluster with
4 KiB commit-log segments, whose oldest segments are deleted below where a stopped
query's checkpoint resumes.

* ``failOnDataLoss=true``: the restarted query fails with an error naming the queue and
  the offsets that are gone.
* ``failOnDataLoss=false``: it skips to the queue's new min offset with a warning, and
  goes on reading what comes next.
"""

from __future__ import annotations

import logging
import shutil

import pytest

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.sidecar import DataLossError
from rocketmq_spark.spark import options as source_options
from rocketmq_spark.spark.stream_reader import RocketMQStreamReader
from rocketmq_spark.structs import Message

from .streams import run_available_now, source, wait_until

pytestmark = pytest.mark.embedded_only("small commit-log segments whose deletion it forces")

SEGMENT = 4096
FIRST, MORE = 30, 60


def _produce(mq: MQClient, q: MessageQueue, start: int, n: int) -> None:
    for i in range(start, start + n):
        body = f"{i:05d}".encode() + b"\x00" + bytes(range(200))
        assert mq.send(Message(q.topic, body), queue=q).status == "SEND_OK"


@pytest.fixture(scope="module")
def retention(spark, tmp_path_factory):  # type: ignore[no-untyped-def]
    """Two checkpoints that stopped at offset FIRST; then segments deleted past it."""
    from rocketmq_spark.embedded import EmbeddedCluster

    tmp = tmp_path_factory.mktemp("data-loss")
    with EmbeddedCluster(tmp / "rmq", namesrv_port=0, segment_size=SEGMENT, flush="async") as cluster:
        mq = MQClient(ClientConfig.parse(cluster.namesrv_addr))
        try:
            topic = "loss_topic"
            cluster.create_topic(topic, 1)
            q = MessageQueue(topic, "broker-a", 0)
            _produce(mq, q, 0, FIRST)
            ck = tmp / "ck"
            df = source(spark, cluster.namesrv_addr, topic, "loss_group", startingOffsets="earliest")
            run_available_now(df, checkpoint=str(ck), foreach_batch=lambda d, i: d.count())
            shutil.copytree(ck, tmp / "ck2")
            _produce(mq, q, FIRST, MORE)
            # retention: drop the segments wholly before the message at offset FIRST + 20
            phys = mq.pull(q, FIRST + 20, group="probe", max_nums=1).messages[0].commit_log_offset
            cluster.brokers["broker-a"].store.delete_segments_before(phys)
            min_offset = mq.min_offset(q)
            assert FIRST < min_offset <= FIRST + 20, min_offset
            yield {"cluster": cluster, "mq": mq, "q": q, "topic": topic, "min": min_offset,
                   "ck": [ck, tmp / "ck2"]}
        finally:
            mq.close()


def test_fail_on_data_loss_true_fails_naming_the_queue_and_offsets(spark, retention):
    r = retention
    df = source(spark, r["cluster"].namesrv_addr, r["topic"], "loss_group", failOnDataLoss="true")
    q = (df.writeStream.foreachBatch(lambda d, i: d.count()).option("checkpointLocation", str(r["ck"][0]))
         .trigger(availableNow=True).start())
    with pytest.raises(Exception) as err:
        q.awaitTermination(120)
    text = str(err.value)
    assert f"{r['topic']}/broker-a/0: offsets [{FIRST}, {r['min']}) are no longer stored" in text
    assert "failOnDataLoss=false" in text
    assert not q.isActive


def test_fail_on_data_loss_false_skips_with_a_warning_and_continues(spark, retention, caplog):
    r = retention
    seen: list[int] = []

    def collect(df, batch_id):  # type: ignore[no-untyped-def]
        seen.extend(row.queue_offset for row in df.select("queue_offset").collect())

    df = source(spark, r["cluster"].namesrv_addr, r["topic"], "loss_group", failOnDataLoss="false")
    query = (df.writeStream.foreachBatch(collect).option("checkpointLocation", str(r["ck"][1]))
             .trigger(processingTime="200 milliseconds").start())
    try:
        end = FIRST + MORE
        wait_until(lambda: query.exception() is not None or len(seen) >= end - r["min"], 90,
                   "the query to read what is left")
        assert query.exception() is None, query.exception()
        _produce(r["mq"], r["q"], end, 5)                    # it goes on
        wait_until(lambda: len(seen) >= end + 5 - r["min"], 60, "the messages sent afterwards")
    finally:
        query.stop()
    assert seen == list(range(r["min"], FIRST + MORE + 5))

    # the warning, from the stream reader itself (Spark runs it in a worker process)
    opts = {"nameServer": r["cluster"].namesrv_addr, "topic": r["topic"],
            "messageModel": "broadcasting", "startingOffsets": "earliest"}
    start = {r["topic"]: {"broker-a": {"0": FIRST}}}
    from rocketmq_spark.spark.features import ReadAllAvailable

    reader = RocketMQStreamReader(source_options.parse({**opts, "failOnDataLoss": "false"}))
    with caplog.at_level(logging.WARNING, logger="rocketmq_spark.spark.stream_reader"):
        end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {r["topic"]: {"broker-a": {"0": FIRST + MORE + 5}}}
    assert any(f"offsets [{FIRST}, {r['min']}) are no longer stored" in m and f"skipping to {r['min']}" in m
               for m in caplog.messages), caplog.messages
    strict = RocketMQStreamReader(source_options.parse(opts))
    with pytest.raises(DataLossError, match=rf"\[{FIRST}, {r['min']}\) are no longer stored"):
        strict.latestOffset(start, ReadAllAvailable())
