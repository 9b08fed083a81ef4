"""The embedded NameServer over TCP: routes, cluster info, topic list, serializations."""

from __future__ import annotations

import json
from pathlib import Path

from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.remoting import fastjson
from rocketmq_spark.remoting.codes import SERIALIZE_ROCKETMQ, RequestCode
from rocketmq_spark.remoting.route import decode_route
from tests.embedded.wire import Wire, heartbeat, req

FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


def route(ns: Wire, topic: str, **kw):  # type: ignore[no-untyped-def]
    return ns.request(req(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}, **kw))


def test_route_of_existing_topic_is_standard_json(cluster: EmbeddedCluster, ns: Wire) -> None:
    ans = route(ns, "T")
    assert (ans.code, ans.flag, ans.language, ans.version, ans.ext_fields, ans.remark) == (0, 1, "JAVA", 409, None, None)
    assert json.loads(ans.body) == {
        "brokerDatas": [{"brokerAddrs": {"0": cluster.broker_addrs["broker-a"]}, "brokerName": "broker-a",
                         "cluster": "DefaultCluster"}],
        "filterServerTable": {},
        "queueDatas": [{"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0,
                        "writeQueueNums": 4}]}
    # Old client versions get the same quoted form (a compatible NameServer always quotes).
    assert json.loads(route(ns, "T", version=0).body) == json.loads(ans.body)


def test_unknown_topic_is_topic_not_exist_with_apache_remark(ns: Wire) -> None:
    ans = route(ns, "nosuchtopic")
    assert ans.code == 17 and ans.ext_fields is None and ans.body == b""
    assert ans.remark == "No topic route info in name server for the topic: nosuchtopic" + FAQ


def test_tbw102_route_lets_producers_auto_create(ns: Wire) -> None:
    qd = json.loads(route(ns, "TBW102").body)["queueDatas"]
    assert qd == [{"brokerName": "broker-a", "perm": 7, "readQueueNums": 8, "topicSysFlag": 0, "writeQueueNums": 8}]


def test_retry_route_created_on_first_lookup(cluster: EmbeddedCluster, ns: Wire) -> None:
    ans = route(ns, "%RETRY%fresh_group")
    assert ans.code == 0
    r = decode_route(ans.body)
    assert [(q.read_queue_nums, q.write_queue_nums, q.perm) for q in r.queue_datas] == [(1, 1, 6)]
    assert cluster.brokers["broker-a"].topics.get("%RETRY%fresh_group") is not None
    assert route(ns, "%DLQ%fresh_group").code == 17  # DLQs are not created by lookups


def test_retry_route_created_by_heartbeat(cluster: EmbeddedCluster, ns: Wire, wire: Wire) -> None:
    assert heartbeat(wire, "127.0.0.1@c1", "hb_group", {"T": "*"}).code == 0
    r = decode_route(route(ns, "%RETRY%hb_group").body)
    assert [(q.read_queue_nums, q.perm) for q in r.queue_datas] == [(1, 6)]


def test_cluster_info_is_written_like_fastjson(cluster: EmbeddedCluster, ns: Wire) -> None:
    ans = ns.request(req(RequestCode.GET_BROKER_CLUSTER_INFO))
    assert ans.code == 0 and ans.ext_fields is None
    addr = cluster.broker_addrs["broker-a"]
    assert f'"brokerAddrs":{{0:"{addr}"}}'.encode() in ans.body  # bare key, as 4.9.8 writes it
    body = fastjson.loads(ans.body)
    assert body["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}
    assert body["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": addr}


def test_all_topic_list(ns: Wire, wire: Wire) -> None:
    heartbeat(wire, "127.0.0.1@c1", "listed_group", {"T": "*"})
    topics = json.loads(ns.request(req(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).body)["topicList"]
    assert {"T", "TBW102", "SCHEDULE_TOPIC_XXXX", "%RETRY%listed_group", "DefaultCluster", "broker-a"} <= set(topics)


def test_rocketmq_serialization_is_answered_in_kind(ns: Wire) -> None:
    ans = route(ns, "T", serialize_type=SERIALIZE_ROCKETMQ)
    assert ans.serialize_type == SERIALIZE_ROCKETMQ and ans.code == 0
    assert decode_route(ans.body).queue_datas[0].read_queue_nums == 4


def test_unknown_code_and_missing_topic(ns: Wire) -> None:
    ans = ns.request(req(9999, {"x": "1"}))
    assert (ans.code, ans.remark) == (3, " request type 9999 not supported")
    ans = ns.request(req(RequestCode.GET_ROUTEINFO_BY_TOPIC, {}))
    assert ans.code == 1 and "topic" in ans.remark


def test_two_brokers_route_and_cluster(tmp_path: Path) -> None:
    with EmbeddedCluster(tmp_path, brokers=2, topics={"both": 2}) as c:
        assert list(c.brokers) == ["broker-a", "broker-b"]
        assert len(set(c.broker_addrs.values())) == 2
        with Wire(c.namesrv_addr) as ns:
            r = decode_route(route(ns, "both").body)
            assert [(q.broker_name, q.read_queue_nums) for q in r.queue_datas] == [("broker-a", 2), ("broker-b", 2)]
            assert {b.broker_name: b.master_addr for b in r.broker_datas} == c.broker_addrs
            c.brokers["broker-b"].create_topic("only_b", 3)
            r = decode_route(route(ns, "only_b").body)
            assert [q.broker_name for q in r.queue_datas] == ["broker-b"]
            info = fastjson.loads(ns.request(req(RequestCode.GET_BROKER_CLUSTER_INFO)).body)
            assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a", "broker-b"]}


def test_addresses_are_ips_clients_can_reach(tmp_path: Path) -> None:
    for host in ("localhost", "0.0.0.0"):
        with EmbeddedCluster(tmp_path / host, host=host) as c:
            assert c.namesrv_addr.startswith("127.0.0.1:") and c.broker_addrs["broker-a"].startswith("127.0.0.1:")
            with Wire(c.namesrv_addr) as ns:
                assert route(ns, "TBW102").code == 0
