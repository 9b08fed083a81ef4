"""Heartbeats, consumer lists, notifications, unregister, expiry; admin views of groups."""

from __future__ import annotations

import json
from pathlib import Path

from rocketmq_spark.embedded import EmbeddedCluster, FakeClock
from rocketmq_spark.remoting import fastjson
from rocketmq_spark.remoting.codes import RequestCode
from rocketmq_spark.remoting.command import decode
from tests.embedded.wire import Wire, heartbeat, req, send_msg, wait_for
from tests.vectors import cpp_vectors

CPP = cpp_vectors()


def consumer_list(w: Wire, group: str):  # type: ignore[no-untyped-def]
    return w.request(req(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group}))


def is_notify(group: str):  # type: ignore[no-untyped-def]
    return lambda c: c.code == 40 and c.ext == {"consumerGroup": group}


def test_heartbeat_registers_and_notifies_the_group(cluster: EmbeddedCluster, broker_addr: str) -> None:
    broker = cluster.brokers["broker-a"]
    with Wire(broker_addr) as a, Wire(broker_addr) as b:
        ans = heartbeat(a, "127.0.0.1@A", "cg", {"T": "*"})
        assert (ans.code, ans.ext_fields, ans.body, ans.remark) == (0, None, b"", None)
        note = a.wait_pushed(is_notify("cg"))
        assert (note.flag, note.language, note.version, note.serialize_type) == (2, "JAVA", 409, 0)
        assert broker.topics.get("%RETRY%cg").perm == 6 and broker.groups.get("cg") is not None
        heartbeat(b, "127.0.0.1@B", "cg", {"T": "*"})
        a.wait_pushed(lambda c: sum(1 for p in a.pushed if p.code == 40) == 2)  # A is told B joined
        b.wait_pushed(is_notify("cg"))
        ans = consumer_list(a, "cg")
        assert (ans.code, ans.ext_fields) == (0, {})
        assert sorted(json.loads(ans.body)["consumerIdList"]) == ["127.0.0.1@A", "127.0.0.1@B"]
        # The same heartbeat again changes nothing and notifies nobody.
        before = len(a.pushed)
        heartbeat(a, "127.0.0.1@A", "cg", {"T": "*"})
        assert consumer_list(a, "cg").code == 0 and len(a.pushed) == before
        ans = a.request(req(RequestCode.UNREGISTER_CLIENT, {"clientID": "127.0.0.1@A", "consumerGroup": "cg",
                                                             "producerGroup": ""}))
        assert (ans.code, ans.ext_fields) == (0, {})
        assert json.loads(consumer_list(b, "cg").body)["consumerIdList"] == ["127.0.0.1@B"]
        b.wait_pushed(lambda c: sum(1 for p in b.pushed if p.code == 40) == 2)
    assert wait_for(lambda: consumer_list_code(broker_addr, "cg") == 1)


def consumer_list_code(addr: str, group: str) -> int:
    with Wire(addr) as w:
        ans = consumer_list(w, group)
        if ans.code == 1:
            assert ans.remark == f"no consumer for this group, {group}" and ans.ext_fields == {}
        return ans.code


def test_closing_a_connection_removes_the_client(broker_addr: str) -> None:
    with Wire(broker_addr) as stay:
        heartbeat(stay, "127.0.0.1@S", "cg2", {"T": "*"})
        leave = Wire(broker_addr)
        heartbeat(leave, "127.0.0.1@L", "cg2", {"T": "*"})
        stay.wait_pushed(lambda c: sum(1 for p in stay.pushed if p.code == 40) == 2)
        leave.close()
        stay.wait_pushed(lambda c: sum(1 for p in stay.pushed if p.code == 40) == 3)
        assert json.loads(consumer_list(stay, "cg2").body)["consumerIdList"] == ["127.0.0.1@S"]


def test_broadcasting_groups_are_not_notified(wire: Wire) -> None:
    heartbeat(wire, "127.0.0.1@X", "bc", {"T": "*"}, model="BROADCASTING")
    assert consumer_list(wire, "bc").code == 0 and wire.pushed == []


def test_empty_heartbeat_body_is_an_error(wire: Wire) -> None:
    ans = wire.request(req(RequestCode.HEART_BEAT))
    assert ans.code == 1 and ans.ext_fields is None and "body" in ans.remark
    ans = wire.request(req(RequestCode.HEART_BEAT, None, b"{not json"))
    assert ans.code == 1


def test_cpp_heartbeat_with_ordinal_enums(cluster: EmbeddedCluster, broker_addr: str) -> None:
    vec = CPP["heart_beat_consumer_tags"]
    frame = bytes.fromhex(vec["frame_hex"])
    hb, _ = decode(frame)
    group = vec["body"]["consumerDataSet"][0]["groupName"]
    with Wire(broker_addr) as w:
        w.send_raw(frame)
        assert w.answer(hb.opaque).code == 0
        ans = w.request(req(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group}))
        body = json.loads(ans.body)
        assert (body["consumeType"], body["messageModel"]) == ("CONSUME_PASSIVELY", "CLUSTERING")
        conn = body["connectionSet"][0]
        assert (conn["clientId"], conn["language"], conn["version"]) == (vec["body"]["clientID"], "CPP", 63)
        assert conn["clientAddr"] == f"127.0.0.1:{w.sock.getsockname()[1]}"
        sub = next(s for s in body["subscriptionTable"].values() if s["subString"] == "TagA || TagB")
        assert sub["codeSet"] == [2598919, 2598920] and sub["tagsSet"] == ["TagA", "TagB"]


def test_consumer_connection_list_offline(wire: Wire) -> None:
    ans = wire.request(req(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "ghost"}))
    assert (ans.code, ans.remark, ans.ext_fields) == (206, "the consumer group[ghost] not online", None)


def test_consume_stats(cluster: EmbeddedCluster, wire: Wire) -> None:
    store = cluster.brokers["broker-a"].store
    for i in range(3):
        send_msg(wire, "T", b"x", queue_id=0)
    send_msg(wire, "T", b"x", queue_id=1)
    for qid, off in ((0, 2), (2, 1000)):
        wire.request(req(RequestCode.UPDATE_CONSUMER_OFFSET, {"consumerGroup": "cs", "topic": "T", "queueId": qid,
                                                              "commitOffset": off}))
    for ext in ({"consumerGroup": "cs"}, {"consumerGroup": "cs", "topic": "T"}):
        ans = wire.request(req(RequestCode.GET_CONSUME_STATS, ext))
        assert ans.code == 0 and ans.ext_fields is None
        assert b'{{"brokerName":"broker-a","queueId":0,"topic":"T"}:' in b"{" + ans.body.split(b"offsetTable\":")[1]
        body = fastjson.loads(ans.body)
        assert isinstance(body["consumeTps"], float)
        table = {json.loads(k)["queueId"]: v for k, v in body["offsetTable"].items()}
        assert table == {0: {"brokerOffset": 3, "consumerOffset": 2, "lastTimestamp": store.store_time("T", 0, 1)},
                         1: {"brokerOffset": 1, "consumerOffset": 0, "lastTimestamp": 0},
                         2: {"brokerOffset": 0, "consumerOffset": 1000, "lastTimestamp": 0},
                         3: {"brokerOffset": 0, "consumerOffset": 0, "lastTimestamp": 0}}
    ans = wire.request(req(RequestCode.GET_CONSUME_STATS, {"consumerGroup": "nobody"}))
    assert ans.body == b'{"consumeTps":0.0,"offsetTable":{}}'


def test_clients_expire_after_120_s_without_heartbeat(tmp_path: Path) -> None:
    clock = FakeClock()
    with EmbeddedCluster(tmp_path, topics={"T": 1}, clock=clock) as c:
        broker = c.brokers["broker-a"]
        addr = c.broker_addrs["broker-a"]
        with Wire(addr) as w, Wire(addr) as fresh:
            heartbeat(w, "127.0.0.1@old", "eg", {"T": "*"})
            clock.advance(100_000)
            heartbeat(fresh, "127.0.0.1@new", "eg", {"T": "*"}, producer_group="pg")
            assert broker.expire_clients() == []
            clock.advance(20_001)  # the first is now 120.001 s silent, the second 20 s
            assert [conn.id for conn in broker.expire_clients()] != []
            assert w.wait_closed(5)
            assert json.loads(consumer_list(fresh, "eg").body)["consumerIdList"] == ["127.0.0.1@new"]
            fresh.wait_pushed(lambda cmd: sum(1 for p in fresh.pushed if p.code == 40) == 2)
