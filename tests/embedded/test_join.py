"""``rocketmq-spark broker --join``: a master and its slave as processes of their own,
registered with a running NameServer (REGISTER_BROKER); the master killed with SIGKILL
leaves the route at once and the slave serves on; restarted on its directory it has its
data and address again and the slave copies on from where it was."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.remoting.codes import RequestCode, ResponseCode
from tests.embedded.wire import Wire, max_offset, messages, pull, req, send_msg
from tests.joined import JoinedBroker
from tests.waiting import wait_until


def _addrs(namesrv: str, topic: str) -> dict[str, Any]:
    with Wire(namesrv) as ns:
        ans = ns.request(req(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic}))
    if ans.code != 0:
        return {}
    return {b["brokerName"]: b["brokerAddrs"] for b in json.loads(ans.body)["brokerDatas"]}


def _holds(addr: str, topic: str, n: int) -> bool:
    with Wire(addr) as w:
        return max_offset(w, topic, 0) >= n


def _knows(addr: str, topic: str) -> bool:
    with Wire(addr) as w:
        return pull(w, "g", topic, 0, 0, max_nums=1).code != ResponseCode.TOPIC_NOT_EXIST


def test_a_master_and_its_slave_of_their_own_through_a_kill_and_restart(tmp_path: Path) -> None:
    with EmbeddedCluster(tmp_path / "ns", brokers=0, namesrv_port=0) as ns:
        master = JoinedBroker(ns.namesrv_addr, "broker-a", 0, tmp_path / "a0", ("--topic", "J:1"))
        slave = JoinedBroker(ns.namesrv_addr, "broker-a", 1, tmp_path / "a1")   # finds its master by the route
        try:
            master.start()
            slave.start()
            wait_until(lambda: _addrs(ns.namesrv_addr, "J").get("broker-a") == {"0": master.addr, "1": slave.addr},
                       30, "the route to list master and slave")
            with Wire(master.addr) as w:
                for i in range(20):
                    assert send_msg(w, "J", b"j%d" % i).code == 0
            wait_until(lambda: _holds(slave.addr, "J", 20), 30, "the slave to copy 20 messages")
            wait_until(lambda: _knows(slave.addr, "J"), 30, "the slave to sync topic J")  # as tests/failover waits

            with Wire(master.addr) as w:    # registered before it is answered: routed even if the master dies now
                assert w.request(req(RequestCode.UPDATE_AND_CREATE_TOPIC, {
                    "topic": "K", "defaultTopic": "TBW102", "readQueueNums": 3, "writeQueueNums": 3, "perm": 6,
                    "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0, "order": "false"})).code == 0
            master.kill()
            wait_until(lambda: _addrs(ns.namesrv_addr, "J").get("broker-a") == {"1": slave.addr}, 30,
                       "the killed master to leave the route")
            with Wire(slave.addr) as s:
                assert [m.body for m in messages(pull(s, "g", "J", 0, 0))] == [b"j%d" % i for i in range(20)]
            with Wire(ns.namesrv_addr) as w:      # the queues of the master that is away stay routed
                route = json.loads(w.request(req(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "K"})).body)
            assert [(q["brokerName"], q["readQueueNums"]) for q in route["queueDatas"]] == [("broker-a", 3)]
            assert [b["brokerAddrs"] for b in route["brokerDatas"]] == [{"1": slave.addr}]

            first_addr = master.addr
            master.start()                                    # same directory: same data, same port
            assert master.addr == first_addr
            with Wire(master.addr) as w:
                assert max_offset(w, "J", 0) == 20
                assert send_msg(w, "J", b"after").code == 0
            wait_until(lambda: _holds(slave.addr, "J", 21), 30, "the slave to copy from the restarted master")
            with Wire(slave.addr) as s:
                assert [m.body for m in messages(pull(s, "g", "J", 0, 20))] == [b"after"]
            assert slave.stop() == 0 and master.stop() == 0
            assert _addrs(ns.namesrv_addr, "J") == {}         # unregistered on SIGTERM
        finally:
            for b in (slave, master):
                b.kill()
