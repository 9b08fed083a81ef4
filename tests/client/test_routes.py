"""Route cache and NameServer failover, on real sockets with an injected clock."""

from __future__ import annotations

import socket

import pytest

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.errors import BrokerError, TransportError
from rocketmq_spark.remoting.codes import RequestCode
from rocketmq_spark.remoting.command import RemotingCommand
from tests.client.fake_server import FakeConn, FakeServer, answer, cluster_info_for, route_for


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def namesrv(body_for=None):  # type: ignore[no-untyped-def]
    def handle(conn: FakeConn, cmd: RemotingCommand) -> None:
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            topic = cmd.ext["topic"]
            body = body_for(topic) if body_for else route_for(topic, {"broker-a": "127.0.0.1:10911"})
            if body is None:
                conn.send(answer(cmd, 17, remark=f"no route for {topic}"))
            else:
                conn.send(answer(cmd, body=body))
        elif cmd.code == RequestCode.GET_BROKER_CLUSTER_INFO:
            conn.send(answer(cmd, body=cluster_info_for({"broker-a": "127.0.0.1:10911"})))
    return FakeServer(handle)


def dead_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def route_requests(server: FakeServer) -> int:
    return len(server.requests_with(RequestCode.GET_ROUTEINFO_BY_TOPIC))


def test_fails_over_from_a_dead_name_server_and_sticks_to_the_live_one() -> None:
    silent = FakeServer()   # accepts and never answers
    with namesrv() as good, silent:
        client = MQClient(ClientConfig((dead_address(), silent.address, good.address), request_timeout=0.3))
        try:
            assert client.subscribe_queues("T")[0].broker_name == "broker-a"
            assert len(silent.requests) == 1 and route_requests(good) == 1
            client.route("T2")   # starts with the NameServer that answered last
            assert len(silent.requests) == 1 and route_requests(good) == 2
        finally:
            client.close()


def test_every_name_server_down_is_a_transport_error_naming_them() -> None:
    a, b = dead_address(), dead_address()
    client = MQClient(ClientConfig((a, b), request_timeout=0.5))
    try:
        with pytest.raises(TransportError) as info:
            client.route("T")
        assert a in str(info.value) and b in str(info.value)
    finally:
        client.close()


def test_topic_not_exist_is_authoritative_no_failover() -> None:
    with namesrv(lambda t: None) as first, namesrv() as second:
        client = MQClient(ClientConfig((first.address, second.address)))
        try:
            with pytest.raises(BrokerError) as info:
                client.route("missing")
            assert info.value.code == 17 and info.value.address == first.address
            assert info.value.request_code == RequestCode.GET_ROUTEINFO_BY_TOPIC
            assert second.requests == []
        finally:
            client.close()


def test_route_is_cached_for_the_ttl_then_refetched() -> None:
    clock = Clock()
    with namesrv() as ns:
        client = MQClient(ClientConfig((ns.address,), route_ttl=30.0), clock=clock)
        try:
            client.route("T")
            clock.now += 29.9
            client.publish_queues("T")
            client.master_addr("T", "broker-a")
            assert route_requests(ns) == 1
            clock.now += 0.2
            client.route("T")
            assert route_requests(ns) == 2
            client.route("T", refresh=True)
            assert route_requests(ns) == 3
        finally:
            client.close()


def test_stale_route_is_used_while_no_name_server_answers() -> None:
    clock = Clock()
    ns = namesrv()
    client = MQClient(ClientConfig((ns.address,), route_ttl=1.0, request_timeout=0.5), clock=clock)
    try:
        first = client.route("T")
        ns.close()
        clock.now += 10
        assert client.route("T") == first
        with pytest.raises(TransportError):
            client.route("never-fetched")
    finally:
        client.close()


def test_legacy_route_with_bare_integer_keys_and_old_flag_spelling() -> None:
    legacy = (b'{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"},'
              b'"brokerName":"b1","cluster":"C"}],"filterServerTable":{},"queueDatas":'
              b'[{"brokerName":"b1","perm":6,"readQueueNums":2,"topicSynFlag":0,"writeQueueNums":3}]}')
    with namesrv(lambda t: legacy) as ns:
        client = MQClient(ClientConfig((ns.address,)))
        try:
            route = client.route("T")
            assert dict(route.broker_datas[0].broker_addrs) == {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}
            assert [q.queue_id for q in client.subscribe_queues("T")] == [0, 1]
            assert [q.queue_id for q in client.publish_queues("T")] == [0, 1, 2]
            assert client.master_addr("T", "b1") == "10.0.0.1:10911"
        finally:
            client.close()


def test_empty_route_body_means_no_route() -> None:
    with namesrv(lambda t: b"") as ns:
        client = MQClient(ClientConfig((ns.address,)))
        try:
            with pytest.raises(BrokerError) as info:
                client.route("T")
            assert info.value.code == 17 and "empty route" in info.value.remark
        finally:
            client.close()


def test_master_of_a_broker_missing_from_the_route_refreshes_then_fails() -> None:
    with namesrv() as ns:
        client = MQClient(ClientConfig((ns.address,)))
        try:
            with pytest.raises(BrokerError) as info:
                client.master_addr("T", "broker-z")
            assert info.value.code == 14 and "broker-z" in info.value.remark
            assert route_requests(ns) == 2   # the cached route, then a refresh
            assert len(ns.requests_with(RequestCode.GET_BROKER_CLUSTER_INFO)) == 1
        finally:
            client.close()


def test_empty_topic_is_rejected() -> None:
    client = MQClient(ClientConfig(("127.0.0.1:1",)))
    try:
        with pytest.raises(ValueError, match="topic is empty"):
            client.route("")
    finally:
        client.close()
