"""A broker that stops answering while a stream runs (a restart, a crash the NameServer has
not noticed yet): its queues wait, the other brokers' queues go on, the query does not
fail; within ``brokerUnavailableTimeoutMs``. A private two-broker embedded cluster whose
broker-b stops serving: its port refuses connections while the NameServer still routes to
it, as when a broker process dies (a NameServer notices after 120 s; a broker stopped
cleanly unregisters, and its queues leave the route).
"""

from __future__ import annotations

import logging

import pytest
from rocketmq_spark.spark.features import ReadAllAvailable

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.errors import TransportError
from rocketmq_spark.spark import options as source_options
from rocketmq_spark.spark.stream_reader import RocketMQStreamReader
from rocketmq_spark.structs import Message

from .streams import source, wait_until

pytestmark = pytest.mark.embedded_only("a broker of its own stops answering while the NameServer still routes it")

TOPIC = "unavailable_topic"


def _send(mq: MQClient, queues: list, tag: str, n: int) -> None:
    for q in queues:
        for i in range(n):
            assert mq.send(Message(TOPIC, f"{tag}:{q.broker_name}:{q.queue_id}:{i}".encode()),
                           queue=q).status == "SEND_OK"


def test_a_stopped_broker_holds_back_its_own_queues_and_the_query_goes_on(spark, tmp_path, caplog):  # type: ignore[no-untyped-def]
    with EmbeddedCluster(tmp_path / "rmq", brokers=2, topics={TOPIC: 2}, flush="async") as cluster:
        mq = MQClient(ClientConfig.parse(cluster.namesrv_addr))
        query = None
        try:
            queues = sorted(mq.publish_queues(TOPIC, refresh=True))
            assert {q.broker_name for q in queues} == {"broker-a", "broker-b"}
            on_a = [q for q in queues if q.broker_name == "broker-a"]
            _send(mq, queues, "before", 3)
            bodies: list[bytes] = []
            df = source(spark, cluster.namesrv_addr, TOPIC, "unavailable_group", startingOffsets="earliest",
                        queueRefreshIntervalMs="500")
            query = (df.writeStream.foreachBatch(lambda d, i: bodies.extend(r.body for r in d.select("body").collect()))
                     .option("checkpointLocation", str(tmp_path / "ck"))
                     .trigger(processingTime="200 milliseconds").start())
            wait_until(lambda: query.exception() is not None or len(bodies) >= 12, 90, "the first messages")

            cluster.brokers["broker-b"].server.stop()
            _send(mq, on_a, "during", 5)
            wait_until(lambda: query.exception() is not None or len(bodies) >= 22, 90,
                       "broker-a's messages while broker-b is stopped")
            assert query.exception() is None, query.exception()
            assert query.isActive
            assert sorted(bytes(b) for b in bodies) == sorted(
                f"{tag}:{q.broker_name}:{q.queue_id}:{i}".encode()
                for tag, qs, n in (("before", queues, 3), ("during", on_a, 5)) for q in qs for i in range(n))

            # what the stream reader says and does (Spark runs it in a process of its own)
            opts = {"nameServer": cluster.namesrv_addr, "topic": TOPIC, "consumerGroup": "unavailable_probe",
                    "consumeMode": "concurrent", "startingOffsets": "earliest"}
            reader = RocketMQStreamReader(source_options.parse(opts))
            start = {TOPIC: {b: {str(q.queue_id): 0 for q in queues if q.broker_name == b}
                             for b in ("broker-a", "broker-b")}}
            with caplog.at_level(logging.WARNING, logger="rocketmq_spark.spark.stream_reader"):
                end = reader.latestOffset(start, ReadAllAvailable())
            assert end[TOPIC]["broker-a"] == {str(q.queue_id): 8 for q in on_a}
            assert end[TOPIC]["broker-b"] == start[TOPIC]["broker-b"]
            assert any("broker broker-b does not answer" in m for m in caplog.messages), caplog.messages
            strict = RocketMQStreamReader(source_options.parse({**opts, "brokerUnavailableTimeoutMs": "0"}))
            with pytest.raises(TransportError, match="broker broker-b has not answered"):
                strict.latestOffset(start, ReadAllAvailable())
        finally:
            if query is not None:
                query.stop()
            mq.close()
