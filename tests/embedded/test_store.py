"""Storage: restarts keep everything, recovery truncates torn tails and repairs indexes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.embedded.clock import SystemClock
from rocketmq_spark.embedded.store import MessageStore
from rocketmq_spark.embedded.store.commitlog import BadRecord, parse_record
from rocketmq_spark.embedded.store.consumequeue import ENTRY, FILE_NAME
from rocketmq_spark.remoting.codes import RequestCode
from rocketmq_spark.remoting.message import HostPort, MessageExt, decode_messages, encode_message
from tests.embedded.wire import Wire, heartbeat, max_offset, messages, pull, req, send_msg


def segments(root: Path) -> list[Path]:
    return sorted(p for p in (root / "broker-a" / "commitlog").iterdir() if p.name.isdigit())


def cq_file(root: Path, topic: str, qid: int) -> Path:
    return root / "broker-a" / "consumequeue" / topic / str(qid) / FILE_NAME


def bodies(w: Wire, topic: str, qid: int) -> list[bytes]:
    out: list[bytes] = []
    while True:
        got = messages(pull(w, "reader", topic, qid, len(out)))
        if not got:
            return out
        out += [m.body for m in got]


def test_restart_keeps_messages_offsets_topics_groups(tmp_path: Path) -> None:
    with EmbeddedCluster(tmp_path, topics={"T": 2}) as c, Wire(c.broker_addrs["broker-a"]) as w:
        old_addr = c.broker_addrs["broker-a"]
        for i in range(5):
            send_msg(w, "T", f"m{i}".encode(), queue_id=i % 2)
        send_msg(w, "auto", b"a")
        w.request(req(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "T", "queueId": 1,
                                                           "commitOffset": 2}))
        heartbeat(w, "127.0.0.1@c", "hg", {"T": "*"})
    with EmbeddedCluster(tmp_path) as c, Wire(c.broker_addrs["broker-a"]) as w:
        assert c.broker_addrs["broker-a"] == old_addr  # the old port was free: reused
        assert bodies(w, "T", 0) == [b"m0", b"m2", b"m4"] and bodies(w, "T", 1) == [b"m1", b"m3"]
        assert bodies(w, "auto", 0) == [b"a"]
        q = w.request(req(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "T", "queueId": 1}))
        assert q.ext == {"offset": "2"}
        broker = c.brokers["broker-a"]
        assert broker.topics.get("%RETRY%hg") is not None and broker.groups.get("hg") is not None
        # New messages continue the queue offsets.
        assert send_msg(w, "T", b"m5", queue_id=1).ext["queueOffset"] == "2"


@pytest.mark.parametrize("cut", [1, 10, 60])
def test_torn_tail_is_truncated(tmp_path: Path, cut: int) -> None:
    with EmbeddedCluster(tmp_path, topics={"T": 1}) as c, Wire(c.broker_addrs["broker-a"]) as w:
        for i in range(4):
            send_msg(w, "T", f"m{i}".encode())
    last = segments(tmp_path)[-1]
    size = last.stat().st_size
    os.truncate(last, size - cut)  # the last record lost its last bytes
    with EmbeddedCluster(tmp_path) as c, Wire(c.broker_addrs["broker-a"]) as w:
        assert bodies(w, "T", 0) == [b"m0", b"m1", b"m2"]
        assert cq_file(tmp_path, "T", 0).stat().st_size == 3 * ENTRY.size
        assert c.brokers["broker-a"].store.commitlog.max_offset < size - cut
        ans = send_msg(w, "T", b"again")
        assert ans.ext["queueOffset"] == "3"
        assert bodies(w, "T", 0) == [b"m0", b"m1", b"m2", b"again"]
    with EmbeddedCluster(tmp_path) as c, Wire(c.broker_addrs["broker-a"]) as w:
        assert bodies(w, "T", 0) == [b"m0", b"m1", b"m2", b"again"]


def test_garbage_tail_and_broken_indexes_are_repaired(tmp_path: Path) -> None:
    with EmbeddedCluster(tmp_path, topics={"T": 2}) as c, Wire(c.broker_addrs["broker-a"]) as w:
        for i in range(6):
            send_msg(w, "T", f"m{i}".encode(), queue_id=i % 2)
    with open(segments(tmp_path)[-1], "ab") as f:
        f.write(b"\x00\x00\x01\x00garbage after the last record")
    cq_file(tmp_path, "T", 0).unlink()                            # lost index
    with open(cq_file(tmp_path, "T", 1), "ab") as f:              # index past the log
        f.write(ENTRY.pack(10 ** 9, 100, 0) * 2)
    with EmbeddedCluster(tmp_path) as c, Wire(c.broker_addrs["broker-a"]) as w:
        assert bodies(w, "T", 0) == [b"m0", b"m2", b"m4"] and bodies(w, "T", 1) == [b"m1", b"m3", b"m5"]
        assert cq_file(tmp_path, "T", 0).stat().st_size == cq_file(tmp_path, "T", 1).stat().st_size == 60
        assert max_offset(w, "T", 1) == 3


def test_segments_roll_and_recover(tmp_path: Path) -> None:
    with EmbeddedCluster(tmp_path, topics={"T": 1}, segment_size=4096) as c, Wire(c.broker_addrs["broker-a"]) as w:
        for i in range(100):
            send_msg(w, "T", f"{i:03d}".encode() * 30)
        names = [int(p.name) for p in segments(tmp_path)]
        assert len(names) > 5 and names[0] == 0
        sizes = [p.stat().st_size for p in segments(tmp_path)]
        assert all(names[i] + sizes[i] == names[i + 1] for i in range(len(names) - 1))  # no gaps
        assert all(s <= 4096 for s in sizes)
    with EmbeddedCluster(tmp_path, segment_size=4096) as c, Wire(c.broker_addrs["broker-a"]) as w:
        assert bodies(w, "T", 0) == [f"{i:03d}".encode() * 30 for i in range(100)]


def test_pulls_over_stretches_and_interleaved_queues_return_each_queues_records_in_order(tmp_path: Path) -> None:
    # queue 0's records lie in one stretch of the commit log for a while, then alternate
    # with queue 1's, then cross segment ends: every pull answers the queue's own records
    with EmbeddedCluster(tmp_path, topics={"T": 2}, segment_size=8192) as c, Wire(c.broker_addrs["broker-a"]) as w:
        sent: dict[int, list[bytes]] = {0: [], 1: []}
        plan = [0] * 40 + [0, 1] * 30 + [1, 1, 0] * 20
        for n, qid in enumerate(plan):
            body = b"%d-%03d" % (qid, n) * (1 + n % 7)
            send_msg(w, "T", body, queue_id=qid)
            sent[qid].append(body)
        for qid in (0, 1):
            got = []
            while True:
                answer = pull(w, "reader", "T", qid, len(got))
                ms = messages(answer)
                if not ms:
                    break
                assert [m.queue_offset for m in ms] == list(range(len(got), len(got) + len(ms)))
                assert int(answer.ext["nextBeginOffset"]) == len(got) + len(ms) and len(ms) <= 32
                got += [m.body for m in ms]
            assert got == sent[qid]
        store = c.brokers["broker-a"].store
        whole = store.get("T", 0, 0, 32)          # queue 0's first 32: one stretch
        assert whole.count == 32 and decode_messages(whole.body)[31].body == sent[0][31]


def test_record_validation(tmp_path: Path) -> None:
    rec = bytearray(encode_message(MessageExt(topic="T", body=b"abc", properties={"TAGS": "TagA"},
                                              commit_log_offset=100)))
    info = parse_record(rec, 0, 100)
    assert (info.topic, info.tags, info.size) == ("T", "TagA", len(rec))
    for broken, base in ((rec[:-1], 100), (rec, 101), (rec[:4] + b"\0\0\0\0" + rec[8:], 100)):
        with pytest.raises(BadRecord):
            parse_record(bytes(broken), 0, base)
    flipped = bytearray(rec)
    flipped[90] ^= 0xFF  # a body byte: CRC mismatch
    with pytest.raises(BadRecord, match="CRC"):
        parse_record(bytes(flipped), 0, 100)


def test_a_store_directory_has_one_owner(tmp_path: Path) -> None:
    first = MessageStore(tmp_path / "b", HostPort("127.0.0.1", 1), clock=SystemClock())
    first.open()
    try:
        second = MessageStore(tmp_path / "b", HostPort("127.0.0.1", 1), clock=SystemClock())
        with pytest.raises(RuntimeError, match="in use"):
            second.open()
    finally:
        first.close()


def test_a_send_is_answered_once_fsynced(cluster: EmbeddedCluster, wire: Wire) -> None:
    commitlog = cluster.brokers["broker-a"].store.commitlog
    for i in range(20):
        ans = send_msg(wire, "T", b"durable" * i)
        phys = int(ans.ext["msgId"][-16:], 16)
        size = len(wire.request(req(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": phys})).body)
        assert commitlog.flushed_offset >= phys + size


def test_async_flush_cluster(tmp_path: Path) -> None:
    with EmbeddedCluster(tmp_path, topics={"T": 1}, flush="async") as c, Wire(c.broker_addrs["broker-a"]) as w:
        assert send_msg(w, "T", b"fast").code == 0
        assert w.request(req(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "T",
                                                                  "queueId": 0, "commitOffset": 1})).code == 0
    with EmbeddedCluster(tmp_path, flush="async") as c, Wire(c.broker_addrs["broker-a"]) as w:
        assert bodies(w, "T", 0) == [b"fast"]


def test_the_same_cluster_object_restarts_on_the_same_ports(tmp_path: Path) -> None:
    c = EmbeddedCluster(tmp_path, topics={"T": 1})
    with c:
        addrs, ns = c.broker_addrs, c.namesrv_addr
        with Wire(addrs["broker-a"]) as w:
            send_msg(w, "T", b"before")
            heartbeat(w, "127.0.0.1@c", "rg", {"T": "*"})
    assert c.broker_addrs == addrs  # still readable when stopped
    with c:
        assert (c.broker_addrs, c.namesrv_addr) == (addrs, ns)
        with Wire(addrs["broker-a"]) as w:
            send_msg(w, "T", b"after")
            assert bodies(w, "T", 0) == [b"before", b"after"]
            assert w.request(req(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "rg"})).code == 1


@pytest.mark.parametrize("cap", [32, 100])
def test_a_pull_returns_at_most_the_transfer_count(tmp_path: Path, cap: int) -> None:
    """Apache's maxTransferCountOnMessageInMemory: 32 by default, raised by configuration;
    with and without a tag filter."""
    with EmbeddedCluster(tmp_path, topics={"T": 1}, max_transfer_count=cap) as c, \
            Wire(c.broker_addrs["broker-a"]) as w:
        for i in range(150):
            send_msg(w, "T", b"m%d" % i, queue_id=0, tags="A")
        assert len(messages(pull(w, "reader", "T", 0, 0, max_nums=1000))) == cap
        assert len(messages(pull(w, "reader", "T", 0, 0, max_nums=20))) == 20
        assert len(messages(pull(w, "reader", "T", 0, 0, max_nums=1000, subscription="A || B"))) == cap


def _query(w: Wire, topic: str, key: str, *, unique: bool = False, max_num: int = 64) -> tuple[int, list[bytes]]:
    ext = {"topic": topic, "key": key, "maxNum": max_num, "beginTimestamp": 0, "endTimestamp": (1 << 63) - 1}
    if unique:
        ext["_UNIQUE_KEY_QUERY"] = "true"
    r = w.request(req(RequestCode.QUERY_MESSAGE, ext))
    assert {"indexLastUpdateTimestamp", "indexLastUpdatePhyoffset"} <= set(r.ext)
    return r.code, [m.body for m in decode_messages(r.body)] if r.body else []


def test_message_index_is_rebuilt_from_the_commit_log(tmp_path: Path) -> None:
    """QUERY_MESSAGE finds KEYS (each space-separated key) and UNIQ_KEY after a restart
    too, the newest maxNum oldest first; a rolled-back half message is not filed, a key of another topic
    is another key."""
    with EmbeddedCluster(tmp_path, topics={"T": 2, "U": 1}) as c, Wire(c.broker_addrs["broker-a"]) as w:
        send_msg(w, "T", b"a", keys="k1  k2", queue_id=0)
        uniq = "7F0000010001B4AAC1D2000000000001"
        send_msg(w, "T", b"b", keys="k2", queue_id=1, uniq=False, props={"UNIQ_KEY": uniq})
        send_msg(w, "U", b"c", keys="k1")
        before = (_query(w, "T", "k1"), _query(w, "T", "k2"), _query(w, "U", "k1"))
    with EmbeddedCluster(tmp_path) as c, Wire(c.broker_addrs["broker-a"]) as w:
        after = (_query(w, "T", "k1"), _query(w, "T", "k2"), _query(w, "U", "k1"))
        assert before == after == ((0, [b"a"]), (0, [b"a", b"b"]), (0, [b"c"]))
        assert _query(w, "T", "k2", max_num=1) == (0, [b"b"])
        assert _query(w, "T", uniq, unique=True) == (0, [b"b"])
        assert _query(w, "T", "k3") == (22, [])      # QUERY_NOT_FOUND
        assert _query(w, "T", "") == (22, [])
        send_msg(w, "T", b"d", keys="k2")
        assert _query(w, "T", "k2")[1] == [b"a", b"b", b"d"]
