"""Delay levels, CONSUMER_SEND_MSG_BACK, %RETRY% and %DLQ% topics (sections 8.2-8.4)."""

from __future__ import annotations

import time
from pathlib import Path

from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.remoting.codes import SCHEDULE_TOPIC, RequestCode
from tests.embedded.wire import Wire, max_offset, messages, pull, req, send_msg, wait_for


def send_back(w: Wire, offset: int, group: str = "rg", delay: int = 0, max_times: int | None = 16,
              version: int = 413):  # type: ignore[no-untyped-def]
    ext = {"offset": offset, "group": group, "delayLevel": delay, "originMsgId": "IGNORED", "originTopic": "T",
           "unitMode": "false"}
    if max_times is not None:
        ext["maxReconsumeTimes"] = max_times
    return w.request(req(RequestCode.CONSUMER_SEND_MSG_BACK, ext, version=version))


def only(w: Wire, topic: str, qid: int = 0):  # type: ignore[no-untyped-def]
    got = messages(pull(w, "reader", topic, qid, 0))
    assert len(got) == 1
    return got[0]


def test_delay_level_1_is_delivered_after_about_a_second(cluster: EmbeddedCluster, wire: Wire) -> None:
    start = time.monotonic()
    ans = send_msg(wire, "T", b"later", queue_id=3, tags="TagDelay", props={"DELAY": "1"})
    assert ans.code == 0 and ans.ext["queueId"] == "3"
    store = cluster.brokers["broker-a"].store
    assert int(ans.ext["queueOffset"]) == store.max_offset(SCHEDULE_TOPIC, 0) - 1  # the schedule queue's
    assert max_offset(wire, "T", 3) == 0
    assert wait_for(lambda: max_offset(wire, "T", 3) == 1, timeout=5)
    elapsed = time.monotonic() - start
    assert 0.9 <= elapsed < 4.0
    m = only(wire, "T", 3)
    assert m.body == b"later" and m.queue_offset == 0
    assert {k: m.properties[k] for k in ("REAL_TOPIC", "REAL_QID", "DELAY", "WAIT", "TAGS")} == \
        {"REAL_TOPIC": "T", "REAL_QID": "3", "DELAY": "1", "WAIT": "true", "TAGS": "TagDelay"}


def test_send_back_to_retry_then_dlq(cluster: EmbeddedCluster, wire: Wire) -> None:
    phys = int(send_msg(wire, "T", b"fail me", tags="TagA", keys="k", props={"color": "red"}).ext["msgId"][-16:], 16)
    original = messages(wire.request(req(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": phys})))[0]
    start = time.monotonic()
    ans = send_back(wire, phys, delay=1)
    assert (ans.code, ans.ext_fields, ans.body) == (0, None, b"")
    assert wait_for(lambda: max_offset(wire, "%RETRY%rg", 0) == 1, timeout=5)
    assert time.monotonic() - start >= 0.9
    retry = only(wire, "%RETRY%rg")
    assert (retry.body, retry.reconsume_times, retry.born_timestamp, retry.born_host) == \
        (b"fail me", 1, original.born_timestamp, original.born_host)
    p = retry.properties
    assert p["RETRY_TOPIC"] == "T" and p["ORIGIN_MESSAGE_ID"] == original.offset_msg_id
    assert (p["WAIT"], p["DELAY"], p["REAL_TOPIC"], p["REAL_QID"]) == ("false", "1", "%RETRY%rg", "0")
    assert p["UNIQ_KEY"] == original.properties["UNIQ_KEY"] and p["color"] == "red" and p["TAGS"] == "TagA"
    # The retry copy fails again with maxReconsumeTimes 1: reconsumeTimes 1 >= 1 -> DLQ, at once.
    assert send_back(wire, retry.commit_log_offset, max_times=1).code == 0
    assert max_offset(wire, "%DLQ%rg", 0) == 1
    dlq = only(wire, "%DLQ%rg")
    assert dlq.reconsume_times == 2 and dlq.properties["DELAY"] == "0"
    assert dlq.properties["ORIGIN_MESSAGE_ID"] == original.offset_msg_id and dlq.properties["RETRY_TOPIC"] == "T"
    config = cluster.brokers["broker-a"].topics.get("%DLQ%rg")
    assert (config.read_queue_nums, config.perm) == (1, 6)


def test_negative_delay_goes_straight_to_dlq(wire: Wire) -> None:
    phys = int(send_msg(wire, "T", b"poison").ext["msgId"][-16:], 16)
    assert send_back(wire, phys, delay=-1).code == 0
    assert only(wire, "%DLQ%rg").body == b"poison"


def test_delay_zero_lets_the_broker_choose_3_plus_reconsume_times(cluster: EmbeddedCluster, wire: Wire) -> None:
    store = cluster.brokers["broker-a"].store
    phys = int(send_msg(wire, "T", b"x").ext["msgId"][-16:], 16)
    assert send_back(wire, phys, delay=0).code == 0
    assert store.max_offset(SCHEDULE_TOPIC, 2) == 1  # level 3 = queue 2 (10 s)
    assert max_offset(wire, "%DLQ%rg", 0) == 0


def test_max_reconsume_times_needs_version_3_4_9(cluster: EmbeddedCluster, wire: Wire) -> None:
    store = cluster.brokers["broker-a"].store
    phys = int(send_msg(wire, "T", b"x").ext["msgId"][-16:], 16)
    assert send_back(wire, phys, delay=1, max_times=0, version=0).code == 0   # header ignored: retry
    assert store.max_offset(SCHEDULE_TOPIC, 0) == 1 and max_offset(wire, "%DLQ%rg", 0) == 0
    assert send_back(wire, phys, delay=1, max_times=0, version=409).code == 0  # honoured: DLQ
    assert max_offset(wire, "%DLQ%rg", 0) == 1


def test_send_back_of_a_bad_offset(wire: Wire) -> None:
    phys = int(send_msg(wire, "T", b"x").ext["msgId"][-16:], 16)
    ans = send_back(wire, phys + 1)
    assert (ans.code, ans.remark, ans.ext_fields) == (1, f"look message by offset failed, {phys + 1}", None)


def test_send_to_retry_topic_past_the_limit_goes_to_dlq(wire: Wire) -> None:
    ok = send_msg(wire, "%RETRY%sg", b"r1", extra={"reconsumeTimes": 1, "maxReconsumeTimes": 3})
    assert ok.code == 0 and max_offset(wire, "%RETRY%sg", 0) == 1
    dead = send_msg(wire, "%RETRY%sg", b"r2", extra={"reconsumeTimes": 3, "maxReconsumeTimes": 3})
    assert dead.code == 0 and max_offset(wire, "%DLQ%sg", 0) == 1
    assert only(wire, "%DLQ%sg").properties["DELAY"] == "0"


def test_scheduled_messages_survive_a_restart(tmp_path: Path) -> None:
    with EmbeddedCluster(tmp_path, topics={"T": 1}) as c, Wire(c.broker_addrs["broker-a"]) as w:
        assert send_msg(w, "T", b"after restart", props={"DELAY": "1"}).code == 0
    with EmbeddedCluster(tmp_path) as c, Wire(c.broker_addrs["broker-a"]) as w:
        assert wait_for(lambda: max_offset(w, "T", 0) == 1, timeout=5)
        assert only(w, "T").body == b"after restart"
    with EmbeddedCluster(tmp_path) as c, Wire(c.broker_addrs["broker-a"]) as w:
        assert c.brokers["broker-a"].schedule.progress()[1] == (1, 1)  # not delivered twice
        assert max_offset(w, "T", 0) == 1
