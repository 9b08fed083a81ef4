"""subExpressionType=SQL92 end to end: a real Spark session, the sidecar over gRPC and the
session's cluster (embedded, or an Apache one started with enablePropertyFilter=true)."""

from __future__ import annotations

import pytest
from pyspark.errors import StreamingQueryException

from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.structs import Message

from .helpers import after_available_now, create_topic, run_available_now
from .test_e2e_stream import committed, source


def test_sql92_reads_only_matching_messages_and_offsets_advance_past_the_rest(spark, cluster, mq, names, tmp_path):
    topic, group = names("t"), names("g")
    queues = create_topic(mq, topic, 2)
    sent = []
    for i in range(20):
        q = queues[i % 2]
        tag = ("TagA", "TagB")[(i // 2) % 2]
        r = mq.send(Message(topic, f"m{i}".encode(), tags=tag, properties={"n": str(i)}), queue=q)
        assert r.status == "SEND_OK", r
        sent.append((i, tag))
    df = source(spark, cluster, topic, group, startingOffsets="earliest", subExpressionType="SQL92",
                subExpression="n >= 6 AND TAGS = 'TagA'")
    q = run_available_now(df, checkpoint=str(tmp_path / "ck"), name=names("m"))
    rows = spark.table(q.name).collect()
    assert sorted(bytes(r.body) for r in rows) == sorted(f"m{i}".encode() for i, tag in sent
                                                         if i >= 6 and tag == "TagA")
    assert {r.properties["n"] for r in rows} == {"8", "9", "12", "13", "16", "17"}
    # the filtered-out messages (the last ones included) are passed: each queue's end
    assert committed(mq, group, queues) == after_available_now({mq_: 10 for mq_ in queues},
                                                               {mq_: 0 for mq_ in queues})


def test_sql92_needs_a_selector(spark, cluster, names):
    with pytest.raises(Exception, match="subExpressionType=SQL92 needs a selector"):
        source(spark, cluster, names("t"), names("g"), subExpressionType="SQL92").schema


def test_bad_expression_type_names_the_allowed_values(spark, cluster, names):
    with pytest.raises(Exception, match="'subExpressionType': 'XPATH' is not one of TAG, SQL92"):
        source(spark, cluster, names("t"), names("g"), subExpressionType="XPATH",
               subExpression="a > 1").schema


def test_a_selector_the_brokers_refuse_stops_the_query_with_their_code_and_remark(spark, cluster, mq, names,
                                                                                  tmp_path):
    """Checked with CHECK_CLIENT_CONFIG before the first batch, as the Java consumer does
    (an Apache broker would deliver every message to a pull with it)."""
    topic, group = names("t"), names("g")
    queues = create_topic(mq, topic, 1)
    assert mq.send(Message(topic, b"x", properties={"n": "1"}), queue=queues[0]).status == "SEND_OK"
    df = source(spark, cluster, topic, group, startingOffsets="earliest", subExpressionType="SQL92",
                subExpression="n >")
    with pytest.raises(StreamingQueryException, match=r"SUBSCRIPTION_PARSE_FAILED \(23\)"):
        run_available_now(df, checkpoint=str(tmp_path / "ck"), name=names("m"))


def test_a_batch_read_with_a_selector_the_brokers_refuse_fails_with_their_code_and_remark(spark, cluster, mq,
                                                                                         names):
    """A batch read checks the selector first too (an Apache broker would answer a pull with
    it with every message of the queue)."""
    topic = names("t")
    queues = create_topic(mq, topic, 1)
    assert mq.send(Message(topic, b"x", properties={"n": "1"}), queue=queues[0]).status == "SEND_OK"
    df = (spark.read.format("rocketmq").option("nameServer", cluster.namesrv_addr).option("topic", topic)
          .option("consumerGroup", names("g")).option("subExpressionType", "SQL92").option("subExpression", "n >")
          .load())
    with pytest.raises(Exception, match=r"SUBSCRIPTION_PARSE_FAILED \(23\)") as refused:
        df.collect()
    # refused by the check before the read, not by a pull (which Apache would answer with everything)
    assert "parse the consumer's subscription failed" not in str(refused.value)


def test_a_batch_read_with_sql92_reads_only_matching_messages(spark, cluster, mq, names):
    topic = names("t")
    queues = create_topic(mq, topic, 1)
    for i in range(6):
        assert mq.send(Message(topic, f"m{i}".encode(), properties={"n": str(i)}), queue=queues[0]).status == "SEND_OK"
    rows = (spark.read.format("rocketmq").option("nameServer", cluster.namesrv_addr).option("topic", topic)
            .option("consumerGroup", names("g")).option("subExpressionType", "SQL92")
            .option("subExpression", "n BETWEEN 2 AND 4").load().collect())
    assert sorted(bytes(r.body) for r in rows) == [b"m2", b"m3", b"m4"]


@pytest.mark.embedded_only("a cluster of its own with the property filter off")
def test_brokers_without_the_property_filter_stop_the_query(spark, names, tmp_path):
    topic = names("t")
    with EmbeddedCluster(tmp_path / "data", namesrv_port=0, topics={topic: 1}, enable_property_filter=False) as own:
        df = source(spark, own, topic, names("g"), startingOffsets="earliest", subExpressionType="SQL92",
                    subExpression="n > 1")
        with pytest.raises(StreamingQueryException, match=r"SYSTEM_ERROR \(1\).*The broker does not support "
                                                          r"consumer to filter message by SQL92"):
            run_available_now(df, checkpoint=str(tmp_path / "ck"), name=names("m"))
