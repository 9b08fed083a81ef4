"""Golden tests over the real Apache brokers' recorded answers, 4.9.8 and 5.1.3 alike.

For every recording with an answer: the answer frame decodes whole, byte by byte and with
trailing bytes; then a fake server on a real socket replays those exact bytes (only the
opaque changed) to MQClient, and the typed result the client returns must match what the
broker said: routes, send results, pulled messages byte for byte, offsets, lock sets,
consume stats, consumer lists, and errors with the broker's code and remark. Requests
the client cannot make (missing or malformed fields) are stood in for by a well-formed
call of the same operation: what is checked there is how the answer is mapped.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import zlib
from typing import Any, Callable

import pytest

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.client.acl import signature
from rocketmq_spark.errors import BrokerError
from rocketmq_spark.remoting import command, fastjson
from rocketmq_spark.remoting.bodies import ConsumerData, LockBatchBody
from rocketmq_spark.remoting.codes import RequestCode
from rocketmq_spark.remoting.command import RemotingCommand
from rocketmq_spark.remoting.headers import SendMessageRequestHeader
from rocketmq_spark.remoting.message import (
    HostPort, MessageExt, decode_batch, decode_properties, offset_msg_id)
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.structs import Message, PullStatus
from tests.client.fake_server import (
    FakeConn, FakeServer, answer, cluster_info_for, replay_frame, route_for)
from tests.vectors import broker_vectors

VECTORS = broker_vectors()
WITH_RESPONSE = sorted(n for n, v in VECTORS.items() if v["response"])
WITHOUT_RESPONSE = sorted(n for n, v in VECTORS.items() if not v["response"])
BROKER = "broker-a"
ACCESS_KEY, SECRET_KEY = "rocketmq2", "12345678"
# The client sends SEND_MESSAGE_V2 where the recording used SEND_MESSAGE (V1).
CLIENT_CODE = {RequestCode.SEND_MESSAGE: RequestCode.SEND_MESSAGE_V2}


def frame_of(v: dict) -> bytes:
    return bytes.fromhex(v["response"]["frame_hex"])


def recorded_answer(v: dict) -> RemotingCommand:
    return command.decode(frame_of(v))[0]


def req_ext(v: dict) -> dict[str, str]:
    return {k: str(x) for k, x in (v["request"]["header"].get("extFields") or {}).items()}


def req_body(v: dict) -> bytes:
    frame = bytes.fromhex(v["request"]["frame_hex"]) if "frame_hex" in v["request"] else None
    return command.decode(frame)[0].body if frame else b""


# ---------------------------------------------------------------- codec

@pytest.mark.parametrize("name", WITH_RESPONSE)
def test_answer_frame_decodes_whole(name: str) -> None:
    v = VECTORS[name]
    r = v["response"]
    frame = frame_of(v)
    cmd, used = command.decode(frame)
    assert used == len(frame)
    assert (cmd.code, cmd.opaque, cmd.flag) == (r["code"], r["opaque"], r["flag"])
    assert cmd.is_response and not cmd.is_oneway
    assert cmd.remark == r["remark"]
    assert (cmd.language, cmd.version) == (r["language"], r["version"])
    assert dict(cmd.ext) == {k: str(x) for k, x in (r["extFields"] or {}).items()}
    if "body_hex" in r:
        assert cmd.body == bytes.fromhex(r["body_hex"])
    elif "body_text" in r:
        assert cmd.body == r["body_text"].encode("utf-8")
    elif r.get("body") is not None:
        assert json.loads(cmd.body) == r["body"]
    else:
        assert cmd.body == b""


@pytest.mark.parametrize("name", WITH_RESPONSE)
def test_answer_frame_decodes_byte_by_byte_and_with_trailing_bytes(name: str) -> None:
    frame = frame_of(VECTORS[name])
    whole, _ = command.decode(frame)
    dec = command.FrameDecoder()
    got: list[RemotingCommand] = []
    for i in range(len(frame)):
        assert not got
        dec.feed(frame[i:i + 1])
        got.extend(dec)
    assert got == [whole] and dec.pending == 0
    dec.feed(frame + frame[:9])
    assert list(dec) == [whole]
    assert dec.pending == 9


def test_replay_frame_changes_only_the_opaque() -> None:
    for name in WITH_RESPONSE:
        frame = frame_of(VECTORS[name])
        cmd = command.decode(frame)[0]
        replayed = replay_frame(frame, 123456)
        assert command.decode(replayed)[0] == cmd.with_opaque(123456)
        assert replay_frame(replayed, cmd.opaque) == frame


# ---------------------------------------------------------------- replaying fake broker

class Replay:
    """Answers the recorded request code with the recorded frame (after any requests the
    broker sent first); routes and cluster info point every broker at this server."""

    def __init__(self, v: dict) -> None:
        code = v["request"]["code"]
        self.code = CLIENT_CODE.get(code, code)
        self.frame = frame_of(v)
        self.before = [bytes.fromhex(s["frame_hex"]) for s in v.get("server_requests_seen") or []]
        self.calls: list[RemotingCommand] = []

    def __call__(self, conn: FakeConn, cmd: RemotingCommand) -> None:
        addr = conn.server.address
        if cmd.code == self.code:
            self.calls.append(cmd)
            for f in self.before:
                conn.send_frame(f)
            conn.send_frame(replay_frame(self.frame, cmd.opaque))
        elif cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            conn.send(answer(cmd, body=route_for(cmd.ext["topic"], {BROKER: addr}, queues=16)))
        elif cmd.code == RequestCode.GET_BROKER_CLUSTER_INFO:
            conn.send(answer(cmd, body=cluster_info_for({BROKER: addr})))
        else:
            conn.send(answer(cmd, 3, remark=f"not scripted: {cmd.code}"))


class Case:
    def __init__(self, name: str, v: dict, client: MQClient, server: FakeServer, replay: Replay) -> None:
        self.name, self.v, self.client, self.server, self.replay = name, v, client, server, replay
        self.recording = name.split("/", 1)[1]
        self.r = v["response"]
        self.ext = req_ext(v)
        self.answer = recorded_answer(v)

    def outcome(self, call: Callable[[], Any], ok: tuple[int, ...] = (0,)) -> Any:
        """The call's result when the broker answered with an ``ok`` code; else check that
        the call raised the broker's error, code and remark intact."""
        if self.r["code"] in ok:
            return call()
        with pytest.raises(BrokerError) as info:
            call()
        err = info.value
        assert err.code == self.r["code"]
        assert err.remark == (self.r["remark"] or "")
        assert err.request_code == self.replay.code
        assert err.address == self.server.address
        assert err.retriable == (err.code in {1, 2, 14, 16, 17, 204, 205, 215, 1500})
        return None

    def queue(self, topic_key: str = "topic", qid_key: str = "queueId") -> MessageQueue:
        qid = self.ext.get(qid_key, "0")
        return MessageQueue(self.ext.get(topic_key) or "T", BROKER, int(qid) if qid.isdigit() else 0)


# ---------------------------------------------------------------- one check per request code

def check_route(c: Case) -> None:
    topic = c.ext["topic"]
    route = c.outcome(lambda: c.client.route(topic))
    if route is None:
        return
    body = fastjson.loads(c.answer.body)
    assert {bd.broker_name: dict(bd.broker_addrs) for bd in route.broker_datas} == {
        b["brokerName"]: {int(k): a for k, a in b["brokerAddrs"].items()} for b in body["brokerDatas"]}
    assert c.client.subscribe_queues(topic) == sorted(
        MessageQueue(topic, q["brokerName"], i) for q in body["queueDatas"] if q["perm"] & 4
        for i in range(q["readQueueNums"]))
    assert c.client.publish_queues(topic) == sorted(
        MessageQueue(topic, q["brokerName"], i) for q in body["queueDatas"] if q["perm"] & 2
        for i in range(q["writeQueueNums"]))
    for b in body["brokerDatas"]:
        assert c.client.master_addr(topic, b["brokerName"]) == b["brokerAddrs"]["0"]
    assert len(c.replay.calls) == 1   # served from the cache after the first call


def _message_from_request(c: Case) -> Message:
    props = dict(c.v["request"].get("decoded_properties") or {})
    if "body_hex" in c.v["request"]:
        body = bytes.fromhex(c.v["request"]["body_hex"])
    else:   # stored as a prefix: its first 4 KiB stand in for the whole
        body = bytes.fromhex(c.v["request"]["body_hex_prefix"])
    if c.ext.get("f") == "1":
        body = zlib.decompress(body)
    tags, keys = props.pop("TAGS", None), props.pop("KEYS", None)
    delay = int(props.pop("DELAY", 0))
    props.pop("WAIT", None)
    topic = c.ext.get("b") or c.ext.get("topic") or "T"
    return Message(topic, body, tags=tags, keys=keys, properties=props, delay_level=delay)


def check_send(c: Case) -> None:
    ext = c.ext
    if c.v["request"]["code"] == RequestCode.SEND_BATCH_MESSAGE:
        items = decode_batch(req_body(c.v))
        header = SendMessageRequestHeader.from_v2(ext)
        msgs = [Message(header.topic, i.body, tags=i.properties.get("TAGS"), keys=i.properties.get("KEYS"),
                        properties={k: x for k, x in i.properties.items() if k not in ("TAGS", "KEYS", "WAIT")})
                for i in items]
        mq = MessageQueue(header.topic, BROKER, header.queue_id)
        result = c.outcome(lambda: c.client.send_batch(msgs, queue=mq), ok=(0, 10, 11, 12))
        sent = c.replay.calls[0]
        assert sent.ext["m"] == "true" and sent.code == RequestCode.SEND_BATCH_MESSAGE
        assert [(i.body, i.properties) for i in decode_batch(sent.body)] == \
            [(i.body, i.properties) for i in items]
        uniq = ",".join(i.properties["UNIQ_KEY"] for i in items)
    else:
        msg = _message_from_request(c)
        qid = ext.get("e") or ext.get("queueId") or "0"
        mq = MessageQueue(msg.topic, BROKER, int(qid))
        result = c.outcome(lambda: c.client.send(msg, queue=mq), ok=(0, 10, 11, 12))
        sent = c.replay.calls[0]
        assert sent.code == RequestCode.SEND_MESSAGE_V2
        props = decode_properties(sent.ext["i"])
        assert props["UNIQ_KEY"] == msg.properties["UNIQ_KEY"] and props["WAIT"] == "true"
        assert {k: props.get(k) for k in ("TAGS", "KEYS")} == {"TAGS": msg.tags, "KEYS": msg.keys}
        assert props.get("DELAY") == (str(msg.delay_level) if msg.delay_level else None)
        assert (sent.ext["b"], sent.ext["e"], sent.ext["m"]) == (msg.topic, qid, "false")
        if len(msg.body) >= 4096:
            assert sent.ext["f"] == "1" and zlib.decompress(sent.body) == msg.body
        else:
            assert sent.ext["f"] == "0" and sent.body == msg.body
        uniq = msg.properties["UNIQ_KEY"]
    if result is None:
        return
    rext = c.answer.ext
    assert result.status == {0: "SEND_OK", 10: "FLUSH_DISK_TIMEOUT", 11: "SLAVE_NOT_AVAILABLE",
                             12: "FLUSH_SLAVE_TIMEOUT"}[c.r["code"]]
    assert result.msg_id == uniq
    assert result.offset_msg_id == rext["msgId"]
    assert result.queue == MessageQueue(mq.topic, BROKER, int(rext["queueId"]))
    assert result.queue_offset == int(rext["queueOffset"])


def _assert_message(m: MessageExt, rec: dict) -> None:
    assert m.topic == rec["topic"]
    assert m.body == bytes.fromhex(rec["body_hex"])
    assert len(m.body) == rec["bodyLength"]
    assert dict(m.properties) == rec["properties"]
    assert m.tags == rec["properties"].get("TAGS") and m.keys == rec["properties"].get("KEYS")
    assert (m.queue_id, m.queue_offset, m.commit_log_offset) == \
        (rec["queueId"], rec["queueOffset"], rec["commitLogOffset"])
    assert (m.sys_flag, m.flag, m.reconsume_times) == (rec["sysFlag"], rec["flag"], rec["reconsumeTimes"])
    assert (m.born_timestamp, m.store_timestamp) == (rec["bornTimestamp"], rec["storeTimestamp"])
    assert (str(m.born_host), str(m.store_host)) == (rec["bornHost"], rec["storeHost"])
    assert m.body_crc == rec["bodyCRC"] and m.prepared_transaction_offset == rec["preparedTransactionOffset"]
    assert m.msg_id == rec["properties"].get("UNIQ_KEY", m.offset_msg_id)
    host = HostPort.parse(rec["storeHost"])
    assert m.offset_msg_id == offset_msg_id(host, rec["commitLogOffset"])
    if "body_inflated_len" in rec:
        payload = m.payload()
        assert len(payload) == rec["body_inflated_len"]
        assert hashlib.sha256(payload).hexdigest() == rec["body_inflated_sha256"]
    else:
        assert m.payload() == m.body


def check_pull(c: Case) -> None:
    ext = c.ext
    sys_flag = int(ext.get("sysFlag", "4"))
    expression = ext.get("subscription") or "*"
    result = c.outcome(lambda: c.client.pull(
        c.queue(), int(ext.get("queueOffset", "0")), group=ext["consumerGroup"],
        max_nums=int(ext.get("maxMsgNums", "32")), expression=expression,
        commit_offset=int(ext["commitOffset"]) if sys_flag & 1 else None,
        suspend_ms=int(ext["suspendTimeoutMillis"]) if sys_flag & 2 else 0), ok=(0, 19, 20, 21))
    sent = c.replay.calls[0]
    assert int(sent.ext["sysFlag"]) == (sys_flag | 4)   # SUBSCRIPTION always
    assert sent.ext["subscription"] == expression
    if result is None:
        return
    rext = c.answer.ext
    assert result.status is PullStatus(c.r["code"])
    assert (result.next_begin_offset, result.min_offset, result.max_offset, result.suggest_which_broker_id) == \
        (int(rext["nextBeginOffset"]), int(rext["minOffset"]), int(rext["maxOffset"]),
         int(rext["suggestWhichBrokerId"]))
    recorded = c.r.get("messages") or []
    assert len(result.messages) == len(recorded)
    for m, rec in zip(result.messages, recorded):
        _assert_message(m, rec)
    if c.recording == "pull_retry_topic":
        (m,) = result.messages
        assert m.topic.startswith("%RETRY%") and m.reconsume_times == 1
        assert re.fullmatch(r"(rec|r5)_\w+_main", m.properties["RETRY_TOPIC"])


def check_query_offset(c: Case) -> None:
    got = c.outcome(lambda: c.client.query_consumer_offset(c.ext["consumerGroup"], c.queue()), ok=(0, 22))
    if c.r["code"] == 22:
        assert got is None
    elif c.r["code"] == 0:
        assert got == int(c.answer.ext["offset"])


def check_update_offset(c: Case) -> None:
    c.outcome(lambda: c.client.update_consumer_offset(
        c.ext["consumerGroup"], c.queue(), int(c.ext["commitOffset"])))
    sent = c.replay.calls[0]
    assert {k: sent.ext[k] for k in ("consumerGroup", "topic", "queueId", "commitOffset")} == \
        {k: c.ext[k] for k in ("consumerGroup", "topic", "queueId", "commitOffset")}
    assert not sent.is_oneway


def _check_offset(call: Callable[[Case], int], key: str = "offset") -> Callable[[Case], None]:
    def check(c: Case) -> None:
        got = c.outcome(lambda: call(c))
        if got is not None:
            assert got == int(c.answer.ext[key])
    return check


def check_view_message(c: Case) -> None:
    msg_id = offset_msg_id(HostPort.parse(c.server.address), int(c.ext["offset"]))
    m = c.outcome(lambda: c.client.view_message(msg_id))
    assert c.replay.calls[0].ext["offset"] == c.ext["offset"]
    (rec,) = c.r["messages"]
    _assert_message(m, rec)


def check_heartbeat(c: Case) -> None:
    notified: list[RemotingCommand] = []
    got = threading.Event()

    def on_notify(addr: str, cmd: RemotingCommand) -> None:
        notified.append(cmd)
        got.set()

    c.client.set_request_handler(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, on_notify)
    body = c.v["request"].get("body")
    if isinstance(body, dict):
        consumers = [ConsumerData.from_json(d) for d in body.get("consumerDataSet") or ()]
        producers = [p["groupName"] for p in body.get("producerDataSet") or ()]
        client_id = body["clientID"]
    else:
        consumers, producers, client_id = [], [], "127.0.0.1@x"
    c.outcome(lambda: c.client.heartbeat(client_id=client_id, consumers=consumers,
                                         producer_groups=producers))
    sent = json.loads(c.replay.calls[0].body)
    assert sent["clientID"] == client_id
    assert [p["groupName"] for p in sent["producerDataSet"]] == producers
    assert [d["groupName"] for d in sent["consumerDataSet"]] == [x.group_name for x in consumers]
    if c.v.get("server_requests_seen"):
        assert got.wait(5)
        assert notified[0].ext["consumerGroup"] == c.v["server_requests_seen"][0]["extFields"]["consumerGroup"]
        assert notified[0].is_oneway


def check_unregister(c: Case) -> None:
    c.outcome(lambda: c.client.unregister(client_id=c.ext["clientID"],
                                          consumer_group=c.ext.get("consumerGroup"),
                                          producer_group=c.ext.get("producerGroup")))
    assert dict(c.replay.calls[0].ext) == c.ext


def check_send_back(c: Case) -> None:
    msg = MessageExt(topic=c.ext["originTopic"], body=b"", commit_log_offset=int(c.ext["offset"]),
                     properties={"UNIQ_KEY": c.ext["originMsgId"]})
    c.outcome(lambda: c.client.send_back(msg, group=c.ext["group"], delay_level=int(c.ext["delayLevel"]),
                                         broker_name=BROKER,
                                         max_reconsume_times=int(c.ext["maxReconsumeTimes"])))
    assert dict(c.replay.calls[0].ext) == c.ext   # the same header Java sends


def check_consumer_list(c: Case) -> None:
    got = c.outcome(lambda: c.client.consumer_list(c.ext["consumerGroup"], "T"))
    if got is not None:
        assert got == tuple(json.loads(c.answer.body)["consumerIdList"])


def _lock_args(c: Case) -> tuple[str, str, list[MessageQueue]]:
    body = LockBatchBody.decode(req_body(c.v))
    return body.consumer_group, body.client_id, list(body.mqs)


def check_lock(c: Case) -> None:
    group, client_id, mqs = _lock_args(c)
    got = c.outcome(lambda: c.client.lock_batch(group, client_id, mqs))
    sent = LockBatchBody.decode(c.replay.calls[0].body)
    assert (sent.consumer_group, sent.client_id, set(sent.mqs)) == (group, client_id, set(mqs))
    assert got == frozenset(MessageQueue.from_json(m) for m in json.loads(c.answer.body)["lockOKMQSet"])


def check_unlock(c: Case) -> None:
    group, client_id, mqs = _lock_args(c)
    c.outcome(lambda: c.client.unlock_batch(group, client_id, mqs))
    sent = LockBatchBody.decode(c.replay.calls[0].body)
    assert (sent.consumer_group, sent.client_id, set(sent.mqs)) == (group, client_id, set(mqs))


def check_create_topic(c: Case) -> None:
    c.outcome(lambda: c.client.create_topic(c.ext["topic"], queues=int(c.ext["readQueueNums"]),
                                            perm=int(c.ext["perm"]), brokers=[BROKER]))
    sent = dict(c.replay.calls[0].ext)
    sent.pop("AccessKey", None), sent.pop("Signature", None)
    assert sent == {k: x for k, x in c.ext.items() if k not in ("AccessKey", "Signature")}


def check_cluster_info(c: Case) -> None:
    got = c.outcome(lambda: c.client.cluster_brokers())
    body = fastjson.loads(c.answer.body)
    assert got == {n: d["brokerAddrs"]["0"] for n, d in body["brokerAddrTable"].items()}


def check_topic_list(c: Case) -> None:
    got = c.outcome(lambda: c.client.topic_list())
    assert got == sorted(json.loads(c.answer.body)["topicList"])


def check_topic_stats(c: Case) -> None:
    got = c.outcome(lambda: c.client.topic_stats(c.ext["topic"]))
    if got is None:
        return
    table = fastjson.loads(c.answer.body)["offsetTable"]
    assert {mq: (o.min_offset, o.max_offset, o.last_update_timestamp) for mq, o in got.items()} == {
        MessageQueue.from_json(json.loads(k)): (x["minOffset"], x["maxOffset"], x["lastUpdateTimestamp"])
        for k, x in table.items()}


def check_runtime_info(c: Case) -> None:
    got = c.outcome(lambda: c.client.broker_runtime_info(c.server.address))
    assert got == json.loads(c.answer.body)["table"]


def check_consume_stats(c: Case) -> None:
    got = c.outcome(lambda: c.client.consume_stats(c.ext["consumerGroup"], c.ext.get("topic")))
    body = fastjson.loads(c.answer.body)
    assert got.consume_tps == body["consumeTps"]
    assert {mq: (w.broker_offset, w.consumer_offset, w.last_timestamp) for mq, w in got.offset_table.items()} == {
        MessageQueue.from_json(json.loads(k)): (x["brokerOffset"], x["consumerOffset"], x["lastTimestamp"])
        for k, x in body["offsetTable"].items()}
    sent = c.replay.calls[0].ext
    assert sent["consumerGroup"] == c.ext["consumerGroup"] and sent.get("topic") == c.ext.get("topic")


def check_raw(c: Case) -> None:
    """Codes without a typed method go through ``invoke``: the answer or the error."""
    got = c.outcome(lambda: c.client.invoke(c.server.address, c.v["request"]["code"], c.ext or None))
    if got is not None:
        assert got.body == c.answer.body
        assert isinstance(fastjson.loads(got.body), dict)


CHECKS: dict[int, Callable[[Case], None]] = {
    RequestCode.GET_ROUTEINFO_BY_TOPIC: check_route,
    RequestCode.SEND_MESSAGE: check_send,
    RequestCode.SEND_MESSAGE_V2: check_send,
    RequestCode.SEND_BATCH_MESSAGE: check_send,
    RequestCode.PULL_MESSAGE: check_pull,
    RequestCode.QUERY_CONSUMER_OFFSET: check_query_offset,
    RequestCode.UPDATE_CONSUMER_OFFSET: check_update_offset,
    RequestCode.GET_MAX_OFFSET: _check_offset(lambda c: c.client.max_offset(c.queue())),
    RequestCode.GET_MIN_OFFSET: _check_offset(lambda c: c.client.min_offset(c.queue())),
    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: _check_offset(
        lambda c: c.client.search_offset(c.queue(), int(c.ext["timestamp"]))),
    RequestCode.GET_EARLIEST_MSG_STORETIME: _check_offset(
        lambda c: c.client.earliest_store_time(c.queue()), key="timestamp"),
    RequestCode.VIEW_MESSAGE_BY_ID: check_view_message,
    RequestCode.HEART_BEAT: check_heartbeat,
    RequestCode.UNREGISTER_CLIENT: check_unregister,
    RequestCode.CONSUMER_SEND_MSG_BACK: check_send_back,
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: check_consumer_list,
    RequestCode.LOCK_BATCH_MQ: check_lock,
    RequestCode.UNLOCK_BATCH_MQ: check_unlock,
    RequestCode.UPDATE_AND_CREATE_TOPIC: check_create_topic,
    RequestCode.GET_BROKER_CLUSTER_INFO: check_cluster_info,
    RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: check_topic_list,
    RequestCode.GET_TOPIC_STATS_INFO: check_topic_stats,
    RequestCode.GET_BROKER_RUNTIME_INFO: check_runtime_info,
    RequestCode.GET_CONSUME_STATS: check_consume_stats,
    RequestCode.GET_CONSUMER_CONNECTION_LIST: check_raw,
    RequestCode.GET_ALL_TOPIC_CONFIG: check_raw,
    9999: check_raw,
}


def test_every_recorded_request_code_has_a_check() -> None:
    assert {VECTORS[n]["request"]["code"] for n in WITH_RESPONSE} <= set(CHECKS)


@pytest.mark.parametrize("name", WITH_RESPONSE)
def test_client_maps_the_recorded_answer(name: str) -> None:
    v = VECTORS[name]
    replay = Replay(v)
    acl = {"access_key": ACCESS_KEY, "secret_key": SECRET_KEY} if "/acl_" in name else {}
    with FakeServer(replay) as server:
        client = MQClient(ClientConfig((server.address,), request_timeout=5.0, **acl))
        try:
            CHECKS[v["request"]["code"]](Case(name, v, client, server, replay))
        finally:
            client.close()
        assert replay.calls, "the recorded answer was never asked for"
        if acl:   # every request the client sent was signed with the account's secret
            for cmd in server.requests:
                assert cmd.ext["AccessKey"] == ACCESS_KEY
                assert cmd.ext["Signature"] == signature(cmd.ext, cmd.body, SECRET_KEY)


@pytest.mark.parametrize("name", WITHOUT_RESPONSE)
def test_unanswered_requests_time_out_naming_the_address(name: str) -> None:
    """The 4.9.8 NameServer does not answer codes it does not handle (5.1.3 does)."""
    from rocketmq_spark.errors import RequestTimeout

    v = VECTORS[name]
    with FakeServer() as server:   # records, never answers
        client = MQClient(ClientConfig((server.address,), request_timeout=0.3))
        try:
            with pytest.raises(RequestTimeout) as info:
                client.invoke(server.address, v["request"]["code"], req_ext(v) or None)
        finally:
            client.close()
        assert server.address in str(info.value)
        assert server.requests[0].code == v["request"]["code"]

