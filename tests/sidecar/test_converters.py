"""Protobuf <-> domain converters round trip, and reject incomplete input by name."""

from __future__ import annotations

import pytest

from rocketmq_spark.errors import ConfigError
from rocketmq_spark.remoting.message import HostPort, MessageExt, offset_msg_id
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.sidecar import converters as cv
from rocketmq_spark.sidecar.model import Cluster, HealthInfo, Outgoing, PullSpec, SendBackItem
from rocketmq_spark.sidecar.service import message_for_send_back
from rocketmq_spark.sidecar.v1 import sidecar_pb2 as pb
from rocketmq_spark.structs import Message, QueueOffsets, SendResult

Q = MessageQueue("orders", "broker-a", 3)


def test_round_trips() -> None:
    c = Cluster("h1:9876;h2:9876", "ak", "sk")
    assert cv.cluster_from_pb(cv.cluster_to_pb(c)) == c
    assert cv.cluster_from_pb(pb.Cluster(name_server="h:1")) == Cluster("h:1")
    assert cv.queue_from_pb(cv.queue_to_pb(Q)) == Q
    h = HealthInfo("1.2.3", "v1", 42, 7)
    assert cv.health_from_pb(cv.health_to_pb(h)) == h
    for o in (QueueOffsets(Q, 1, 9, None), QueueOffsets(Q, 1, 9, 0), QueueOffsets(Q, 0, 5, 4)):
        assert cv.queue_offsets_from_pb(cv.queue_offsets_to_pb(o)) == o
    assert cv.queue_offsets_to_pb(QueueOffsets(Q, 0, 1, None)).has_committed is False
    assert cv.offsets_map_from_pb(cv.offsets_map_to_pb({Q: 5})) == {Q: 5}
    spec = PullSpec(Q, 3, 9, "g", "TagA || TagB", 16, 100, False, "g")
    assert cv.pull_spec_from_pb(cv.pull_request_to_pb(c, spec)) == spec
    out = Outgoing(Message("orders", b"\x00\xff", "TagA", "k1", {"a": "b"}, delay_level=2), "key")
    assert cv.out_message_from_pb(cv.out_message_to_pb(out)) == out
    r = SendResult("SEND_OK", "U1", "O1", Q, 17)
    assert cv.send_result_from_pb(cv.send_result_to_pb(r)) == r
    item = SendBackItem(100, "ID", "broker-a", "U1", "orders", -1, 3)
    assert cv.send_back_item_from_pb(cv.send_back_item_to_pb(item)) == item


def test_defaults_for_unset_fields() -> None:
    spec = cv.pull_spec_from_pb(pb.PullRequest(queue=cv.queue_to_pb(Q), end_offset=4))
    assert (spec.group, spec.sub_expression, spec.pull_batch_size, spec.max_rows_per_batch,
            spec.restore_retry_topic_of) == ("rocketmq_spark_sidecar", "*", 32, 4096, None)
    item = cv.send_back_item_from_pb(pb.SendBackItem(commit_log_offset=5, broker_name="b",
                                                     origin_topic="t"))
    assert item.max_reconsume_times == 16


@pytest.mark.parametrize("make,match", [
    (lambda: cv.cluster_from_pb(pb.Cluster()), "name_server"),
    (lambda: cv.cluster_from_pb(pb.Cluster(name_server="h:1", access_key="ak")), "secret_key"),
    (lambda: cv.queue_from_pb(pb.MessageQueue(topic="t", broker_name="b", queue_id=-1)), "queue_id=-1"),
    (lambda: cv.queue_offset_from_pb(pb.QueueOffset(queue=cv.queue_to_pb(Q), offset=-2)), "-2"),
    (lambda: cv.out_message_from_pb(pb.OutMessage(body=b"x")), "empty topic"),
    (lambda: cv.send_back_item_from_pb(pb.SendBackItem(broker_name="b")), "commit_log_offset"),
    (lambda: cv.pull_spec_from_pb(pb.PullRequest(queue=cv.queue_to_pb(Q), end_offset=1,
                                                 pull_batch_size=5000)), "5000"),
])
def test_rejects_incomplete_input(make, match) -> None:
    with pytest.raises(ConfigError, match=match):
        make()


def test_send_back_message_from_offset_msg_id() -> None:
    store = HostPort("10.1.2.3", 10911)
    oid = offset_msg_id(store, 123456)
    m = message_for_send_back(SendBackItem(offset_msg_id=oid, origin_msg_id="U9", origin_topic="orders"))
    assert (m.store_host, m.commit_log_offset, m.topic, m.msg_id) == (store, 123456, "orders", "U9")
    m = message_for_send_back(SendBackItem(commit_log_offset=77, offset_msg_id=oid, origin_topic="t"))
    assert m.commit_log_offset == 77
    with pytest.raises(ConfigError, match="broker_name or offset_msg_id"):
        message_for_send_back(SendBackItem(commit_log_offset=5, origin_topic="t"))
    with pytest.raises(ConfigError, match="offset_msg_id 'XYZ'"):
        message_for_send_back(SendBackItem(offset_msg_id="XYZ", origin_topic="t"))
    with pytest.raises(ConfigError, match="origin_topic"):
        message_for_send_back(SendBackItem(commit_log_offset=5, broker_name="b"))


def test_indexed_messages_round_trip() -> None:
    """QueryMessages' records: the queue is the record's own topic on the answering broker;
    absent KEYS and UNIQ_KEY stay absent (the msg_id is then the offset message id)."""
    store = HostPort("10.0.0.5", 10911)
    with_keys = MessageExt("t", b"x", queue_id=2, queue_offset=7, commit_log_offset=100, store_host=store,
                           properties={"KEYS": "a b", "UNIQ_KEY": "U1"})
    bare = MessageExt("t", b"y", queue_id=1, queue_offset=3, commit_log_offset=200, store_host=store)
    a, b = (cv.indexed_from_pb(cv.indexed_to_pb("broker-a", m)) for m in (with_keys, bare))
    assert (a.queue, a.queue_offset, a.keys, a.uniq_key, a.msg_id) == (MessageQueue("t", "broker-a", 2), 7, "a b",
                                                                       "U1", "U1")
    assert (b.keys, b.uniq_key, b.msg_id) == (None, None, offset_msg_id(store, 200))
