"""MQClient operations against a scripted cluster (fake NameServer + brokers, real sockets)."""

from __future__ import annotations

import json
import re
import threading
import zlib
from concurrent.futures import ThreadPoolExecutor

import pytest

from rocketmq_spark.client.pull import pull_timeout
from rocketmq_spark.errors import BrokerError, ConfigError, RequestTimeout, TransportError
from rocketmq_spark.remoting.compression import Compression
from rocketmq_spark.remoting.bodies import (
    ConsumerData, ConsumeStats, LockBatchBody, OffsetWrapper, SubscriptionData, encode_lock_ok)
from rocketmq_spark.remoting.codes import FLAG_ONEWAY, RequestCode
from rocketmq_spark.remoting.command import RemotingCommand, encode
from rocketmq_spark.remoting.headers import SendMessageRequestHeader
from rocketmq_spark.remoting.message import (
    HostPort, MessageExt, decode_batch, decode_properties, encode_message)
from rocketmq_spark.remoting.route import BrokerData, MessageQueue, QueueData, TopicRouteData, encode_route
from rocketmq_spark.structs import Message, PullStatus
from tests.client.fake_server import FakeConn, answer, route_for
from tests.client.world import World

HEX32 = re.compile(r"^[0-9A-F]{32}$")


@pytest.fixture
def world():
    with World() as w:
        yield w


@pytest.fixture
def two():
    with World(brokers=("broker-a", "broker-b"), queues=2) as w:
        yield w


def sends(w: World, name: str) -> list[RemotingCommand]:
    return [r for r in w.brokers[name].requests
            if r.code in (RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE)]


# ---------------------------------------------------------------- send

def test_send_header_properties_and_result(world: World) -> None:
    c = world.client()
    mq = MessageQueue("T", "broker-a", 2)
    res = c.send(Message("T", b"hello", tags="TagA", keys="k1 k2", properties={"color": "red"},
                         flag=7, delay_level=3), queue=mq, producer_group="pg")
    (sent,) = sends(world, "broker-a")
    raw = encode(sent)
    assert b'"language":"PYTHON"' in raw and b'"version":413' in raw
    assert all(isinstance(v, str) for v in sent.ext.values())
    h = SendMessageRequestHeader.from_v2(sent.ext)
    assert (h.producer_group, h.topic, h.default_topic, h.default_topic_queue_nums, h.queue_id) == \
        ("pg", "T", "TBW102", 4, 2)
    assert (h.sys_flag, h.flag, h.batch, h.reconsume_times) == (0, 7, False, 0)
    props = decode_properties(h.properties or "")
    assert props == {"color": "red", "KEYS": "k1 k2", "TAGS": "TagA", "DELAY": "3",
                     "UNIQ_KEY": res.msg_id, "WAIT": "true"}
    assert HEX32.match(res.msg_id)
    assert sent.body == b"hello"
    assert res.status == "SEND_OK" and res.queue == mq and res.queue_offset == 0
    assert res.offset_msg_id.endswith("00000000000003E8")


def test_compression_threshold_is_a_parameter(world: World) -> None:
    default = world.client()
    default.send(Message("T", b"x" * 4095), queue=MessageQueue("T", "broker-a", 0))
    default.send(Message("T", b"y" * 4096), queue=MessageQueue("T", "broker-a", 0))
    small = world.client(compression=Compression("zlib", 10))
    small.send(Message("T", b"z" * 9), queue=MessageQueue("T", "broker-a", 0))
    small.send(Message("T", b"w" * 10), queue=MessageQueue("T", "broker-a", 0))
    got = [(s.ext["f"], s.body) for s in sends(world, "broker-a")]
    assert got[0] == ("0", b"x" * 4095)
    assert got[1][0] == "1" and zlib.decompress(got[1][1]) == b"y" * 4096
    assert got[2] == ("0", b"z" * 9)
    assert got[3][0] == "1" and zlib.decompress(got[3][1]) == b"w" * 10


def test_uniq_keys_are_distinct_and_a_given_one_is_kept(world: World) -> None:
    c = world.client()
    mq = MessageQueue("T", "broker-a", 0)
    ids = {c.send(Message("T", b"m"), queue=mq).msg_id for _ in range(50)}
    assert len(ids) == 50 and all(HEX32.match(i) for i in ids)
    assert len({i[:20] for i in ids}) == 1          # fixed ip/pid/random prefix
    given = c.send(Message("T", b"m", properties={"UNIQ_KEY": "ABC"}), queue=mq)
    assert given.msg_id == "ABC"
    assert decode_properties(sends(world, "broker-a")[-1].ext["i"])["UNIQ_KEY"] == "ABC"


def test_round_robin_over_publish_queues_of_every_broker(two: World) -> None:
    c = two.client()
    got = [c.send(Message("T", b"m")).queue for _ in range(8)]
    expected = sorted(MessageQueue("T", b, q) for b in ("broker-a", "broker-b") for q in range(2))
    assert sorted(got[:4]) == expected and got[4:] == got[:4]
    assert len(sends(two, "broker-a")) == 4 and len(sends(two, "broker-b")) == 4


def test_retriable_error_retries_on_another_broker(two: World) -> None:
    two.handlers[RequestCode.SEND_MESSAGE_V2] = lambda name, conn, cmd: (
        answer(cmd, 2, remark="[TIMEOUT_CLEAN_QUEUE]broker busy") if name == "broker-a"
        else two.send_ok(name, cmd))
    c = two.client()
    results = [c.send(Message("T", b"m")) for _ in range(4)]
    assert all(r.queue.broker_name == "broker-b" for r in results)
    # the UNIQ_KEY stays the same across the retry of one message
    a_keys = [decode_properties(s.ext["i"])["UNIQ_KEY"] for s in sends(two, "broker-a")]
    assert a_keys and set(a_keys) <= {r.msg_id for r in results}


def test_non_retriable_error_and_timeouts_are_not_retried(two: World) -> None:
    two.handlers[RequestCode.SEND_MESSAGE_V2] = lambda name, conn, cmd: answer(cmd, 13, remark="too big")
    c = two.client(request_timeout=0.3)
    with pytest.raises(BrokerError) as info:
        c.send(Message("T", b"m"))
    assert info.value.code == 13 and not info.value.retriable
    assert len(sends(two, "broker-a")) + len(sends(two, "broker-b")) == 1
    two.handlers[RequestCode.SEND_MESSAGE_V2] = lambda name, conn, cmd: None   # never answers
    with pytest.raises(RequestTimeout):
        c.send(Message("T", b"m"))
    assert len(sends(two, "broker-a")) + len(sends(two, "broker-b")) == 2


def test_retries_give_up_with_the_last_error(two: World) -> None:
    two.handlers[RequestCode.SEND_MESSAGE_V2] = lambda name, conn, cmd: answer(cmd, 1, remark="store error")
    c = two.client(send_retries=2)
    with pytest.raises(BrokerError) as info:
        c.send(Message("T", b"m"))
    assert info.value.code == 1 and "store error" in str(info.value)
    assert len(sends(two, "broker-a")) + len(sends(two, "broker-b")) == 3


def test_busy_everywhere_moves_on_then_waits_on_the_last_broker(two: World) -> None:
    """Busy is retriable as Java's producer has it: the next attempt goes to another broker;
    the last attempt is sent again while busy, up to the busy timeout, then the busy answer
    is raised."""
    two.handlers[RequestCode.SEND_MESSAGE_V2] = lambda name, conn, cmd: answer(cmd, 2, remark="busy")
    c = two.client(send_retries=1, busy_timeout=0.3)
    with pytest.raises(BrokerError) as info:
        c.send(Message("T", b"m"))
    assert info.value.code == 2
    a, b = len(sends(two, "broker-a")), len(sends(two, "broker-b"))
    assert min(a, b) == 1 and max(a, b) >= 3       # one each, then the last broker again


def test_busy_last_broker_that_frees_up_takes_the_message(two: World) -> None:
    answers = {"n": 0}

    def busy_thrice(name: str, conn: object, cmd: RemotingCommand) -> RemotingCommand:
        answers["n"] += 1
        if answers["n"] <= 3:
            return answer(cmd, 2, remark="[TIMEOUT_CLEAN_QUEUE]broker busy")
        return two.send_ok(name, cmd)
    two.handlers[RequestCode.SEND_MESSAGE_V2] = busy_thrice
    c = two.client(send_retries=1)
    assert c.send(Message("T", b"m")).queue.topic == "T"
    assert len(sends(two, "broker-a")) + len(sends(two, "broker-b")) == 4


def test_topic_without_route_is_sent_through_tbw102(world: World) -> None:
    world.unknown.add("NEW")
    world.routes["TBW102"] = route_for("TBW102", world.addrs, queues=8, perm=7)
    c = world.client()
    res = [c.send(Message("NEW", b"m")) for _ in range(6)]
    assert {r.queue.queue_id for r in res} == {0, 1, 2, 3}     # min(4, 8) queues
    assert all(s.ext["c"] == "TBW102" and s.ext["d"] == "4" for s in sends(world, "broker-a"))


def test_unknown_topic_without_tbw102_is_topic_not_exist(world: World) -> None:
    world.unknown |= {"NEW", "TBW102"}
    with pytest.raises(BrokerError) as info:
        world.client().send(Message("NEW", b"m"))
    assert info.value.code == 17


def test_batch_request_and_result(world: World) -> None:
    c = world.client()
    msgs = [Message("T", f"b{i}".encode(), tags="TB", keys=f"k{i}", properties={"i": str(i)}) for i in range(3)]
    res = c.send_batch(msgs, queue=MessageQueue("T", "broker-a", 1))
    (sent,) = sends(world, "broker-a")
    assert sent.code == RequestCode.SEND_BATCH_MESSAGE
    assert sent.ext["m"] == "true" and sent.ext["e"] == "1" and sent.ext["f"] == "0"
    assert decode_properties(sent.ext["i"]) == {"WAIT": "true"}
    items = decode_batch(sent.body)
    assert [i.body for i in items] == [b"b0", b"b1", b"b2"]
    keys = [i.properties["UNIQ_KEY"] for i in items]
    assert res.msg_id == ",".join(keys) and len(set(keys)) == 3
    assert [(i.properties["TAGS"], i.properties["KEYS"], i.properties["i"]) for i in items] == \
        [("TB", f"k{n}", str(n)) for n in range(3)]


@pytest.mark.parametrize("msgs, error", [
    ([], "at least one"),
    ([Message("A", b"1"), Message("B", b"2")], "one topic"),
    ([Message("A", b"1", delay_level=2)], "delay_level"),
    ([Message("%RETRY%g", b"1")], "retry topic"),
])
def test_bad_batches_are_refused_before_any_io(world: World, msgs: list, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        world.client().send_batch(msgs)
    assert world.ns.requests == []


@pytest.mark.parametrize("message, error", [
    (Message("", b"x"), "topic"),
    (Message("T", b"x", delay_level=-1), "delay_level"),
    (Message("T", b"x", properties={"a\x01b": "1"}), "property name"),
    (Message("T", b"x", tags="t\x02"), "tags"),
])
def test_bad_messages_are_refused_naming_the_value(world: World, message: Message, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        world.client().send(message)


def test_send_oneway(world: World) -> None:
    world.client().send_oneway(Message("T", b"fire"), queue=MessageQueue("T", "broker-a", 3))
    (sent,) = world.brokers["broker-a"].wait_requests(1)
    assert sent.flag & FLAG_ONEWAY and sent.ext["e"] == "3" and sent.body == b"fire"


def test_retry_topic_send_moves_reconsume_properties_into_the_header(world: World) -> None:
    world.client().send(Message("%RETRY%g", b"x", properties={"RECONSUME_TIME": "2", "MAX_RECONSUME_TIMES": "5"}),
                        queue=MessageQueue("%RETRY%g", "broker-a", 0))
    (sent,) = sends(world, "broker-a")
    assert (sent.ext["j"], sent.ext["l"]) == ("2", "5")
    assert "RECONSUME_TIME" not in decode_properties(sent.ext["i"])


# ---------------------------------------------------------------- pull

def _stored(tags: list[str | None], topic: str = "T") -> bytes:
    return b"".join(encode_message(MessageExt(topic=topic, body=f"m{i}".encode(), queue_offset=i,
                                              commit_log_offset=100 * i,
                                              properties={"TAGS": t} if t else {}))
                    for i, t in enumerate(tags))


def _pull_answer(cmd: RemotingCommand, body: bytes, code: int = 0, suggest: int = 0) -> RemotingCommand:
    return answer(cmd, code, body=body, ext={"suggestWhichBrokerId": str(suggest), "nextBeginOffset": "3",
                                             "minOffset": "0", "maxOffset": "3"})


def test_pull_flags_and_exact_tag_refilter(world: World) -> None:
    body = _stored(["TagA", "TagC", None])
    world.handlers[RequestCode.PULL_MESSAGE] = lambda n, conn, cmd: _pull_answer(cmd, body)
    c = world.client()
    mq = MessageQueue("T", "broker-a", 1)
    all_ = c.pull(mq, 0, group="g")
    only_a = c.pull(mq, 0, group="g", expression="TagA || TagB", commit_offset=5, suspend_ms=100, max_nums=8)
    assert [m.body for m in all_.messages] == [b"m0", b"m1", b"m2"]
    assert [m.tags for m in only_a.messages] == ["TagA"]
    assert only_a.status is PullStatus.FOUND and only_a.next_begin_offset == 3
    s1, s2 = world.brokers["broker-a"].requests_with(RequestCode.PULL_MESSAGE)
    assert (s1.ext["sysFlag"], s1.ext["subscription"], s1.ext["suspendTimeoutMillis"], s1.ext["commitOffset"]) == \
        ("4", "*", "0", "0")
    assert (s2.ext["sysFlag"], s2.ext["subscription"], s2.ext["commitOffset"], s2.ext["maxMsgNums"]) == \
        ("7", "TagA || TagB", "5", "8")
    assert (s2.ext["queueId"], s2.ext["queueOffset"], s2.ext["expressionType"]) == ("1", "0", "TAG")


def test_long_poll_waits_past_the_request_timeout(world: World) -> None:
    def late(name: str, conn: FakeConn, cmd: RemotingCommand) -> None:
        def send() -> None:
            if not conn.closed.is_set():
                conn.send(_pull_answer(cmd, b"", code=19))
        threading.Timer(0.5, send).start()   # a broker holding the pull for 0.5 s

    world.handlers[RequestCode.PULL_MESSAGE] = late
    c = world.client(request_timeout=0.3)
    mq = MessageQueue("T", "broker-a", 0)
    assert c.pull(mq, 3, group="g", suspend_ms=200).status is PullStatus.NO_NEW_MSG
    with pytest.raises(RequestTimeout):
        c.pull(mq, 3, group="g")
    assert pull_timeout(15000, 3.0) == 23.0 and pull_timeout(0, 3.0) == 3.0


def test_pull_follows_the_suggested_broker_without_committing(world: World) -> None:
    slave = World()
    try:
        world.routes["T"] = encode_route(TopicRouteData(
            (QueueData("broker-a", 4, 4, 6),),
            (BrokerData("C", "broker-a", {0: world.addrs["broker-a"], 1: slave.addrs["broker-a"]}),)))
        world.handlers[RequestCode.PULL_MESSAGE] = lambda n, conn, cmd: _pull_answer(cmd, b"", 19, suggest=1)
        slave.handlers[RequestCode.PULL_MESSAGE] = lambda n, conn, cmd: _pull_answer(cmd, b"", 19, suggest=0)
        c = world.client()
        mq = MessageQueue("T", "broker-a", 0)
        for _ in range(3):
            c.pull(mq, 0, group="g", commit_offset=2)
        (on_slave,) = slave.brokers["broker-a"].requests_with(RequestCode.PULL_MESSAGE)
        assert on_slave.ext["sysFlag"] == "4"                   # no COMMIT_OFFSET on a slave
        master_pulls = world.brokers["broker-a"].requests_with(RequestCode.PULL_MESSAGE)
        assert [p.ext["sysFlag"] for p in master_pulls] == ["5", "5"]
    finally:
        slave.close()


@pytest.mark.parametrize("kwargs, error", [
    ({"offset": -1}, "offset"), ({"max_nums": 0}, "max_nums"), ({"suspend_ms": -5}, "suspend_ms"),
    ({"group": ""}, "group")])
def test_bad_pull_arguments(world: World, kwargs: dict, error: str) -> None:
    args = {"offset": 0, "group": "g"} | kwargs
    with pytest.raises(ValueError, match=error):
        world.client().pull(MessageQueue("T", "broker-a", 0), args.pop("offset"), **args)


# ---------------------------------------------------------------- offsets

def test_offsets_go_to_the_master_with_the_right_headers(two: World) -> None:
    two.handlers[RequestCode.GET_MAX_OFFSET] = lambda n, conn, cmd: answer(cmd, ext={"offset": "42"})
    two.handlers[RequestCode.GET_MIN_OFFSET] = lambda n, conn, cmd: answer(cmd, ext={"offset": "7"})
    two.handlers[RequestCode.SEARCH_OFFSET_BY_TIMESTAMP] = lambda n, conn, cmd: answer(
        cmd, ext={"offset": str(int(cmd.ext["timestamp"]) // 1000)})
    two.handlers[RequestCode.GET_EARLIEST_MSG_STORETIME] = lambda n, conn, cmd: answer(cmd, ext={"timestamp": "1234"})
    two.handlers[RequestCode.QUERY_CONSUMER_OFFSET] = lambda n, conn, cmd: (
        answer(cmd, 22, ext={}, remark="Not found") if cmd.ext["queueId"] == "0" else answer(cmd, ext={"offset": "9"}))
    c = two.client()
    mq = MessageQueue("T", "broker-b", 1)
    assert (c.max_offset(mq), c.min_offset(mq), c.search_offset(mq, 5000), c.earliest_store_time(mq)) == \
        (42, 7, 5, 1234)
    assert c.query_consumer_offset("g", mq) == 9
    assert c.query_consumer_offset("g", MessageQueue("T", "broker-b", 0)) is None
    c.update_consumer_offset("g", mq, 11)
    c.update_consumer_offset("g", mq, 12, oneway=True)
    reqs = two.brokers["broker-b"].wait_requests(8)
    assert two.brokers["broker-a"].requests == []
    updates = [r for r in reqs if r.code == RequestCode.UPDATE_CONSUMER_OFFSET]
    assert [(u.ext["commitOffset"], bool(u.flag & FLAG_ONEWAY)) for u in updates] == [("11", False), ("12", True)]
    assert all(r.ext["topic"] == "T" and r.ext["queueId"] in ("0", "1") for r in reqs)
    with pytest.raises(ValueError, match="offset"):
        c.update_consumer_offset("g", mq, -1)


def test_consume_stats_are_merged_over_brokers(two: World) -> None:
    def stats(name: str, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
        mq = MessageQueue("T", name, 0)
        return answer(cmd, body=ConsumeStats({mq: OffsetWrapper(10, 4, 99)}, 1.5).encode())

    two.handlers[RequestCode.GET_CONSUME_STATS] = stats
    c = two.client()
    merged = c.consume_stats("g")
    assert merged.consume_tps == 3.0
    assert merged.offset_table == {MessageQueue("T", b, 0): OffsetWrapper(10, 4, 99) for b in ("broker-a", "broker-b")}
    by_topic = c.consume_stats("g", "T")
    assert by_topic == merged
    sent = two.brokers["broker-a"].requests_with(RequestCode.GET_CONSUME_STATS)
    assert [s.ext.get("topic") for s in sent] == [None, "T"]


# ---------------------------------------------------------------- locks

def _lock_ok(name: str, conn: FakeConn, cmd: RemotingCommand) -> RemotingCommand:
    body = LockBatchBody.decode(cmd.body)
    return answer(cmd, body=encode_lock_ok(m for m in body.mqs if m.queue_id != 1))


def test_lock_and_unlock_are_grouped_per_broker(two: World) -> None:
    two.handlers[RequestCode.LOCK_BATCH_MQ] = _lock_ok
    c = two.client()
    queues = [MessageQueue("T", b, q) for b in ("broker-a", "broker-b") for q in range(2)]
    got = c.lock_batch("g", "cid", reversed(queues))
    assert got == frozenset(q for q in queues if q.queue_id == 0)
    for b in ("broker-a", "broker-b"):
        (sent,) = two.brokers[b].requests_with(RequestCode.LOCK_BATCH_MQ)
        body = LockBatchBody.decode(sent.body)
        assert (body.consumer_group, body.client_id) == ("g", "cid")
        assert list(body.mqs) == [q for q in queues if q.broker_name == b]
    c.unlock_batch("g", "cid", queues)
    for b in ("broker-a", "broker-b"):
        (sent,) = two.brokers[b].requests_with(RequestCode.UNLOCK_BATCH_MQ)
        assert {m.broker_name for m in LockBatchBody.decode(sent.body).mqs} == {b}


def test_lock_with_one_broker_down_returns_what_the_others_granted(two: World) -> None:
    two.handlers[RequestCode.LOCK_BATCH_MQ] = _lock_ok
    c = two.client(request_timeout=1.0)
    queues = [MessageQueue("T", b, 0) for b in ("broker-a", "broker-b")]
    c.route("T")
    two.brokers["broker-b"].close()
    assert c.lock_batch("g", "cid", queues) == frozenset({queues[0]})
    two.brokers["broker-a"].close()
    with pytest.raises(TransportError) as info:
        c.lock_batch("g", "cid", queues)
    assert two.addrs["broker-a"] in str(info.value)


# ---------------------------------------------------------------- membership, retry, admin

def test_heartbeat_and_unregister_reach_every_master(two: World) -> None:
    c = two.client(client_id="10.0.0.5@1#x")
    sub = SubscriptionData("T", "TagA || TagB")
    c.heartbeat(consumers=[ConsumerData("g", subscriptions=(sub,))], producer_groups=["pg"])
    for b in ("broker-a", "broker-b"):
        (hb,) = two.brokers[b].requests_with(RequestCode.HEART_BEAT)
        body = json.loads(hb.body)
        assert body["clientID"] == "10.0.0.5@1#x"
        assert body["producerDataSet"] == [{"groupName": "pg"}]
        assert body["consumerDataSet"][0]["subscriptionDataSet"][0]["tagsSet"] == ["TagA", "TagB"]
    c.unregister(consumer_group="g")
    for b in ("broker-a", "broker-b"):
        (un,) = two.brokers[b].requests_with(RequestCode.UNREGISTER_CLIENT)
        assert dict(un.ext) == {"clientID": "10.0.0.5@1#x", "consumerGroup": "g"}


def test_heartbeat_with_no_route_known_uses_the_cluster(world: World) -> None:
    world.client().heartbeat(producer_groups=["pg"])
    assert len(world.brokers["broker-a"].requests_with(RequestCode.HEART_BEAT)) == 1
    assert world.ns.requests_with(RequestCode.GET_BROKER_CLUSTER_INFO)


def test_consumer_list(world: World) -> None:
    world.handlers[RequestCode.GET_CONSUMER_LIST_BY_GROUP] = lambda n, conn, cmd: answer(
        cmd, ext={}, body=b'{"consumerIdList":["b","a"]}')
    assert world.client().consumer_list("g", "T") == ("b", "a")
    (sent,) = world.brokers["broker-a"].requests_with(RequestCode.GET_CONSUMER_LIST_BY_GROUP)
    assert dict(sent.ext) == {"consumerGroup": "g"}


def test_send_back_goes_to_the_store_host_without_a_broker_name(two: World) -> None:
    c = two.client()
    store = HostPort.parse(two.addrs["broker-b"])
    msg = MessageExt(topic="%RETRY%g", body=b"x", commit_log_offset=4242, store_host=store,
                     reconsume_times=1, properties={"UNIQ_KEY": "U1", "RETRY_TOPIC": "orig"})
    c.send_back(msg, group="g", delay_level=0, max_reconsume_times=3)
    (sent,) = two.brokers["broker-b"].requests_with(RequestCode.CONSUMER_SEND_MSG_BACK)
    assert dict(sent.ext) == {"offset": "4242", "group": "g", "delayLevel": "0", "originMsgId": "U1",
                              "originTopic": "orig", "unitMode": "false", "maxReconsumeTimes": "3"}
    c.send_back(MessageExt(topic="T", body=b"", commit_log_offset=1), group="g", broker_name="broker-a",
                delay_level=-1)
    (sent_a,) = two.brokers["broker-a"].requests_with(RequestCode.CONSUMER_SEND_MSG_BACK)
    assert (sent_a.ext["originTopic"], sent_a.ext["delayLevel"]) == ("T", "-1")
    assert sent_a.ext["originMsgId"] == MessageExt(topic="T", body=b"", commit_log_offset=1).offset_msg_id


def test_create_topic_on_every_master_or_the_named_ones(two: World) -> None:
    c = two.client()
    c.route("NEWT")
    c.create_topic("NEWT", queues=8, perm=6)
    c.create_topic("NEWT", queues=2, brokers=["broker-b"])
    a = two.brokers["broker-a"].requests_with(RequestCode.UPDATE_AND_CREATE_TOPIC)
    b = two.brokers["broker-b"].requests_with(RequestCode.UPDATE_AND_CREATE_TOPIC)
    assert [r.ext["readQueueNums"] for r in a] == ["8"] and [r.ext["writeQueueNums"] for r in b] == ["8", "2"]
    assert dict(a[0].ext) == {"topic": "NEWT", "defaultTopic": "TBW102", "readQueueNums": "8",
                              "writeQueueNums": "8", "perm": "6", "topicFilterType": "SINGLE_TAG",
                              "topicSysFlag": "0", "order": "false"}
    c.route("NEWT")    # the cached route was dropped by create_topic
    assert len(two.ns.requests_with(RequestCode.GET_ROUTEINFO_BY_TOPIC)) == 2
    with pytest.raises(ValueError, match="unknown broker"):
        c.create_topic("NEWT", brokers=["broker-x"])
    with pytest.raises(ValueError, match="queues"):
        c.create_topic("NEWT", queues=0)


def test_acl_needs_both_keys(world: World) -> None:
    with pytest.raises(ConfigError, match="secret_key"):
        world.client(access_key="ak")


def test_acl_signs_name_server_and_broker_requests(world: World) -> None:
    from rocketmq_spark.client.acl import signature

    c = world.client(access_key="ak", secret_key="sk")
    c.send(Message("T", b"signed"))
    for r in world.ns.requests + world.brokers["broker-a"].requests:
        assert r.ext["AccessKey"] == "ak" and r.ext["Signature"] == signature(r.ext, r.body, "sk")


def test_many_threads_share_one_client(two: World) -> None:
    two.handlers[RequestCode.GET_MAX_OFFSET] = lambda n, conn, cmd: answer(
        cmd, ext={"offset": cmd.ext["queueId"] + n[-1].replace("a", "0").replace("b", "1")})
    c = two.client()

    def work(t: int) -> list[tuple[int, str]]:
        out = []
        for i in range(20):
            res = c.send(Message("T", f"{t}-{i}".encode()))
            mq = MessageQueue("T", "broker-b", i % 2)
            out.append((c.max_offset(mq), res.msg_id))
        return out

    with ThreadPoolExecutor(8) as pool:
        results = [r for chunk in pool.map(work, range(8)) for r in chunk]
    assert sorted(off for off, _ in results) == sorted([int(f"{i % 2}1") for i in range(20)] * 8)
    assert len({mid for _, mid in results}) == 160
    assert len(two.brokers["broker-a"].connections) == 1 and len(two.brokers["broker-b"].connections) == 1
