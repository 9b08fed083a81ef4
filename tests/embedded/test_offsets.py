"""Consumer offsets (14, 15) and queue metadata (29-33) over TCP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rocketmq_spark.embedded import EmbeddedCluster, FakeClock
from rocketmq_spark.embedded.store.consumequeue import ConsumeQueue
from rocketmq_spark.remoting.codes import RequestCode
from tests.embedded.wire import Wire, offset_call, req, send_msg


def query(w: Wire, group: str, topic: str = "T", qid: int = 0):  # type: ignore[no-untyped-def]
    return w.request(req(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic, "queueId": qid}))


def update(w: Wire, group: str, offset: int, topic: str = "T", qid: int = 0):  # type: ignore[no-untyped-def]
    return w.request(req(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": group, "topic": topic,
                                                              "queueId": qid, "commitOffset": offset}))


def test_new_group_reads_zero_while_queue_starts_at_zero(wire: Wire) -> None:
    send_msg(wire, "T", b"x")
    for topic in ("T", "nosuchtopic"):
        ans = query(wire, "never", topic)
        assert (ans.code, ans.ext_fields) == (0, {"offset": "0"})


def test_update_then_query_and_beyond_max(cluster: EmbeddedCluster, wire: Wire) -> None:
    ans = update(wire, "cg", 3)
    assert (ans.code, ans.ext_fields, ans.remark) == (0, {}, None)
    assert query(wire, "cg").ext == {"offset": "3"}
    assert update(wire, "cg", 1000, qid=2).code == 0  # no range check in 4.9.8
    assert query(wire, "cg", qid=2).ext == {"offset": "1000"}
    # An answered update is on disk already.
    saved = json.loads((Path(cluster.data_dir) / "broker-a" / "config" / "consumerOffset.json").read_text())
    assert saved["offsetTable"]["T@cg"] == {"0": 3, "2": 1000}


def test_update_needs_every_field(wire: Wire) -> None:
    ans = wire.request(req(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "T", "queueId": 0}))
    assert ans.code == 1 and "commitOffset" in ans.remark
    ans = wire.request(req(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "g", "topic": "T"}))
    assert ans.code == 1 and "queueId" in ans.remark and ans.ext_fields is None


def test_max_min_offsets(wire: Wire) -> None:
    for _ in range(3):
        send_msg(wire, "T", b"x", queue_id=1)
    assert offset_call(wire, RequestCode.GET_MAX_OFFSET, "T", 1).ext == {"offset": "3"}
    assert offset_call(wire, RequestCode.GET_MIN_OFFSET, "T", 1).ext == {"offset": "0"}
    assert offset_call(wire, RequestCode.GET_MAX_OFFSET, "nosuchtopic", 0).ext == {"offset": "0"}
    assert offset_call(wire, RequestCode.GET_MIN_OFFSET, "nosuchtopic", 0).ext == {"offset": "0"}


def test_earliest_store_time_and_view_by_offset(cluster: EmbeddedCluster, wire: Wire) -> None:
    assert offset_call(wire, RequestCode.GET_EARLIEST_MSG_STORETIME, "T", 0).ext == {"timestamp": "-1"}
    phys = int(send_msg(wire, "T", b"x").ext["msgId"][-16:], 16)
    store = cluster.brokers["broker-a"].store
    ans = offset_call(wire, RequestCode.GET_EARLIEST_MSG_STORETIME, "T", 0)
    assert ans.ext == {"timestamp": str(store.store_time("T", 0, 0))}
    bad = wire.request(req(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": phys + 1}))
    assert (bad.code, bad.remark, bad.body) == (1, f"can not find message by the offset, {phys + 1}", b"")


@pytest.fixture()
def timed(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Seven messages in queue 0 stored at exact (fake) times, like the recorded ones."""
    clock = FakeClock(1_000_000)
    times = [1000, 1066, 1098, 1131, 1162, 1194, 23743]  # offsets 0..6, ms after start
    with EmbeddedCluster(tmp_path, topics={"T": 4}, clock=clock) as c, Wire(c.broker_addrs["broker-a"]) as w:
        for t in times:
            clock.set(1_000_000 + t)
            send_msg(w, "T", b"x")
        yield w, [1_000_000 + t for t in times]


@pytest.mark.parametrize("probe,expected", [
    (lambda ts: ts[2], 2),                  # exact store time
    (lambda ts: ts[5] + 5637, 5),           # between 5 and 6, nearer the earlier
    (lambda ts: ts[6] - 5638, 6),           # between 5 and 6, nearer the later
    (lambda ts: ts[0] - 10_000, 0),         # before the first: the min offset
    (lambda ts: ts[6] + 10_000, 6),         # after the last: max - 1, not max
    (lambda ts: (ts[0] + ts[1]) // 2, 0),   # a tie goes to the earlier one
])
def test_search_offset_by_timestamp_nearest_rule(timed, probe, expected) -> None:  # type: ignore[no-untyped-def]
    w, times = timed
    ans = w.request(req(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": "T", "queueId": 0, "timestamp": probe(times)}))
    assert (ans.code, ans.ext_fields) == (0, {"offset": str(expected)})


def test_search_on_empty_and_unknown_queue(wire: Wire) -> None:
    for topic in ("T", "nosuchtopic"):
        ans = wire.request(req(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, {"topic": topic, "queueId": 0, "timestamp": 5}))
        assert ans.ext == {"offset": "0"}


def test_search_nearest_table(tmp_path: Path) -> None:
    """The pure rule on a consume queue, including duplicate store times."""
    cq = ConsumeQueue(tmp_path, "T", 0)
    for i, t in enumerate([10, 20, 20, 20, 30, 50]):
        cq.append(i * 100, 100, 0, t)
    cases = {5: 0, 10: 0, 14: 0, 15: 0, 16: 1, 20: 1, 24: 3, 26: 4, 40: 4, 41: 5, 99: 5}
    assert {t: cq.search_nearest(t, 0, cq.max_offset) for t in cases} == cases
    assert cq.search_nearest(5, 2, 6) == 2 and cq.search_nearest(99, 0, 3) == 2
    assert cq.search_nearest(5, 3, 3) == 3
