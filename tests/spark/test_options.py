"""Options: every bad value is an error naming the option; defaults and derived values."""

from __future__ import annotations

import pytest

from rocketmq_spark.errors import ConfigError
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.spark import options as opts
from rocketmq_spark.spark.offsets import (EarliestStart, GroupStart, LatestEnd, LatestStart,
                                          SpecificOffsets, TimestampEnd, TimestampStart, dumps,
                                          from_json)

BASE = {"nameServer": "127.0.0.1:9876", "topic": "orders"}


def parse(kind="stream", **extra):
    return opts.parse({**BASE, **extra}, kind)


BAD = [
    # (options over BASE (None removes), kind, text the error must contain)
    ({"nameServer": None}, "stream", "'nameServer' is required"),
    ({"nameServer": ""}, "stream", "'nameServer'"),
    ({"nameServer": "localhost"}, "stream", "'nameServer': 'localhost' is not host:port"),
    ({"nameServer": "h:99999"}, "stream", "'nameServer': 'h:99999'"),
    ({"topic": None}, "stream", "'topic' is required"),
    ({"topic": " "}, "stream", "'topic'"),
    ({"topic": "a,,b"}, "stream", "'topic': 'a,,b' has an empty topic"),
    ({"topic": "bad topic"}, "stream", "'topic': topic 'bad topic'"),
    ({"topic": "a,a"}, "stream", "names a topic twice"),
    ({"topic": "x" * 128}, "stream", "longer than 127"),
    ({"consumerGroup": "my group"}, "stream", "'consumerGroup': group 'my group'"),
    ({"consumerGroup": ""}, "stream", "'consumerGroup' must not be empty"),
    ({"consumeMode": "fifo"}, "stream", "'consumeMode': 'fifo' is not one of orderly, concurrent"),
    ({"messageModel": "cluster"}, "stream", "'messageModel': 'cluster' is not one of clustering, broadcasting"),
    ({"subExpression": "A ||"}, "stream", "'subExpression': 'A ||' has an empty tag"),
    ({"subExpression": "A || *"}, "stream", "'subExpression'"),
    ({"startingOffsets": "newest"}, "stream", "'startingOffsets': 'newest' is not one of group, earliest, latest"),
    ({"startingOffsets": "latest"}, "batch", "'startingOffsets': 'latest' is not one of group, earliest"),
    ({"startingOffsets": "{bad"}, "stream", "startingOffsets: not valid JSON"),
    ({"startingOffsets": '{"orders": {"b": {"x": 1}}}'}, "stream", "startingOffsets: queue id 'x'"),
    ({"startingOffsets": '{"orders": {"b": {"0": -3}}}'}, "stream", "startingOffsets: offset of orders/b/0"),
    ({"startingOffsets": '{"orders": {"b": {"0": 1.5}}}'}, "stream", "startingOffsets: offset of orders/b/0"),
    ({"startingOffsets": '{"orders": {"b": {"0": -1}}}'}, "batch", "startingOffsets: -1 (latest) is not allowed"),
    ({"startingOffsets": "[1]"}, "stream", "'startingOffsets': '[1]' is not one of"),
    ({"startingOffsets": "earliest", "startingTimestamp": "5"}, "stream",
     "'startingOffsets' and 'startingTimestamp' are exclusive"),
    ({"startingTimestamp": "yesterday"}, "stream", "'startingTimestamp': 'yesterday' is not an integer"),
    ({"startingTimestamp": "-1"}, "stream", "'startingTimestamp': -1 must be >= 0"),
    ({"startingOffsets": "group", "messageModel": "broadcasting"}, "stream",
     "'startingOffsets': group needs messageModel=clustering"),
    ({"endingOffsets": "latest"}, "stream", "'endingOffsets' applies to batch reads only"),
    ({"endingOffsets": "earliest"}, "batch", "'endingOffsets': 'earliest' is not one of latest"),
    ({"endingTimestamp": "5"}, "stream", "'endingTimestamp' applies to batch reads only"),
    ({"endingTimestamp": "-1"}, "batch", "'endingTimestamp': -1 must be >= 0"),
    ({"endingTimestamp": "noon"}, "batch", "'endingTimestamp': 'noon' is not an integer"),
    ({"startingTimestamp": "9", "endingTimestamp": "5"}, "batch",
     "'startingTimestamp': 9 is after 'endingTimestamp' 5"),
    ({"endingOffsets": "latest", "endingTimestamp": "5"}, "batch",
     "'endingOffsets' and 'endingTimestamp' are exclusive"),
    ({"endingOffsets": '{"orders": {"b": {"0": -2}}}'}, "batch", "'endingOffsets': -2 (earliest)"),
    ({"failOnDataLoss": "yes"}, "stream", "'failOnDataLoss': 'yes' is not one of true, false"),
    ({"maxMessagesPerTrigger": "0"}, "stream", "'maxMessagesPerTrigger': 0 must be >= 1"),
    ({"maxMessagesPerTrigger": "ten"}, "stream", "'maxMessagesPerTrigger': 'ten' is not an integer"),
    ({"minPartitions": "0", "consumeMode": "concurrent"}, "stream", "'minPartitions': 0 must be >= 1"),
    ({"minPartitions": "4"}, "stream", "'minPartitions' applies to consumeMode=concurrent only"),
    ({"pullBatchSize": "0"}, "stream", "'pullBatchSize': 0 must be between 1 and 1024"),
    ({"pullBatchSize": "2000"}, "stream", "'pullBatchSize': 2000 must be between 1 and 1024"),
    ({"sidecar": "somewhere"}, "stream", "'sidecar': 'somewhere' is not one of auto, host:port, unix:"),
    ({"commitOffsetsToBroker": "1"}, "stream", "'commitOffsetsToBroker': '1' is not one of true, false"),
    ({"commitOffsetsToBroker": "true", "messageModel": "broadcasting"}, "stream",
     "'commitOffsetsToBroker': true needs messageModel=clustering"),
    ({"lockOwner": "a b"}, "stream", "'lockOwner'"),
    ({"queueRefreshIntervalMs": "-5"}, "stream", "'queueRefreshIntervalMs': -5 must be >= 0"),
    ({"brokerUnavailableTimeoutMs": "soon"}, "stream", "'brokerUnavailableTimeoutMs'"),
    ({"accessKey": "AK"}, "stream", "'accessKey' and 'secretKey' must be set together"),
    ({"secretKey": "SK"}, "stream", "'accessKey' and 'secretKey' must be set together"),
    ({"accessKey": " ", "secretKey": "SK"}, "stream", "'accessKey' must not be empty"),
    ({"startingOffset": "earliest"}, "stream", "unknown option 'startingOffset'"),
    ({"topic": "orders,%RETRY%g", "consumerGroup": "g", "consumeMode": "concurrent"}, "stream",
     "'%RETRY%g' is read automatically"),
]


@pytest.mark.parametrize("extra,kind,message", BAD, ids=[b[2][:60] for b in BAD])
def test_bad_option_names_the_option(extra, kind, message):
    options = {**BASE, **extra}
    options = {k: v for k, v in options.items() if v is not None}
    with pytest.raises(ConfigError) as err:
        opts.parse(options, kind)
    assert message in str(err.value)


def test_defaults_for_a_stream():
    o = parse()
    assert o.name_server == "127.0.0.1:9876"
    assert o.topics == ("orders",)
    assert o.consume_mode == "orderly" and o.uses_locks and not o.reads_retry_topic
    assert o.message_model == "clustering" and o.commits_to_broker
    assert o.sub_expression == "*"
    assert o.starting == GroupStart() and o.ending == LatestEnd()
    assert o.fail_on_data_loss is True
    assert o.max_messages_per_trigger is None and o.min_partitions is None
    assert o.pull_batch_size == 32 and o.sidecar == "auto"
    assert o.consumer_group.startswith("spark-") and len(o.consumer_group) == 6 + 16
    assert o.lock_owner.startswith("spark-") and o.lock_owner != o.consumer_group
    assert o.subscribed_topics == ("orders",)


def test_derived_values_are_stable_and_depend_on_the_query():
    a, b = parse(), parse(topic="orders")
    assert (a.consumer_group, a.lock_owner) == (b.consumer_group, b.lock_owner)
    c = parse(topic="payments")
    assert c.consumer_group != a.consumer_group and c.lock_owner != a.lock_owner
    assert parse(topic="a,b").consumer_group == parse(topic="b,a").consumer_group
    assert parse(subExpression="TagA").lock_owner != a.lock_owner
    assert parse(lockOwner="mine").lock_owner == "mine"


def test_keys_are_case_insensitive_and_values_normalised():
    o = opts.parse({"NAMESERVER": "h1:1;h2:2", "Topic": " a , b ", "CONSUMEMODE": "Concurrent",
                    "consumergroup": "g1", "subexpression": "TagA||TagB ", "minpartitions": "3"})
    assert o.name_server == "h1:1;h2:2" and o.topics == ("a", "b")
    assert o.consume_mode == "concurrent" and o.reads_retry_topic and not o.uses_locks
    assert o.subscribed_topics == ("a", "b", "%RETRY%g1")
    assert o.sub_expression == "TagA || TagB" and o.min_partitions == 3


def test_starting_positions():
    assert parse(startingOffsets="earliest").starting == EarliestStart()
    assert parse(startingOffsets="LATEST").starting == LatestStart()
    assert parse(startingTimestamp="1700000000000").starting == TimestampStart(1700000000000)
    assert parse(messageModel="broadcasting").starting == LatestStart()
    assert parse("batch").starting == EarliestStart()
    spec = parse(startingOffsets='{"orders": {"broker-a": {"0": 5, "1": -2}}}').starting
    assert spec == SpecificOffsets({MessageQueue("orders", "broker-a", 0): 5,
                                    MessageQueue("orders", "broker-a", 1): -2})


def test_ending_offsets_for_batch():
    assert parse("batch").ending == LatestEnd()
    spec = parse("batch", endingOffsets='{"orders": {"b": {"3": 10}}}').ending
    assert spec == SpecificOffsets({MessageQueue("orders", "b", 3): 10})
    assert parse("batch", endingTimestamp="1700000000000").ending == TimestampEnd(1700000000000)


def test_broadcasting_has_no_locks_no_commits_no_retry():
    o = parse(messageModel="broadcasting", consumeMode="concurrent")
    assert not o.uses_locks and not o.commits_to_broker and not o.reads_retry_topic
    assert not parse(messageModel="broadcasting").uses_locks


def test_secrets_never_printed():
    o = parse(accessKey="AK-VISIBLE-NOT", secretKey="SK-TOP-SECRET")
    assert o.access_key == "AK-VISIBLE-NOT" and o.secret_key == "SK-TOP-SECRET"
    text = repr(o) + str(o)
    assert "SK-TOP-SECRET" not in text and "AK-VISIBLE-NOT" not in text


def test_offsets_json_round_trip_is_canonical():
    offsets = {MessageQueue("b", "x", 10): 3, MessageQueue("a", "y", 2): 1, MessageQueue("a", "y", 10): 7,
               MessageQueue("a", "x", 0): 0}
    text = dumps(offsets)
    assert text == '{"a":{"x":{"0":0},"y":{"2":1,"10":7}},"b":{"x":{"10":3}}}'
    assert from_json(text) == offsets
    assert dumps(dict(reversed(list(offsets.items())))) == text
