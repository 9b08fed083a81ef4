"""Golden tests over the real Apache brokers' transactional exchanges
(tests/data/vectors/apache-broker-txn: 4.9.8, apache-broker-txn-5.5: 5.5.0, the same
requests): our client frames half sends and END_TRANSACTION
as the Java client does, reads every answer the broker gave (the error codes and remarks
intact), and answers a recorded check-back with the fields the broker needs echoed."""

from __future__ import annotations

import threading

import pytest

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.errors import BrokerError, RequestTimeout
from rocketmq_spark.remoting import command
from rocketmq_spark.remoting.codes import MessageSysFlag, RequestCode, TransactionState
from rocketmq_spark.remoting.command import RemotingCommand
from rocketmq_spark.remoting.headers import (CheckTransactionStateRequestHeader, EndTransactionRequestHeader,
                                            SendMessageRequestHeader)
from rocketmq_spark.remoting.message import decode_message, decode_properties
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.structs import HalfMessage, Message
from tests.client.fake_server import FakeConn, FakeServer, answer, cluster_info_for, replay_frame, route_for
from tests.vectors import txn_broker_vectors

RELEASES = txn_broker_vectors()
V = {f"{release}/{name}": v for release, vectors in RELEASES.items() for name, v in vectors.items()}
BROKER = "broker-a"
HALF_SENDS = sorted(n for n, v in V.items() if v["name"].startswith("txn_send_half"))
END_ANSWERED = sorted(n for n, v in V.items() if v["request"]["code"] == RequestCode.END_TRANSACTION
                      and v["response"] is not None)


class Replay:
    """Answers ``code`` with the recorded frame; routes every topic to this server."""

    def __init__(self, v: dict) -> None:
        self.code = v["request"]["code"]
        self.frame = bytes.fromhex(v["response"]["frame_hex"]) if v["response"] else None
        self.calls: list[RemotingCommand] = []

    def __call__(self, conn: FakeConn, cmd: RemotingCommand) -> None:
        addr = conn.server.address
        if cmd.code == self.code:
            self.calls.append(cmd)
            if self.frame is not None and not cmd.is_oneway:
                conn.send_frame(replay_frame(self.frame, cmd.opaque))
        elif cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            conn.send(answer(cmd, body=route_for(cmd.ext["topic"], {BROKER: addr})))
        elif cmd.code == RequestCode.GET_BROKER_CLUSTER_INFO:
            conn.send(answer(cmd, body=cluster_info_for({BROKER: addr})))
        elif not cmd.is_oneway:
            conn.send(answer(cmd, 3, remark=f"not scripted: {cmd.code}"))


def client_for(server: FakeServer, timeout: float = 5.0) -> MQClient:
    return MQClient(ClientConfig((server.address,), request_timeout=timeout))


@pytest.mark.parametrize("name", HALF_SENDS)
def test_half_send_is_framed_as_the_java_client_frames_it(name: str) -> None:
    v = V[name]
    rec = SendMessageRequestHeader.from_v2(v["request"]["header"]["extFields"])
    props = dict(v["request"]["decoded_properties"])
    group = props.pop("PGROUP")
    props.pop("TRAN_MSG"), props.pop("WAIT")
    msg = Message(rec.topic, b"half", tags=props.pop("TAGS"), keys=props.pop("KEYS"), properties=props)
    replay = Replay(v)
    with FakeServer(replay) as server:
        c = client_for(server)
        try:
            q = MessageQueue(rec.topic, BROKER, rec.queue_id)
            result = c.send_async(msg, queue=q, producer_group=group, transactional=True).result()
        finally:
            c.close()
    sent = replay.calls[0]
    header = SendMessageRequestHeader.from_v2(sent.ext)
    sent_props = decode_properties(header.properties or "")
    assert header.sys_flag & MessageSysFlag.TRANSACTION_MASK == MessageSysFlag.TRANSACTION_PREPARED_TYPE
    assert (sent_props["TRAN_MSG"], sent_props["PGROUP"], header.producer_group) == ("true", group, group)
    assert sent_props["UNIQ_KEY"] == v["request"]["decoded_properties"]["UNIQ_KEY"]
    # the answer names the half message: offset id -> commit-log offset, half-queue offset
    ext = v["response"]["extFields"]
    half = HalfMessage.of(result)
    assert half.tran_state_table_offset == int(ext["queueOffset"])
    assert half.commit_log_offset == int(ext["msgId"][-16:], 16)
    assert half.queue == MessageQueue(rec.topic, BROKER, int(ext["queueId"]))


def _half_of(v: dict) -> tuple[HalfMessage, EndTransactionRequestHeader]:
    h = EndTransactionRequestHeader.from_ext(v["request"]["header"]["extFields"])
    return HalfMessage(MessageQueue("T", BROKER, 0), h.commit_log_offset, h.tran_state_table_offset, h.msg_id), h


@pytest.mark.parametrize("name", END_ANSWERED)
def test_end_transaction_answers_are_read_with_code_and_remark(name: str) -> None:
    v = V[name]
    half, rec = _half_of(v)
    replay = Replay(v)
    with FakeServer(replay) as server:
        c = client_for(server)
        try:
            if rec.commit_or_rollback not in (0, 8, 12):   # the broker refuses it; we never send it
                with pytest.raises(ValueError, match=f"transaction state {rec.commit_or_rollback} is not"):
                    c.end_transaction(half, rec.commit_or_rollback, producer_group=rec.producer_group)
                assert v["response"]["code"] == 1 and "commitOrRollback field wrong" in v["response"]["remark"]
                return
            call = c.end_transaction(half, rec.commit_or_rollback, producer_group=rec.producer_group,
                                     address=server.address)
            assert call is not None
            if v["response"]["code"] == 0:
                c.check_end_transaction(call, server.address)
            else:
                with pytest.raises(BrokerError) as info:
                    c.check_end_transaction(call, server.address)
                assert (info.value.code, info.value.remark) == (v["response"]["code"], v["response"]["remark"])
        finally:
            c.close()
    sent = EndTransactionRequestHeader.from_ext(replay.calls[0].ext)
    assert (sent.producer_group, sent.commit_log_offset, sent.tran_state_table_offset, sent.commit_or_rollback,
            sent.msg_id, sent.from_transaction_check, sent.bname) == \
        (rec.producer_group, rec.commit_log_offset, rec.tran_state_table_offset, rec.commit_or_rollback,
         rec.msg_id, False, BROKER)
    assert not replay.calls[0].is_oneway


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_an_unknown_end_transaction_gets_no_answer(release: str) -> None:
    """commitOrRollback 0 outside a check: Apache answers nothing, even to a request."""
    v = RELEASES[release]["txn_end_unknown_not_from_check"]
    assert v["response"] is None
    half, rec = _half_of(v)
    with FakeServer(Replay(v)) as server:
        c = client_for(server, timeout=0.3)
        try:
            call = c.end_transaction(half, TransactionState.UNKNOWN, producer_group=rec.producer_group,
                                     address=server.address)
            with pytest.raises(RequestTimeout):
                c.check_end_transaction(call, server.address)   # type: ignore[arg-type]
        finally:
            c.close()


@pytest.mark.parametrize("release", sorted(RELEASES))
def test_a_recorded_check_back_is_answered_with_the_copy_s_offsets(release: str) -> None:
    """The broker's CHECK_TRANSACTION_STATE arrives on our connection; the answer echoes the
    offsets of the copy it names (not the original send's) as the Java client's does."""
    v = RELEASES[release]["txn_check_back_commit"]
    (seen,) = v["server_requests_seen"]
    check_frame = bytes.fromhex(seen["frame_hex"])
    check_cmd, _ = command.decode(check_frame)
    got: list[RemotingCommand] = []
    arrived = threading.Event()

    def broker(conn: FakeConn, cmd: RemotingCommand) -> None:
        if cmd.code == RequestCode.HEART_BEAT:
            conn.send(answer(cmd))
            conn.send_frame(check_frame)           # the check rides the producer's connection
        elif cmd.code == RequestCode.END_TRANSACTION:
            got.append(cmd)
            arrived.set()
        elif cmd.code == RequestCode.GET_BROKER_CLUSTER_INFO:
            conn.send(answer(cmd, body=cluster_info_for({BROKER: conn.server.address})))

    with FakeServer(broker) as server:
        c = client_for(server)

        def on_check(address: str, cmd: RemotingCommand) -> None:
            h = CheckTransactionStateRequestHeader.from_ext(cmd.ext)
            half, _ = decode_message(cmd.body)
            c.end_transaction(HalfMessage(MessageQueue(half.topic, BROKER, half.queue_id), h.commit_log_offset,
                                          h.tran_state_table_offset, h.msg_id or ""),
                              TransactionState.COMMIT, producer_group=half.properties["PGROUP"],
                              from_check=True, transaction_id=h.transaction_id, oneway=True,
                              address=address)

        try:
            c.set_request_handler(RequestCode.CHECK_TRANSACTION_STATE, on_check)
            c.heartbeat(producer_groups=["g"], addresses=[server.address])
            assert arrived.wait(5)
        finally:
            c.close()
    sent = EndTransactionRequestHeader.from_ext(got[0].ext)
    recorded = EndTransactionRequestHeader.from_ext(v["request"]["header"]["extFields"])
    assert got[0].is_oneway
    assert (sent.commit_log_offset, sent.tran_state_table_offset, sent.msg_id, sent.transaction_id,
            sent.from_transaction_check, sent.commit_or_rollback, sent.producer_group, sent.bname) == \
        (recorded.commit_log_offset, recorded.tran_state_table_offset, recorded.msg_id,
         recorded.transaction_id, True, TransactionState.COMMIT, recorded.producer_group, None)
    assert int(check_cmd.ext["commitLogOffset"]) == sent.commit_log_offset
