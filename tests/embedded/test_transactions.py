"""Transactional messages like Apache 4.9.8: the recorded session replayed, answer by answer.

``txn_session`` sends the 40 recorded exchanges of ``vectors/apache-broker-txn`` in their
order to a fresh embedded broker with the recorded settings on a fake clock. Each answer
must have the recorded code, remark, header keys and extFields (values too, but for the
commit-log offsets, which are ours), each pulled message the recorded fields (size, CRC,
queue offset, sysFlag, every property, preparedTransactionOffset mapped to ours), each
check-back the recorded header, extFields and body. Then the queues the recording shows
only indirectly: the half queue with its copies, the op queue, the check progress and
TRANS_CHECK_MAX_TIME_TOPIC.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Iterator

import pytest

from rocketmq_spark.embedded.half_messages import CHECK_GROUP
from rocketmq_spark.embedded.store import GetStatus
from rocketmq_spark.remoting.codes import (TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, Perm,
                                           RequestCode, ResponseCode)
from rocketmq_spark.remoting.command import RemotingCommand, encode
from rocketmq_spark.remoting.message import (HostPort, MessageExt, decode_messages, encode_message,
                                             parse_offset_msg_id)
from tests.embedded.txn_session import TxnSession, checks_of, close_session, run_session
from tests.embedded.wire import max_offset, messages, pull, req
from tests.txn_recording import CHECK_ANSWERS, ORDER, RECORDED_RUN, V


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TxnSession]:
    s = run_session(tmp_path_factory.mktemp("txn"))
    try:
        yield s
    finally:
        close_session(s)


def header_keys(cmd: RemotingCommand) -> list[str]:
    frame = encode(cmd)
    length = struct.unpack(">I", frame[4:8])[0] & 0xFFFFFF
    return sorted(json.loads(frame[8:8 + length]))


def header_text(cmd: RemotingCommand) -> str:
    frame = encode(cmd)
    return frame[8:8 + (struct.unpack(">I", frame[4:8])[0] & 0xFFFFFF)].decode()


def store_host(s: TxnSession) -> HostPort:
    return HostPort(s.broker.advertised_host, s.broker.port)


def fields(m: MessageExt, s: TxnSession | None = None) -> dict[str, Any]:
    """What a recorded message says that must be the same here."""
    return {"storeSize": len(encode_message(m)), "magicCode": f"0x{m.magic & 0xFFFFFFFF:08X}", "bodyCRC": m.body_crc,
            "queueId": m.queue_id, "flag": m.flag, "queueOffset": m.queue_offset, "sysFlag": m.sys_flag,
            "reconsumeTimes": m.reconsume_times, "bodyLength": len(m.body), "topic": m.topic,
            "properties": dict(m.properties), "body_text": m.body.decode(),
            "preparedTransactionOffset": m.prepared_transaction_offset}


def recorded_fields(rec: dict, s: TxnSession) -> dict[str, Any]:
    prepared = rec["preparedTransactionOffset"]
    return {"storeSize": rec["storeSize"], "magicCode": rec["magicCode"], "bodyCRC": rec["bodyCRC"],
            "queueId": rec["queueId"], "flag": rec["flag"], "queueOffset": rec["queueOffset"],
            "sysFlag": rec["sysFlag"], "reconsumeTimes": rec["reconsumeTimes"], "bodyLength": rec["bodyLength"],
            "topic": s.rename(rec["topic"]), "properties": {k: s.rename(v) for k, v in rec["properties"].items()},
            "body_text": rec["body_text"], "preparedTransactionOffset": s.ours(prepared) if prepared else 0}


# ---------------------------------------------------------------- every answer

@pytest.mark.parametrize("name", ORDER)
def test_answer_matches_the_recording(session: TxnSession, name: str) -> None:
    rec, ours = V[name]["response"], session.answers[name]
    if rec is None:  # oneway, or UNKNOWN: Apache sends nothing back
        assert ours is None
        return
    assert ours is not None
    assert (ours.code, ours.remark, ours.language, ours.version) == \
        (rec["code"], rec["remark"], rec["language"], rec["version"])
    assert header_keys(ours) == sorted(rec["header_keys"])
    if rec["extFields"] is None:
        assert ours.ext_fields is None
    else:
        assert list(ours.ext) == list(rec["extFields"])
        for key, value in rec["extFields"].items():
            if key == "msgId":  # offset ids of our broker, of records that are there
                for msg_id in ours.ext[key].split(","):
                    host, offset = parse_offset_msg_id(msg_id)
                    assert host == store_host(session) and session.broker.store.message_at(offset) is not None
            else:
                assert ours.ext[key] == session.rename(str(value)), key
    if "messages" in rec:
        expected = [recorded_fields(m, session) for m in rec["messages"]]
        if name == "txn_pull_batch_queue":
            # 4.9.8 stores a batch item's properties followed by the batch's own (its header's
            # TRAN_MSG, WAIT, PGROUP, then CLUSTER): the three repeated ones are not stored twice here.
            repeated = sum(len(f"{k}\x01{v}\x02") for k, v in V["txn_send_batch_prepared"]["request"]
                           ["decoded_properties"].items())
            assert repeated == 49
            for e in expected:
                e["storeSize"] -= repeated
        assert [fields(m) for m in decode_messages(ours.body)] == expected
    elif isinstance(rec["body"], dict):  # GET_PRODUCER_CONNECTION_LIST: all but our client's port
        body = json.loads(ours.body)
        for conn in body["connectionSet"]:
            assert conn.pop("clientAddr") == session.producer.sock.getsockname()[0] + ":" + \
                str(session.producer.sock.getsockname()[1])
        expected = json.loads(session.rename(json.dumps(rec["body"])))
        for conn in expected["connectionSet"]:
            del conn["clientAddr"]
        assert body == expected
    else:
        assert ours.body == b""


def test_the_session_replayed_every_exchange(session: TxnSession) -> None:
    assert set(session.answers) == set(V) and len(V) == 40


# ---------------------------------------------------------------- check-backs

@pytest.mark.parametrize("name", CHECK_ANSWERS)
def test_check_back_matches_the_recording(session: TxnSession, name: str) -> None:
    rec, ours = V[name]["server_requests_seen"][0], session.checks[name]
    assert (ours.code, ours.flag, ours.language, ours.version, ours.remark) == (39, 2, "JAVA", 409, None)
    recorded_offset = int(rec["extFields"]["commitLogOffset"])
    our_offset = session.ours(recorded_offset)
    assert list(ours.ext) == list(rec["extFields"])
    expected = {**rec["extFields"], "commitLogOffset": str(our_offset),
                "offsetMsgId": ours.ext["offsetMsgId"]}
    assert dict(ours.ext) == expected
    assert parse_offset_msg_id(ours.ext["offsetMsgId"]) == (store_host(session), our_offset)
    # The header as 4.9.8 writes it, but for our values.
    text = rec["header_text"].replace(f'"opaque":{rec["opaque"]}', f'"opaque":{ours.opaque}')
    text = text.replace(f'"commitLogOffset":"{recorded_offset}"', f'"commitLogOffset":"{our_offset}"')
    text = text.replace(rec["extFields"]["offsetMsgId"], ours.ext["offsetMsgId"])
    assert header_text(ours) == text
    # The body: the half message's latest copy, in its real topic and queue.
    [body] = decode_messages(ours.body)
    assert fields(body) == recorded_fields(rec["messages"][0], session)
    assert body.commit_log_offset == our_offset
    copy = session.broker.store.read_message(TRANS_HALF_TOPIC, 0, body.queue_offset)
    assert copy is not None and decode_messages(copy)[0].commit_log_offset == our_offset
    # Its store time is that of the message the round read (the copy before this one).
    read_at = {"txn_check_back_commit": 3, "txn_check_back_unknown_1": 6, "txn_check_back_unknown_2": 8,
               "txn_check_back_unknown_3": 10}[name]
    assert body.store_timestamp == session.broker.store.store_time(TRANS_HALF_TOPIC, 0, read_at)


def test_check_backs_went_to_the_producer_only(session: TxnSession) -> None:
    """Four in all: one for the unresolved half message (answered COMMIT), three for the one
    answered UNKNOWN; none for the group nobody registered, none on its connection."""
    checks = checks_of(session.producer)
    assert len(checks) == 4 and [c.ext["tranStateTableOffset"] for c in checks] == ["4", "8", "10", "12"]
    assert checks_of(session.other) == []
    context = V["txn_pull_check_max_time_topic"]["context"]
    assert context["check_back_tranStateTableOffsets"] == [c.ext["tranStateTableOffset"] for c in checks[1:]]
    assert context["check_backs_for_unknown_group_seen"] == 0


# ---------------------------------------------------------------- the queues behind it

def test_half_queue_holds_every_half_message_and_copy(session: TxnSession) -> None:
    got = messages(pull(session.producer, "check", TRANS_HALF_TOPIC, 0, 0))
    keys = ["tx-commit", "tx-rollback", "tx-pending", "tx-checked", "tx-checked", "tx-nobody", "tx-unknown",
            "tx-nobody", "tx-unknown", "tx-nobody", "tx-unknown", "tx-nobody", "tx-unknown", "tx-noflag"]
    times = [None, None, None, None, "1", None, None, "1", "1", "2", "2", "3", "3", None]
    assert [m.keys for m in got] == keys
    assert [m.properties.get("TRANSACTION_CHECK_TIMES") for m in got] == times
    assert [m.queue_offset for m in got] == list(range(14))
    topic = session.rename(f"rec_{RECORDED_RUN}_txn")
    for m in got:
        assert (m.topic, m.queue_id, m.sys_flag) == (TRANS_HALF_TOPIC, 0, 0)
        assert (m.properties["REAL_TOPIC"], m.properties["REAL_QID"], m.properties["WAIT"]) == (topic, "1", "true")
        assert m.properties["TRAN_MSG"] == "true" and m.properties["CLUSTER"] == "DefaultCluster"


def test_op_queue_names_each_resolved_half_offset(session: TxnSession) -> None:
    """An op message per commit or rollback (also repeated ones), body = the half offset;
    like Apache the op topic has queues but no topic config, so it cannot be pulled."""
    store = session.broker.store
    result = store.get(TRANS_OP_HALF_TOPIC, 0, 0, 32)
    assert result.status is GetStatus.FOUND
    ops = decode_messages(result.body)
    assert [m.body for m in ops] == [b"0", b"1", b"2", b"4", b"1", b"0", b"13"]
    for m in ops:
        assert (m.tags, m.properties["WAIT"], m.sys_flag, m.queue_id) == ("d", "true", 0, 0)
        assert m.born_host == store_host(session)
    assert max_offset(session.producer, TRANS_OP_HALF_TOPIC, 0) == 7
    assert session.broker.topics.get(TRANS_OP_HALF_TOPIC) is None
    assert pull(session.producer, "check", TRANS_OP_HALF_TOPIC, 0, 0).code == ResponseCode.TOPIC_NOT_EXIST


def test_check_progress_is_a_consumer_offset(session: TxnSession) -> None:
    """The half queue is done up to 13 (the two given up on included), the op queue up to 4."""
    def offset(topic: str) -> int:
        ans = session.producer.request(req(RequestCode.QUERY_CONSUMER_OFFSET,
                                           {"consumerGroup": CHECK_GROUP, "topic": topic, "queueId": 0}))
        assert ans.code == 0
        return int(ans.ext["offset"])

    assert (offset(TRANS_HALF_TOPIC), offset(TRANS_OP_HALF_TOPIC)) == (13, 4)


def test_check_max_time_topic_is_readable_with_one_queue(session: TxnSession) -> None:
    config = session.broker.topics.get(TRANS_CHECK_MAX_TIME_TOPIC)
    assert config is not None
    assert (config.read_queue_nums, config.write_queue_nums, config.perm) == (1, 1, Perm.READ | Perm.WRITE)


def test_the_topic_holds_each_commit(session: TxnSession) -> None:
    """Queue 1: the five commits (one on a check-back, one after a rollback, one twice)."""
    topic = session.rename(f"rec_{RECORDED_RUN}_txn")
    got = messages(pull(session.producer, "check", topic, 1, 0))
    assert [m.keys for m in got] == ["tx-commit", "tx-pending", "tx-checked", "tx-rollback", "tx-commit"]
    assert all(m.sys_flag == 8 for m in got)
    halves = messages(pull(session.producer, "check", TRANS_HALF_TOPIC, 0, 0))
    assert [m.prepared_transaction_offset for m in got] == \
        [halves[i].commit_log_offset for i in (0, 2, 4, 1, 0)]


def test_prepared_flag_without_tran_msg_is_stored_but_never_indexed(session: TxnSession) -> None:
    answer = session.answers["txn_send_prepared_flag_without_tran_msg"]
    assert answer is not None
    topic = session.rename(f"rec_{RECORDED_RUN}_txn")
    assert max_offset(session.producer, topic, 3) == 0
    _host, offset = parse_offset_msg_id(answer.ext["msgId"])
    raw = session.broker.store.message_at(offset)
    assert raw is not None
    [m] = decode_messages(raw)
    assert (m.topic, m.queue_id, m.queue_offset, m.sys_flag, m.keys) == (topic, 3, 0, 4, "tx-flagonly")


def test_nothing_is_left_to_check(session: TxnSession) -> None:
    """Every half message was resolved or given up on: further rounds ask nothing."""
    before = len(checks_of(session.producer))
    rounds = session.broker.transaction_checks.rounds
    session.clock.advance(3000)
    assert session.broker.transaction_checks.wait_rounds(rounds + 1)
    session.clock.advance(3000)
    assert session.broker.transaction_checks.wait_rounds(rounds + 2)
    assert len(checks_of(session.producer)) == before
    assert max_offset(session.producer, TRANS_CHECK_MAX_TIME_TOPIC, 0) == 2
