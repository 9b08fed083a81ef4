"""Embedded slaves (``EmbeddedCluster(slaves=1)``) over TCP: a slave copies its master's
commit log at the same offsets, syncs topics, offsets and groups, is routed with brokerId 1,
serves pulls and offsets, refuses sends as an Apache slave does, and goes on where it was
after a restart of either side."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterator

import pytest

from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.remoting.codes import RequestCode, ResponseCode
from tests.embedded.wire import Wire, lock_body, max_offset, messages, offset_call, pull, req, send_msg
from tests.waiting import wait_until


@pytest.fixture()
def replicated(tmp_path: Path) -> Iterator[EmbeddedCluster]:
    with EmbeddedCluster(tmp_path / "data", namesrv_port=0, brokers=2, slaves=1, topics={"T": 2},
                         sync_interval=0.2) as c:
        yield c


def _slave(c: EmbeddedCluster, name: str = "broker-a") -> str:
    return c.slave_addrs[name][0]


def _holds(addr: str, topic: str, queue_id: int, n: int) -> bool:
    with Wire(addr) as w:
        ans = offset_call(w, RequestCode.GET_MAX_OFFSET, topic, queue_id)
        return ans.code == ResponseCode.SUCCESS and int(ans.ext["offset"]) >= n


def test_route_and_cluster_info_list_the_slave_as_broker_id_1(replicated: EmbeddedCluster) -> None:
    with Wire(replicated.namesrv_addr) as ns:
        route = json.loads(ns.request(req(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})).body)
        info = ns.request(req(RequestCode.GET_BROKER_CLUSTER_INFO)).body.decode()
    addrs = {b["brokerName"]: b["brokerAddrs"] for b in route["brokerDatas"]}
    assert addrs == {"broker-a": {"0": replicated.broker_addrs["broker-a"], "1": _slave(replicated)},
                     "broker-b": {"0": replicated.broker_addrs["broker-b"], "1": _slave(replicated, "broker-b")}}
    assert f'1:"{_slave(replicated)}"' in info
    assert replicated.slaves["broker-a"][0].root.name == "broker-a-1"


def test_the_slave_holds_the_masters_messages_at_the_same_offsets(replicated: EmbeddedCluster) -> None:
    master, slave = replicated.broker_addrs["broker-a"], _slave(replicated)
    with Wire(master) as w:
        sent = [send_msg(w, "T", b"m%d" % i, queue_id=i % 2, tags="tagA" if i % 3 else "tagB") for i in range(30)]
    assert all(a.code == 0 for a in sent)
    wait_until(lambda: _holds(slave, "T", 0, 15) and _holds(slave, "T", 1, 15), 10, "the slave to copy 30 messages")
    with Wire(master) as m, Wire(slave) as s:
        for q in (0, 1):
            from_master, from_slave = pull(m, "g", "T", q, 0), pull(s, "g", "T", q, 0)
            assert from_slave.code == ResponseCode.SUCCESS
            assert from_slave.ext["suggestWhichBrokerId"] == "0"      # back to the master next time
            got = [(x.queue_offset, x.commit_log_offset, x.body, x.msg_id) for x in messages(from_slave)]
            assert got == [(x.queue_offset, x.commit_log_offset, x.body, x.msg_id) for x in messages(from_master)]
            assert len(got) == 15
            # tag filtering works on the slave's own consume queue
            tagged = messages(pull(s, "g", "T", q, 0, subscription="tagB"))
            assert {x.body for x in tagged} == {b"m%d" % i for i in range(30) if i % 2 == q and not i % 3}
        for code in (RequestCode.GET_MIN_OFFSET, RequestCode.GET_MAX_OFFSET):
            assert offset_call(s, code, "T", 0).ext == offset_call(m, code, "T", 0).ext


def test_topics_offsets_and_groups_follow_the_master(replicated: EmbeddedCluster) -> None:
    master, slave = replicated.brokers["broker-a"], replicated.slaves["broker-a"][0]
    replicated.create_topic("Fresh", 3, brokers=["broker-a"])
    wait_until(lambda: slave.topics.get("Fresh") is not None, 10, "the slave to know topic Fresh")
    assert slave.topics.get("Fresh") == master.topics.get("Fresh")
    with Wire(master.addr) as w:
        ans = w.request(req(RequestCode.UPDATE_CONSUMER_OFFSET,
                            {"consumerGroup": "cg", "topic": "T", "queueId": 1, "commitOffset": 7}))
        assert ans.code == 0
    wait_until(lambda: slave.offsets.query("cg", "T", 1) == 7, 10, "the slave to sync the committed offset")
    with Wire(slave.addr) as s:
        ans = s.request(req(RequestCode.QUERY_CONSUMER_OFFSET, {"consumerGroup": "cg", "topic": "T", "queueId": 1}))
        assert (ans.code, ans.ext["offset"]) == (0, "7")
        # a pull's commit flag stores nothing on a slave (Apache: only masters store it)
        pull(s, "cg", "T", 1, 0, sys_flag=4 | 1, commit_offset=3)
    assert slave.offsets.query("cg", "T", 1) == 7
    wait_until(lambda: slave.groups.get("cg") is not None, 10, "the slave to sync group cg")


def test_a_slave_answers_sends_commits_and_locks_as_an_apache_slave_does(replicated: EmbeddedCluster) -> None:
    """What an Apache 4.9.7 slave answered (scripts/apache-cluster): sends 14 with this remark
    (its disk ratios formatted %5.2f), offset commits and locks accepted on its own tables
    (the commit is replaced at the next sync; clients lock and commit on masters only)."""
    with Wire(_slave(replicated)) as s:
        ans = send_msg(s, "T", b"x")
        assert ans.code == ResponseCode.SERVICE_NOT_AVAILABLE == 14
        assert re.fullmatch(r"service not available now\. It may be caused by one of the following reasons: "
                            r"the broker's disk is full \[CL: +\d\.\d\d CQ: +\d\.\d\d INDEX: +\d\.\d\d\], "
                            r"messages are put to the slave, message store has been shut down, etc\.", ans.remark or "")
        commit = s.request(req(RequestCode.UPDATE_CONSUMER_OFFSET,
                               {"consumerGroup": "lg", "topic": "T", "queueId": 0, "commitOffset": 5}))
        assert commit.code == 0
        lock = s.request(req(RequestCode.LOCK_BATCH_MQ, None, lock_body("lg", "cid", [("T", "broker-a", 0)])))
        assert (lock.code, json.loads(lock.body)["lockOKMQSet"]) == \
            (0, [{"brokerName": "broker-a", "queueId": 0, "topic": "T"}])
    assert replicated.slaves["broker-a"][0].store.commitlog.max_offset == 0


def test_restarts_of_master_and_slave_go_on_where_they_were(replicated: EmbeddedCluster) -> None:
    master, slave = replicated.brokers["broker-a"], replicated.slaves["broker-a"][0]
    with Wire(master.addr) as w:
        for i in range(10):
            assert send_msg(w, "T", b"a%d" % i).code == 0
    wait_until(lambda: _holds(slave.addr, "T", 0, 10), 10, "the first copy")
    slave.stop()
    with Wire(master.addr) as w:
        for i in range(10):
            assert send_msg(w, "T", b"b%d" % i).code == 0
    slave.start()                                   # catches up from where its log ended
    wait_until(lambda: _holds(slave.addr, "T", 0, 20), 10, "the slave to catch up after its restart")
    master.stop()
    with Wire(slave.addr) as s:                     # the master away: the slave serves what it has
        assert [m.body for m in messages(pull(s, "g", "T", 0, 18))] == [b"b8", b"b9"]
    master.start()
    with Wire(master.addr) as w:
        assert send_msg(w, "T", b"c0").code == 0
    wait_until(lambda: _holds(slave.addr, "T", 0, 21), 10, "the slave to copy from the restarted master")
    assert slave.store.commitlog.max_offset == master.store.commitlog.max_offset
    with Wire(slave.addr) as s:
        assert max_offset(s, "T", 0) == 21


def test_slaves_with_acl_or_negative_counts_are_refused(tmp_path: Path) -> None:
    from rocketmq_spark.errors import ConfigError

    with pytest.raises(ConfigError, match="slaves must be at least 0"):
        EmbeddedCluster(tmp_path, slaves=-1)
    with pytest.raises(ConfigError, match="ACL or TLS"):
        EmbeddedCluster(tmp_path, slaves=1, acl_file=str(tmp_path / "plain_acl.yml"))


def test_acting_master_routes_the_slave_as_broker_id_0_read_only_while_the_master_is_away(tmp_path: Path) -> None:
    """5.x slaveActingMaster (what a 5.5.0 NameServer with supportActingMaster and brokers with
    enableSlaveActingMaster answered, scripts/apache-cluster --namesrv-config): while broker-a
    has no master, its slave's address is routed as brokerId 0 and its queues lose PERM_WRITE;
    cluster info keeps the slave under brokerId 1; the master back, the route is as before."""
    from rocketmq_spark.remoting.route import decode_route

    with EmbeddedCluster(tmp_path / "data", namesrv_port=0, brokers=2, slaves=1, topics={"T": 2},
                         sync_interval=0.2, acting_master=True) as c:
        master, slave = c.brokers["broker-a"], _slave(c)

        def route() -> dict:
            with Wire(c.namesrv_addr) as ns:
                return json.loads(ns.request(req(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})).body)

        def broker_a(r: dict) -> tuple[dict, int]:
            return (next(b["brokerAddrs"] for b in r["brokerDatas"] if b["brokerName"] == "broker-a"),
                    next(q["perm"] for q in r["queueDatas"] if q["brokerName"] == "broker-a"))

        before = route()
        assert broker_a(before) == ({"0": master.addr, "1": slave}, 6)
        assert all(b["enableActingMaster"] is True for b in before["brokerDatas"])
        master.stop()
        during = route()
        assert broker_a(during) == ({"0": slave}, 4)
        with Wire(c.namesrv_addr) as ns:
            assert f'1:"{slave}"' in ns.request(req(RequestCode.GET_BROKER_CLUSTER_INFO)).body.decode()
        decoded = decode_route(json.dumps(during).encode())
        assert decoded.acting("broker-a") and not decoded.acting("broker-b")
        # producers pass broker-a over; a sharding key keeps its queue there (and waits)
        assert {q.broker_name for q in decoded.publish_queues("T")} == {"broker-b"}
        assert [q.broker_name for q in decoded.publish_queues("T", without_master=True)] == \
            ["broker-a", "broker-a", "broker-b", "broker-b"]
        master.start()
        assert broker_a(route()) == ({"0": master.addr, "1": slave}, 6)


def test_without_acting_master_the_route_lists_the_slave_alone_and_writable(replicated: EmbeddedCluster) -> None:
    replicated.brokers["broker-a"].stop()
    with Wire(replicated.namesrv_addr) as ns:
        route = json.loads(ns.request(req(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})).body)
    assert next(b for b in route["brokerDatas"] if b["brokerName"] == "broker-a") == \
        {"brokerAddrs": {"1": _slave(replicated)}, "brokerName": "broker-a", "cluster": "DefaultCluster"}
    assert {q["brokerName"]: q["perm"] for q in route["queueDatas"]}["broker-a"] == 6
