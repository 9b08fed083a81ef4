"""Admin requests (17, 21, 28, 202), answer headers, serializations, unknown codes."""

from __future__ import annotations

import json

from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.remoting import fastjson
from rocketmq_spark.remoting.codes import SERIALIZE_ROCKETMQ, RequestCode
from rocketmq_spark.remoting.route import decode_route
from tests.embedded.wire import Wire, req, send_msg


def create(w: Wire, topic: str, queues: int = 4, perm: int = 6):  # type: ignore[no-untyped-def]
    return w.request(req(RequestCode.UPDATE_AND_CREATE_TOPIC, {
        "topic": topic, "defaultTopic": "TBW102", "readQueueNums": queues, "writeQueueNums": queues,
        "perm": perm, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"}))


def test_create_topic(cluster: EmbeddedCluster, wire: Wire, ns: Wire) -> None:
    ans = create(wire, "made", 2)
    assert (ans.code, ans.remark, ans.ext_fields) == (0, "not set any response code", None)
    route = decode_route(ns.request(req(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "made"})).body)
    assert [(q.read_queue_nums, q.perm) for q in route.queue_datas] == [(2, 6)]
    assert create(wire, "made", 3, perm=4).code == 0  # update
    assert cluster.brokers["broker-a"].topics.get("made").perm == 4
    assert send_msg(wire, "made", b"x").code == 16    # no longer writable
    ans = create(wire, "bad name")
    assert ans.code == 1 and "illegal characters" in ans.remark
    assert create(wire, "DefaultCluster").code == 1
    ans = create(wire, "TBW102", 1)
    assert (ans.code, ans.remark) == (1, "The topic[TBW102] is conflict with system topic.")
    ans = create(wire, "huge", 100_000)
    assert ans.code == 1 and "readQueueNums 100000" in ans.remark


def test_all_topic_config(wire: Wire) -> None:
    ans = wire.request(req(RequestCode.GET_ALL_TOPIC_CONFIG))
    assert (ans.code, ans.ext_fields) == (0, {})
    body = json.loads(ans.body)
    assert set(body["dataVersion"]) == {"counter", "timestamp"}
    table = body["topicConfigTable"]
    assert table["TBW102"] == {"order": False, "perm": 7, "readQueueNums": 8, "topicFilterType": "SINGLE_TAG",
                               "topicName": "TBW102", "topicSysFlag": 0, "writeQueueNums": 8}
    assert table["SCHEDULE_TOPIC_XXXX"]["readQueueNums"] == 18 and table["T"]["writeQueueNums"] == 4


def test_runtime_info(wire: Wire) -> None:
    send_msg(wire, "T", b"x")
    ans = wire.request(req(RequestCode.GET_BROKER_RUNTIME_INFO))
    table = json.loads(ans.body)["table"]
    assert ans.ext_fields is None and all(isinstance(v, str) for v in table.values())
    assert (table["brokerVersionDesc"], table["brokerVersion"], table["msgPutTotalTodayNow"]) == ("V4_9_8", "409", "1")
    assert int(table["commitLogMaxOffset"]) > 0


def test_topic_stats(cluster: EmbeddedCluster, wire: Wire) -> None:
    for qid in (0, 0, 2):
        send_msg(wire, "T", b"x", queue_id=qid)
    ans = wire.request(req(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "T"}))
    assert ans.code == 0 and ans.ext_fields is None
    assert b'{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:' in ans.body
    table = {json.loads(k)["queueId"]: v for k, v in fastjson.loads(ans.body)["offsetTable"].items()}
    store = cluster.brokers["broker-a"].store
    assert table[0] == {"lastUpdateTimestamp": store.store_time("T", 0, 1), "maxOffset": 2, "minOffset": 0}
    assert table[1] == {"lastUpdateTimestamp": 0, "maxOffset": 0, "minOffset": 0}
    assert sorted(table) == [0, 1, 2, 3]
    ans = wire.request(req(RequestCode.GET_TOPIC_STATS_INFO, {"topic": "nosuch"}))
    assert (ans.code, ans.remark, ans.ext_fields) == (17, "topic[nosuch] not exist", None)


def test_answers_look_like_4_9_8(wire: Wire) -> None:
    for version in (0, 63, 413):
        ans = wire.request(req(RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": 0}, version=version,
                               language="CPP"))
        assert (ans.flag, ans.language, ans.version, ans.ext_fields) == (1, "JAVA", 409, {"offset": "0"})
    ans = wire.request(req(RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": 0}, serialize_type=SERIALIZE_ROCKETMQ))
    assert ans.serialize_type == SERIALIZE_ROCKETMQ and ans.ext == {"offset": "0"}
    ans = wire.request(req(9999, {"x": "1"}))
    assert (ans.code, ans.remark, ans.ext_fields) == (3, " request type 9999 not supported", None)


def test_oneway_requests_get_no_answer(wire: Wire) -> None:
    wire.send(req(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "ow", "topic": "T", "queueId": 0,
                                                       "commitOffset": 7}, flag=2))
    wire.send(req(9999, flag=2))
    q = wire.request(req(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "ow", "topic": "T", "queueId": 0}))
    assert q.ext == {"offset": "7"}
    assert not wire._answers


def test_rate_window_counts_the_last_minute_in_bounded_memory() -> None:
    from rocketmq_spark.embedded.stats import RateWindow

    w = RateWindow(window=60.0)
    for i in range(120_000):                 # 2,000 events a second for 60 s
        w.add(1, 1000.0 + i / 2000)
    assert w.rate(1060.0) == 2000.0
    assert len(w._buckets) <= 61             # one bucket a second, not one an event
    w.add(30, 1075.5)                        # 15 s later: the first 15 s have left the window
    assert w.rate(1075.5) == (45 * 2000 + 30) / 60
    assert w.rate(1200.0) == 0.0
