"""PULL_MESSAGE over TCP: the status table of section 6.2, filters, limits, long polling."""

from __future__ import annotations

import json
import socket
import struct
import time
from pathlib import Path

import pytest

from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.remoting.codes import RequestCode
from rocketmq_spark.remoting.command import FrameDecoder, encode
from rocketmq_spark.remoting.message import decode_messages
from tests.embedded.wire import Wire, heartbeat, messages, pull, req, send_msg, wait_for

FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


def offsets(ans) -> tuple[int, int, int]:  # type: ignore[no-untyped-def]
    e = ans.ext
    assert e["suggestWhichBrokerId"] == "0"
    return int(e["nextBeginOffset"]), int(e["minOffset"]), int(e["maxOffset"])


def fill(w: Wire, n: int, topic: str = "T", qid: int = 0, tags: tuple[str, ...] = ("TagA",)) -> None:
    for i in range(n):
        assert send_msg(w, topic, f"m{i}".encode(), queue_id=qid, tags=tags[i % len(tags)]).code == 0


def test_found_and_max_msg_nums(wire: Wire) -> None:
    fill(wire, 6)
    ans = pull(wire, "g", "T", 0, 0)
    assert (ans.code, ans.remark, offsets(ans)) == (0, "FOUND", (6, 0, 6))
    assert [m.body for m in messages(ans)] == [f"m{i}".encode() for i in range(6)]
    ans = pull(wire, "g", "T", 0, 1, max_nums=2)
    assert (ans.code, offsets(ans), [m.queue_offset for m in messages(ans)]) == (0, (3, 0, 6), [1, 2])


@pytest.mark.parametrize("offset,code,remark,next_offset", [
    (6, 19, "OFFSET_OVERFLOW_ONE", 6),
    (7, 21, "OFFSET_OVERFLOW_BADLY", 6),
    (106, 21, "OFFSET_OVERFLOW_BADLY", 6),
])
def test_offsets_at_and_past_the_end(wire: Wire, offset: int, code: int, remark: str, next_offset: int) -> None:
    fill(wire, 6)
    ans = pull(wire, "g", "T", 0, offset)
    assert (ans.code, ans.remark, offsets(ans), ans.body) == (code, remark, (next_offset, 0, 6), b"")


@pytest.mark.parametrize("offset,code", [(0, 19), (5, 21)])
def test_empty_queue(wire: Wire, offset: int, code: int) -> None:
    ans = pull(wire, "g", "T", 1, offset)
    assert (ans.code, ans.remark, offsets(ans)) == (code, "NO_MESSAGE_IN_QUEUE", (0, 0, 0))


def test_tag_filter_on_the_broker(wire: Wire) -> None:
    fill(wire, 6, tags=("TagA", "TagB", "TagC"))
    ans = pull(wire, "g", "T", 0, 0, subscription="TagA || TagB")
    assert ans.code == 0 and offsets(ans)[0] == 6
    assert [m.properties["TAGS"] for m in messages(ans)] == ["TagA", "TagB", "TagA", "TagB"]
    ans = pull(wire, "g", "T", 0, 0, subscription="TagZ")
    assert (ans.code, ans.remark, offsets(ans), ans.body) == (20, "NO_MATCHED_MESSAGE", (6, 0, 6), b"")


def test_batch_limits_32_messages_and_256_kib(wire: Wire) -> None:
    fill(wire, 40)
    ans = pull(wire, "g", "T", 0, 0, max_nums=100)
    assert len(messages(ans)) == 32 and offsets(ans)[0] == 32
    for i in range(3):
        send_msg(wire, "T", bytes(100 * 1024), queue_id=1)
    ans = pull(wire, "g", "T", 1, 0)
    assert len(messages(ans)) == 2 and offsets(ans)[0] == 2
    send_msg(wire, "T", bytes(300 * 1024), queue_id=2)
    assert len(messages(pull(wire, "g", "T", 2, 0))) == 1  # the first message always comes back


def test_errors_unknown_topic_bad_queue_missing_fields(wire: Wire) -> None:
    ans = pull(wire, "g", "nosuchtopic", 0, 0)
    assert (ans.code, ans.ext_fields) == (17, {})
    assert ans.remark == "topic[nosuchtopic] not exist, apply first please! " + FAQ
    ans = pull(wire, "g", "T", 9, 0)
    port = wire.sock.getsockname()[1]
    assert (ans.code, ans.ext_fields) == (1, {})
    assert ans.remark == f"queueId[9] is illegal, topic:[T] topicConfig.readQueueNums:[4] consumer:[/127.0.0.1:{port}]"
    ans = wire.request(req(RequestCode.PULL_MESSAGE, {"consumerGroup": "g", "topic": "T", "queueOffset": 0,
                                                      "maxMsgNums": 32, "sysFlag": 4, "commitOffset": 0,
                                                      "suspendTimeoutMillis": 0, "subVersion": 0}))
    assert ans.code == 1 and "queueId" in ans.remark and ans.ext_fields is None
    ans = wire.request(req(RequestCode.PULL_MESSAGE, {"consumerGroup": "g", "topic": "T", "queueId": "abc",
                                                      "queueOffset": 0, "maxMsgNums": 32, "sysFlag": 4,
                                                      "commitOffset": 0, "suspendTimeoutMillis": 0,
                                                      "subVersion": 0}))
    assert ans.code == 1 and "queueId" in ans.remark and "abc" in ans.remark


def test_numeric_ext_values_are_accepted(wire: Wire) -> None:
    """The C++ client sends some extFields as JSON numbers."""
    fill(wire, 1)
    header = json.dumps({"code": 11, "extFields": {"consumerGroup": "g", "topic": "T", "queueId": 0,
                                                   "queueOffset": "0", "maxMsgNums": 32, "sysFlag": 4,
                                                   "commitOffset": "0", "suspendTimeoutMillis": "0",
                                                   "subVersion": "0", "subscription": "*"},
                         "flag": 0, "language": "CPP", "opaque": 77, "remark": "", "version": 63}).encode() + b"\n"
    wire.send_raw(struct.pack(">ii", 4 + len(header), len(header)) + header)
    ans = wire.answer(77)
    assert ans.code == 0 and len(messages(ans)) == 1


def test_lite_pull_code_361(wire: Wire) -> None:
    fill(wire, 2)
    cmd = req(RequestCode.LITE_PULL_MESSAGE, {"consumerGroup": "g", "topic": "T", "queueId": 0, "queueOffset": 0,
                                              "maxMsgNums": 32, "sysFlag": 20, "commitOffset": 0,
                                              "suspendTimeoutMillis": 0, "subVersion": 0, "subscription": "*"})
    assert len(messages(wire.request(cmd))) == 2


def test_subscription_from_heartbeat(wire: Wire) -> None:
    fill(wire, 3, tags=("TagA", "TagB", "TagC"))
    ans = pull(wire, "nohb", "T", 0, 0, sys_flag=0, subscription=None)
    assert (ans.code, ans.remark, ans.ext_fields) == (24, "the consumer's group info not exist" + FAQ, {})
    heartbeat(wire, "127.0.0.1@c", "hb", {"T": "TagB"}, sub_version=5)
    ans = pull(wire, "hb", "T", 0, 0, sys_flag=0, subscription=None, sub_version=5)
    assert ans.code == 0 and [m.properties["TAGS"] for m in messages(ans)] == ["TagB"]
    ans = pull(wire, "hb", "T", 0, 0, sys_flag=0, subscription=None, sub_version=6)
    assert (ans.code, ans.remark) == (25, "the consumer's subscription not latest")
    ans = pull(wire, "hb", "other", 0, 0, sys_flag=0, subscription=None)
    assert ans.code in (17, 24)


def test_commit_offset_flag_stores_the_offset(wire: Wire) -> None:
    fill(wire, 4)
    ans = pull(wire, "cg", "T", 0, 2, sys_flag=5, commit_offset=2, max_nums=1)
    assert ans.code == 0 and offsets(ans)[0] == 3
    q = wire.request(req(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "cg", "topic": "T", "queueId": 0}))
    assert q.ext == {"offset": "2"}


def test_offset_too_small_after_segments_are_deleted(tmp_path: Path) -> None:
    with EmbeddedCluster(tmp_path, topics={"T": 1}, segment_size=4096) as c:
        broker = c.brokers["broker-a"]
        with Wire(c.broker_addrs["broker-a"]) as w:
            fill(w, 60)
            new_min = broker.store.delete_segments_before(broker.store.commitlog.max_offset)
            assert new_min > 0
            low = broker.store.min_offset("T", 0)
            assert 0 < low < 60
            ans = pull(w, "g", "T", 0, 0)
            assert (ans.code, ans.remark, offsets(ans)) == (21, "OFFSET_TOO_SMALL", (low, low, 60))
            assert messages(pull(w, "g", "T", 0, low))[0].body == f"m{low}".encode()
            q = w.request(req(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "new", "topic": "T", "queueId": 0}))
            assert (q.code, q.remark, q.ext_fields) == (22, "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first", {})


# ---------------------------------------------------------------- long polling

def test_long_poll_is_woken_by_arrival(cluster: EmbeddedCluster, wire: Wire, broker_addr: str) -> None:
    fill(wire, 2)
    broker = cluster.brokers["broker-a"]
    start = time.monotonic()
    opaque = pull(wire, "g", "T", 0, 2, sys_flag=6, suspend_ms=5000, send_only=True)
    assert wait_for(lambda: broker.long_poll.held_count() == 1)
    assert not wire.has_answer(opaque)
    # A held pull does not block the connection: other requests are answered meanwhile.
    assert wire.request(req(RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": 0})).ext["offset"] == "2"
    with Wire(broker_addr) as other:
        send_msg(other, "T", b"wake", queue_id=0)
    ans = wire.answer(opaque)
    elapsed = time.monotonic() - start
    assert ans.code == 0 and [m.body for m in messages(ans)] == [b"wake"] and elapsed < 2.0


def test_long_poll_times_out_after_suspend_timeout(cluster: EmbeddedCluster, wire: Wire) -> None:
    fill(wire, 1)
    start = time.monotonic()
    ans = pull(wire, "g", "T", 0, 1, sys_flag=6, suspend_ms=300)
    elapsed = time.monotonic() - start
    assert (ans.code, ans.remark, offsets(ans)) == (19, "OFFSET_OVERFLOW_ONE", (1, 0, 1))
    assert 0.28 <= elapsed < 1.5
    assert cluster.brokers["broker-a"].long_poll.held_count() == 0


def test_long_poll_wakes_only_for_matching_tags(cluster: EmbeddedCluster, wire: Wire, broker_addr: str) -> None:
    broker = cluster.brokers["broker-a"]
    opaque = pull(wire, "g", "T", 3, 0, sys_flag=6, suspend_ms=5000, subscription="TagA", send_only=True)
    assert wait_for(lambda: broker.long_poll.held_count() == 1)
    with Wire(broker_addr) as other:
        send_msg(other, "T", b"b", queue_id=3, tags="TagB")
        assert broker.long_poll.held_count() == 1 and not wire.has_answer(opaque)
        send_msg(other, "T", b"a", queue_id=3, tags="TagA")
    ans = wire.answer(opaque, timeout=2)
    assert ans.code == 0 and [m.body for m in messages(ans)] == [b"a"] and offsets(ans)[0] == 2


def test_closing_a_connection_drops_its_held_pulls(cluster: EmbeddedCluster, broker_addr: str) -> None:
    broker = cluster.brokers["broker-a"]
    w = Wire(broker_addr)
    pull(w, "g", "T", 0, 0, sys_flag=6, suspend_ms=30000, send_only=True)
    assert wait_for(lambda: broker.long_poll.held_count() == 1)
    w.close()
    assert wait_for(lambda: broker.long_poll.held_count() == 0)


def test_held_pull_answer_in_rocketmq_serialization(wire: Wire) -> None:
    cmd = req(RequestCode.PULL_MESSAGE, {"consumerGroup": "g", "topic": "T", "queueId": 0, "queueOffset": 0,
                                         "maxMsgNums": 32, "sysFlag": 6, "commitOffset": 0,
                                         "suspendTimeoutMillis": 100, "subVersion": 0, "subscription": "*"},
              serialize_type=1)
    assert encode(cmd)[4] == 1
    ans = wire.request(cmd)
    assert ans.serialize_type == 1 and ans.code == 19


def test_absurd_suspend_timeouts_do_not_break_long_polling(cluster: EmbeddedCluster, wire: Wire,
                                                           broker_addr: str) -> None:
    broker = cluster.brokers["broker-a"]
    forever = pull(wire, "g", "T", 2, 0, sys_flag=6, suspend_ms=2 ** 62, send_only=True)
    negative = pull(wire, "g", "T", 2, 0, sys_flag=6, suspend_ms=-5)
    assert negative.code == 19
    assert wait_for(lambda: broker.long_poll.held_count() == 1)
    short = pull(wire, "g", "T", 1, 0, sys_flag=6, suspend_ms=50, timeout=3)
    assert short.code == 19
    with Wire(broker_addr) as other:
        send_msg(other, "T", b"finally", queue_id=2)
    assert [m.body for m in messages(wire.answer(forever, timeout=3))] == [b"finally"]


def test_pipelined_pulls_to_a_peer_that_reads_slowly_are_all_answered_in_order(
        wire: Wire, broker_addr: str) -> None:
    """The requests of one read are answered by the reader thread in one write, as far as the
    socket takes them; a peer with a small receive window that reads only after sending all
    its pulls leaves the rest to the writer thread: every answer comes, whole, in order."""
    bodies = [b"%04d" % i * 1000 for i in range(64)]      # 4 KB each: answers of 128 KB
    for b in bodies:
        assert send_msg(wire, "T", b, queue_id=0).code == 0
    host, _, port = broker_addr.rpartition(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    sock.settimeout(10)
    cmds = [req(RequestCode.PULL_MESSAGE, {"consumerGroup": "g", "topic": "T", "queueId": 0, "queueOffset": i % 64,
                                           "maxMsgNums": 32, "sysFlag": 4, "commitOffset": 0,
                                           "suspendTimeoutMillis": 0, "subVersion": 0, "subscription": "*",
                                           "expressionType": "TAG"}).with_opaque(1000 + i) for i in range(120)]
    sock.sendall(b"".join(encode(c) for c in cmds))
    decoder, got = FrameDecoder(), []
    with sock:
        while len(got) < len(cmds):
            data = sock.recv(1 << 16)
            assert data, f"connection closed after {len(got)} answers"
            decoder.feed(data)
            got.extend(decoder)
    assert [a.opaque for a in got] == [c.opaque for c in cmds]
    for i, a in enumerate(got):
        assert a.code == 0 and [m.body for m in decode_messages(a.body)] == bodies[i % 64:i % 64 + 32]
