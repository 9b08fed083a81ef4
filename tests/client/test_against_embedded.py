"""Every MQClient operation against a real cluster: the session's ``rocketmq`` fixture (the
embedded cluster, port 0, or the one at ``$ROCKETMQ_NAMESRV``). Each test's topic lives on
one master, so queue ids 0..3 and offsets from 0 are the test's own."""

from __future__ import annotations

import itertools
import socket
import threading
import time
import uuid
import zlib

import pytest

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.errors import BrokerError
from rocketmq_spark.remoting.bodies import ConsumerData, SubscriptionData
from rocketmq_spark.remoting.codes import RequestCode
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.structs import Message, PullStatus
from tests.client.fake_server import wait_for
from tests.cluster import ClusterHandle

_names = itertools.count()
_RUN = uuid.uuid4().hex[:6]


@pytest.fixture(scope="module")
def cluster(rocketmq: ClusterHandle) -> ClusterHandle:
    return rocketmq


@pytest.fixture
def client(cluster):
    c = MQClient(ClientConfig.parse(cluster.namesrv_addr, request_timeout=5.0))
    yield c
    c.close()


def fresh(prefix: str = "t") -> str:
    return f"client_{prefix}_{_RUN}_{next(_names)}"


@pytest.fixture
def master(client: MQClient) -> str:
    """The broker name every test topic is created on (the cluster's first master)."""
    return sorted(client.cluster_brokers())[0]


@pytest.fixture
def topic(client: MQClient, master: str) -> str:
    name = fresh()
    client.create_topic(name, queues=4, brokers=[master])
    wait_for(lambda: _has_route(client, name), 10, "route of the new topic")
    return name


def _has_route(client: MQClient, topic: str) -> bool:
    try:
        return len(client.subscribe_queues(topic, refresh=True)) == 4
    except BrokerError:
        return False


def wait_max(client: MQClient, mq: MessageQueue, at_least: int) -> None:
    wait_for(lambda: client.max_offset(mq) >= at_least, 10, f"max offset {at_least} of {mq}")


def test_admin_view_of_the_cluster(client: MQClient, topic: str, master: str) -> None:
    brokers = client.cluster_brokers()
    assert master in brokers and all(addr for addr in brokers.values())
    assert client.master_addr(topic, master) == brokers[master]
    assert topic in client.topic_list()
    assert client.publish_queues(topic) == [MessageQueue(topic, master, i) for i in range(4)]


def test_send_and_pull_one_message(client: MQClient, topic: str) -> None:
    mq = client.publish_queues(topic)[1]
    res = client.send(Message(topic, b"hello", tags="TagA", keys="k1", properties={"color": "red"}), queue=mq)
    assert res.status == "SEND_OK" and res.queue == mq and res.queue_offset == 0
    wait_max(client, mq, 1)
    pulled = client.pull(mq, 0, group=fresh("g"))
    assert pulled.status is PullStatus.FOUND and pulled.next_begin_offset == 1
    (m,) = pulled.messages
    assert (m.body, m.tags, m.keys, m.properties["color"], m.msg_id) == (b"hello", "TagA", "k1", "red", res.msg_id)
    assert m.offset_msg_id == res.offset_msg_id and m.queue_offset == 0
    assert client.view_message(res.offset_msg_id).body == b"hello"
    again = client.pull(mq, 1, group=fresh("g"))
    assert again.status is PullStatus.NO_NEW_MSG and again.max_offset == 1


def test_batch_round_robin_oneway_and_compressed(client: MQClient, topic: str) -> None:
    mq = client.publish_queues(topic)[2]
    batch = client.send_batch([Message(topic, f"b{i}".encode(), tags="TB") for i in range(3)], queue=mq)
    assert batch.queue_offset == 0 and len(batch.msg_id.split(",")) == 3
    big = bytes(range(256)) * 40
    client.send(Message(topic, big), queue=mq)
    client.send_oneway(Message(topic, b"oneway"), queue=mq)
    wait_max(client, mq, 5)
    msgs = client.pull(mq, 0, group=fresh("g")).messages
    assert [m.payload() for m in msgs] == [b"b0", b"b1", b"b2", big, b"oneway"]
    assert msgs[3].sys_flag & 1 and zlib.decompress(msgs[3].body) == big
    queues = {client.send(Message(topic, b"rr")).queue for _ in range(8)}
    assert len(queues) == 4


def test_tag_filter_and_long_poll(client: MQClient, topic: str) -> None:
    mq = client.publish_queues(topic)[0]
    for tag in ("TagA", "TagB", "TagC"):
        client.send(Message(topic, tag.encode(), tags=tag), queue=mq)
    wait_max(client, mq, 3)
    res = client.pull(mq, 0, group=fresh("g"), expression="TagA || TagC")
    assert [m.tags for m in res.messages] == ["TagA", "TagC"]
    group = fresh("g")
    out: list = []
    th = threading.Thread(target=lambda: out.append(client.pull(mq, 3, group=group, suspend_ms=10000)))
    start = time.monotonic()
    th.start()
    addr = client.master_addr(topic, mq.broker_name)
    wait_for(lambda: client.transport.pending_calls(addr) == 1, 5, "pull in flight")
    client.send(Message(topic, b"wake"), queue=mq)
    th.join(15)
    assert out and out[0].status is PullStatus.FOUND and out[0].messages[0].body == b"wake"
    assert time.monotonic() - start < 9


def test_offsets_and_search(client: MQClient, topic: str) -> None:
    mq = client.publish_queues(topic)[3]
    for i in range(3):
        client.send(Message(topic, f"m{i}".encode()), queue=mq)
    wait_max(client, mq, 3)
    group = fresh("g")
    assert client.min_offset(mq) == 0 and client.max_offset(mq) == 3
    first = client.earliest_store_time(mq)
    msgs = client.pull(mq, 0, group=group).messages
    assert first == msgs[0].store_timestamp
    # nearest store time, the earliest offset among equals (sends may share a millisecond)
    t2 = msgs[2].store_timestamp
    assert client.search_offset(mq, t2) == min(i for i, m in enumerate(msgs) if m.store_timestamp == t2)
    assert client.search_offset(mq, first - 60_000) == 0
    assert client.query_consumer_offset(group, mq) in (None, 0)
    client.update_consumer_offset(group, mq, 2)
    assert client.query_consumer_offset(group, mq) == 2
    client.pull(mq, 2, group=group, commit_offset=3)
    assert client.query_consumer_offset(group, mq) == 3
    client.update_consumer_offset(group, mq, 1, oneway=True)
    wait_for(lambda: client.query_consumer_offset(group, mq) == 1, 5, "oneway commit")
    stats = client.consume_stats(group, topic)
    assert stats.offset_table[mq].consumer_offset == 1 and stats.offset_table[mq].broker_offset == 3


def test_locks(client: MQClient, topic: str) -> None:
    group = fresh("g")
    queues = client.subscribe_queues(topic)
    assert client.lock_batch(group, "A", queues) == frozenset(queues)
    assert client.lock_batch(group, "B", queues) == frozenset()
    client.unlock_batch(group, "A", queues[:2])
    assert client.lock_batch(group, "B", queues) == frozenset(queues[:2])


def test_heartbeat_consumer_list_notify_and_unregister(cluster, topic: str) -> None:
    group = fresh("g")
    a = MQClient(ClientConfig.parse(cluster.namesrv_addr, client_id="127.0.0.1@A"))
    b = MQClient(ClientConfig.parse(cluster.namesrv_addr, client_id="127.0.0.1@B"))
    notified = threading.Event()
    a.set_request_handler(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED,
                          lambda addr, cmd: notified.set() if cmd.ext.get("consumerGroup") == group else None)
    try:
        consumer = ConsumerData(group, subscriptions=(SubscriptionData(topic),))
        a.heartbeat(consumers=[consumer])
        assert a.consumer_list(group, topic) == ("127.0.0.1@A",)
        notified.clear()
        b.heartbeat(consumers=[consumer])
        assert sorted(a.consumer_list(group, topic)) == ["127.0.0.1@A", "127.0.0.1@B"]
        assert notified.wait(5)
        b.unregister(consumer_group=group)
        assert a.consumer_list(group, topic) == ("127.0.0.1@A",)
    finally:
        a.close()
        b.close()


def test_send_back_reaches_the_retry_topic(client: MQClient, topic: str) -> None:
    mq = client.publish_queues(topic)[0]
    group = fresh("g")
    res = client.send(Message(topic, b"retry me", tags="TR"), queue=mq)
    wait_max(client, mq, res.queue_offset + 1)
    (m,) = client.pull(mq, res.queue_offset, group=group, max_nums=1).messages
    client.send_back(m, group=group, delay_level=1, broker_name=mq.broker_name)
    retry = f"%RETRY%{group}"
    wait_for(lambda: _retry_has_message(client, retry), 15, "message in the retry topic")
    (rq,) = client.subscribe_queues(retry)
    (copy,) = client.pull(rq, 0, group=group).messages
    assert copy.body == b"retry me" and copy.reconsume_times == 1
    assert copy.properties["RETRY_TOPIC"] == topic and copy.msg_id == res.msg_id


def _retry_has_message(client: MQClient, retry: str) -> bool:
    try:
        return any(client.max_offset(q) > 0 for q in client.subscribe_queues(retry, refresh=True))
    except BrokerError:
        return False


def test_route_failover_with_a_dead_first_name_server(cluster, topic: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    c = MQClient(ClientConfig.parse(f"{dead};{cluster.namesrv_addr}", request_timeout=2.0))
    try:
        assert len(c.subscribe_queues(topic)) == 4
        assert c.send(Message(topic, b"via failover")).status == "SEND_OK"
    finally:
        c.close()


def test_unknown_topic_errors(client: MQClient) -> None:
    with pytest.raises(BrokerError) as info:
        client.route(fresh("missing"))
    assert info.value.code == 17


def test_topic_stats_runtime_info_and_raw_invoke(client: MQClient, topic: str) -> None:
    mq = client.publish_queues(topic)[1]
    client.send(Message(topic, b"s"), queue=mq)
    wait_max(client, mq, 1)
    stats = client.topic_stats(topic)
    assert set(stats) == set(client.subscribe_queues(topic))
    assert (stats[mq].min_offset, stats[mq].max_offset) == (0, 1)
    addr = client.master_addr(topic, mq.broker_name)
    assert isinstance(client.broker_runtime_info(addr), dict)
    configs = client.invoke(addr, RequestCode.GET_ALL_TOPIC_CONFIG)
    assert topic.encode() in configs.body
    with pytest.raises(BrokerError) as info:
        client.invoke(addr, 9999)
    assert info.value.code == 3 and info.value.address == addr


def test_every_master_locks_stats_and_heartbeat_per_master(cluster) -> None:
    c = MQClient(ClientConfig.parse(cluster.namesrv_addr, request_timeout=5.0))
    try:
        topic, group = fresh(), fresh("g")
        masters = c.cluster_brokers()
        c.create_topic(topic, queues=2)
        wait_for(lambda: len(_queues(c, topic)) == 2 * len(masters), 10, "route over every master")
        queues = c.subscribe_queues(topic)
        assert {q.broker_name for q in queues} == set(masters)
        assert c.lock_batch(group, "A", queues) == frozenset(queues)
        assert c.lock_batch(group, "B", queues) == frozenset()
        c.unlock_batch(group, "A", queues)
        assert c.lock_batch(group, "B", queues) == frozenset(queues)
        for q in queues:
            c.update_consumer_offset(group, q, 0)
        sent = [c.send(Message(topic, b"x")) for _ in range(2 * len(queues))]
        assert {r.queue for r in sent} == set(queues)
        for q in queues:
            wait_max(c, q, 2)
        stats = c.consume_stats(group, topic)
        assert set(stats.offset_table) == set(queues)
        assert all(w.broker_offset == 2 and w.consumer_offset == 0 for w in stats.offset_table.values())
        c.heartbeat(consumers=[ConsumerData(group, subscriptions=(SubscriptionData(topic),))])
        assert c.consumer_list(group, topic) == (c.config.client_id,)
        for addr in masters.values():   # the heartbeat reached every master
            body = c.invoke(addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group}).body
            assert c.config.client_id.encode() in body
    finally:
        c.close()


def _queues(c: MQClient, topic: str) -> list[MessageQueue]:
    try:
        return c.subscribe_queues(topic, refresh=True)
    except BrokerError:
        return []


def test_query_message_by_key_and_unique_key(client: MQClient, topic: str, master: str) -> None:
    """QUERY_MESSAGE, as mqadmin queryMsgByKey / queryMsgByUniqueKey ask it: every key of
    KEYS (split on spaces) and UNIQ_KEY find the record; maxNum keeps the newest, the
    answer lists them oldest first (a live 5.5.0); a key nobody sent is an empty answer (QUERY_NOT_FOUND)."""
    mq = client.publish_queues(topic)[0]
    sent = [client.send(Message(topic, f"m{i}".encode(), keys=keys), queue=mq)
            for i, keys in enumerate(["order-1", "order-1 user-7", "user-7", "order-10", "order-1"])]
    wait_max(client, mq, 5)
    # the broker indexes on another thread (Apache): wait until the last one is found
    wait_for(lambda: len(client.query_message(topic, "order-1")[master]) == 3, 10, "3 records under order-1")
    found = client.query_message(topic, "order-1")[master]
    assert [m.body for m in found if "order-1" in m.keys.split(" ")] == [b"m0", b"m1", b"m4"]
    assert {m.queue_offset for m in client.query_message(topic, "user-7")[master]} == {1, 2}
    assert [m.body for m in client.query_message(topic, "order-1", max_num=2)[master]] == [b"m1", b"m4"]
    (one,) = client.query_message(topic, sent[3].msg_id, unique=True)[master]
    assert (one.body, one.msg_id, one.queue_offset) == (b"m3", sent[3].msg_id, 3)
    assert client.query_message(topic, "order-2")[master] == []
    # Apache files times in whole seconds past its index file's start: far past is empty
    assert client.query_message(topic, "order-1", begin_ms=found[-1].store_timestamp + 5000)[master] == []
