"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320) over TCP."""

from __future__ import annotations

import json
import zlib

import pytest

from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.remoting.codes import RequestCode
from rocketmq_spark.remoting.command import decode
from rocketmq_spark.remoting.message import (BatchItem, HostPort, body_crc, decode_message, encode_batch,
                                             offset_msg_id)
from tests.embedded.wire import Wire, max_offset, messages, pull, req, send_msg
from tests.vectors import cpp_vectors

CPP = cpp_vectors()
TRACE = {"TRACE_ON": "true", "MSG_REGION": "DefaultRegion"}


def view(w: Wire, phys: int):  # type: ignore[no-untyped-def]
    ans = w.request(req(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": phys}))
    assert ans.code == 0 and ans.ext_fields is None
    return decode_message(ans.body)[0]


@pytest.mark.parametrize("code", [RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2])
def test_send_stores_the_message_as_apache_does(cluster: EmbeddedCluster, wire: Wire, code: int) -> None:
    ans = send_msg(wire, "T", b"hello", queue_id=1, tags="TagA", keys="k1", props={"color": "red"}, code=code)
    assert (ans.code, ans.flag, ans.language, ans.version, ans.remark) == (0, 1, "JAVA", 409, None)
    ext = dict(ans.ext)
    assert {k: ext[k] for k in ("queueId", "queueOffset", "TRACE_ON", "MSG_REGION")} == \
        {"queueId": "1", "queueOffset": "0", **TRACE}
    store = HostPort.parse(cluster.broker_addrs["broker-a"])
    msg = view(wire, int(ext["msgId"][-16:], 16))
    assert ext["msgId"] == offset_msg_id(store, msg.commit_log_offset) == msg.offset_msg_id
    assert (msg.topic, msg.queue_id, msg.queue_offset, msg.body, msg.store_host) == ("T", 1, 0, b"hello", store)
    assert msg.body_crc == body_crc(b"hello") and msg.born_host.host == "127.0.0.1"
    assert msg.born_host.port == wire.sock.getsockname()[1]
    assert msg.properties["CLUSTER"] == "DefaultCluster" and "WAIT" not in msg.properties
    assert {k: msg.properties[k] for k in ("TAGS", "KEYS", "color")} == {"TAGS": "TagA", "KEYS": "k1", "color": "red"}
    again = send_msg(wire, "T", b"second", queue_id=1, code=code)
    assert again.ext["queueOffset"] == "1"
    record = wire.request(req(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": msg.commit_log_offset})).body
    assert int(again.ext["msgId"][-16:], 16) == msg.commit_log_offset + len(record)


def test_uniq_key_is_added_when_missing(wire: Wire) -> None:
    ans = send_msg(wire, "T", b"x", uniq=False)
    msg = view(wire, int(ans.ext["msgId"][-16:], 16))
    assert len(msg.properties["UNIQ_KEY"]) == 32
    assert msg.properties["UNIQ_KEY"] != view(wire, int(send_msg(wire, "T", b"y", uniq=False).ext["msgId"][-16:], 16)).properties["UNIQ_KEY"]


def test_binary_and_compressed_bodies_come_back_byte_for_byte(wire: Wire) -> None:
    binary = bytes(range(256)) * 2 + b"\x00\x00tail"
    packed = zlib.compress(b"z" * 9000, 5)
    send_msg(wire, "bin", binary)
    send_msg(wire, "bin", packed, sys_flag=1)
    got = messages(pull(wire, "g", "bin", 0, 0))
    assert [(m.body, m.sys_flag) for m in got] == [(binary, 0), (packed, 1)]
    assert got[1].payload() == b"z" * 9000


def test_auto_create_from_tbw102(cluster: EmbeddedCluster, wire: Wire) -> None:
    assert send_msg(wire, "auto4", b"a", queue_id=3).code == 0
    cfg = cluster.brokers["broker-a"].topics.get("auto4")
    assert (cfg.read_queue_nums, cfg.write_queue_nums, cfg.perm) == (4, 4, 6)
    send_msg(wire, "auto16", b"a", extra={"defaultTopicQueueNums": 16})
    assert cluster.brokers["broker-a"].topics.get("auto16").write_queue_nums == 8  # capped by TBW102
    ans = send_msg(wire, "nodefault", b"a", extra={"defaultTopic": "T"})  # template without inherit
    assert ans.code == 17 and ans.remark.startswith("topic[nodefault] not exist, apply first please!")


def test_bad_topic_names_and_queues(cluster: EmbeddedCluster, wire: Wire) -> None:
    ans = send_msg(wire, "bad topic!", b"a")
    assert (ans.code, ans.remark, ans.ext_fields) == (
        1, "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$", TRACE)
    ans = wire.request(req(RequestCode.SEND_MESSAGE_V2, {"a": "pg", "c": "TBW102", "d": 4, "e": 0, "f": 0,
                                                         "g": 1, "h": 0}, b"x"))
    assert (ans.code, ans.remark, ans.ext_fields) == (1, "The specified topic is blank.", TRACE)
    ans = send_msg(wire, "T", b"a", queue_id=9)
    port = wire.sock.getsockname()[1]
    assert ans.code == 1 and ans.ext_fields == TRACE
    assert ans.remark == ("request queueId[9] is illegal, TopicConfig [topicName=T, readQueueNums=4, "
                          "writeQueueNums=4, perm=RW-, topicFilterType=SINGLE_TAG, topicSysFlag=0, order=false] "
                          f"Producer: 127.0.0.1:{port}")
    ans = send_msg(wire, "SCHEDULE_TOPIC_XXXX", b"a")
    assert ans.code == 16 and "forbidden" in ans.remark
    ans = send_msg(wire, "T" * 128, b"a")
    assert ans.code == 1 and "longer than" in ans.remark


def test_out_of_range_numbers_are_refused(wire: Wire) -> None:
    ans = send_msg(wire, "T", b"a", extra={"flag": 2 ** 31})
    assert ans.code == 1 and "<flag>" in ans.remark
    ans = send_msg(wire, "T", b"a", extra={"bornTimestamp": 2 ** 63})
    assert ans.code == 1 and "<bornTimestamp>" in ans.remark
    assert max_offset(wire, "T", 0) == 0


def test_random_queue_for_negative_queue_id(wire: Wire) -> None:
    qids = {int(send_msg(wire, "T", b"r", queue_id=-1).ext["queueId"]) for _ in range(30)}
    assert qids <= {0, 1, 2, 3} and len(qids) > 1


def test_body_over_4_mib_is_message_illegal(wire: Wire) -> None:
    ans = send_msg(wire, "T", b"x" * (4 * 1024 * 1024 + 1))
    assert ans.code == 13 and ans.ext_fields == TRACE
    assert ans.remark.startswith("the message is illegal, maybe msg body or properties length not matched.")
    assert max_offset(wire, "T", 0) == 0


def test_batch_with_v2_header(wire: Wire) -> None:
    items = [BatchItem(f"b{i}".encode(), {"UNIQ_KEY": f"U{i}", "TAGS": "TagA", "i": str(i)}) for i in range(3)]
    ans = send_msg(wire, "T", encode_batch(items), queue_id=2, code=RequestCode.SEND_BATCH_MESSAGE,
                   extra={"batch": "true"})
    assert ans.code == 0 and ans.ext["queueOffset"] == "0" and ans.ext["queueId"] == "2"
    ids = ans.ext["msgId"].split(",")
    got = messages(pull(wire, "g", "T", 2, 0))
    assert [m.body for m in got] == [b"b0", b"b1", b"b2"]
    assert [m.offset_msg_id for m in got] == ids and [m.queue_offset for m in got] == [0, 1, 2]
    assert [m.properties["UNIQ_KEY"] for m in got] == ["U0", "U1", "U2"]
    assert all(m.properties["CLUSTER"] == "DefaultCluster" for m in got)


def test_a_compressed_batch_keeps_each_item_compressed_with_the_batch_flag(wire: Wire) -> None:
    """As Apache 4.9.7 and 5.5.0 store a SEND_BATCH_MESSAGE whose sysFlag says compressed
    (tried live: each item stored with the batch's sysFlag, its body as sent)."""
    bodies = [b"item %d " % i * 700 for i in range(3)]
    items = [BatchItem(zlib.compress(b), {"UNIQ_KEY": f"Z{i}"}) for i, b in enumerate(bodies)]
    ans = send_msg(wire, "T", encode_batch(items), sys_flag=0x301, queue_id=1,
                   code=RequestCode.SEND_BATCH_MESSAGE, extra={"batch": "true"})
    assert ans.code == 0, ans.remark
    got = messages(pull(wire, "g", "T", 1, 0))
    assert [m.sys_flag for m in got] == [0x301] * 3
    assert [zlib.decompress(m.body) for m in got] == bodies


def test_compressed_batch_limits(wire: Wire) -> None:
    bomb = zlib.compress(bytes(17 * 1024 * 1024), 9)
    ans = send_msg(wire, "T", bomb, sys_flag=1, code=RequestCode.SEND_MESSAGE, extra={"batch": "1"})
    assert ans.code == 13 and "inflates to more than" in ans.remark
    ans = send_msg(wire, "T", b"not zlib", sys_flag=1, code=RequestCode.SEND_MESSAGE, extra={"batch": "1"})
    assert ans.code == 13 and "cannot be inflated" in ans.remark
    ans = send_msg(wire, "T", b"\x00\x00\x00\x30junk", code=RequestCode.SEND_MESSAGE, extra={"batch": "1"})
    assert ans.code == 13 and "malformed" in ans.remark
    assert max_offset(wire, "T", 0) == 0


def test_batch_to_retry_topic_is_refused(wire: Wire) -> None:
    ans = send_msg(wire, "%RETRY%g", encode_batch([BatchItem(b"x")]), code=RequestCode.SEND_BATCH_MESSAGE,
                   extra={"batch": "true"})
    assert ans.code == 13 and ans.remark == "batch request does not support retry group %RETRY%g"


@pytest.mark.parametrize("name", ["send_message", "send_message_compressed", "send_message_orderly",
                                  "send_message_batch", "send_message_batch_compressed"])
def test_cpp_client_frames(broker_addr: str, name: str) -> None:
    """The C++ client's real frames, replayed: batch "1" is split, a compressed batch is
    inflated first, answers carry string extFields the C++ client can read."""
    vec = CPP[name]
    frame = bytes.fromhex(vec["frame_hex"])
    request, _ = decode(frame)
    with Wire(broker_addr) as w:
        w.send_raw(frame)
        ans = w.answer(request.opaque)
        assert ans.code == 0, ans.remark
        assert all(isinstance(v, str) for v in ans.ext.values())
        topic, qid = request.ext["topic"], int(request.ext["queueId"])
        got = messages(pull(w, "g", topic, qid, int(ans.ext["queueOffset"])))
        if "batch_items" in vec:
            assert [m.body.hex() for m in got] == [i["body_hex"] for i in vec["batch_items"]]
            assert [m.sys_flag & 1 for m in got] == [0] * len(got)
            assert ans.ext["msgId"].split(",") == [m.offset_msg_id for m in got]
        else:
            assert len(got) == 1 and got[0].body == request.body
            assert got[0].properties["TAGS"] == vec["decoded_properties"]["TAGS"]
            assert got[0].sys_flag & 1 == int(request.ext["sysFlag"]) & 1


def test_send_to_namesrv_is_not_supported(cluster: EmbeddedCluster) -> None:
    with Wire(cluster.namesrv_addr) as w:
        ans = send_msg(w, "T", b"x")
        assert ans.code == 3


def test_oneway_send_gets_no_answer_but_is_stored(wire: Wire) -> None:
    body = json.dumps({"x": 1}).encode()
    wire.send(req(RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": "T", "c": "TBW102", "d": 4, "e": 0, "f": 0,
                                                "g": 1, "h": 0, "i": "WAIT\x01true\x02"}, body, flag=2))
    # Requests of one connection are handled in order, so the send is stored by now.
    assert max_offset(wire, "T", 0) == 1
    assert not wire._answers  # nothing but the GET_MAX_OFFSET answer arrived
