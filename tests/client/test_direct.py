"""DirectPuller (client/direct.py) against scripted brokers on real sockets: frames as the
codec frames them, answers matched by opaque when they come out of order, cancelled pulls'
answers dropped, broker errors with their code, timeouts, signing, and when a connection
goes back to the pool."""

from __future__ import annotations

import threading

import pytest

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.client.acl import signature
from rocketmq_spark.errors import BrokerError, RequestTimeout
from rocketmq_spark.remoting.codes import RequestCode
from rocketmq_spark.remoting.command import RemotingCommand
from rocketmq_spark.remoting.message import MessageExt, encode_message
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.structs import PullStatus
from tests.client.fake_server import FakeConn, FakeServer, answer, cluster_info_for, route_for
from tests.waiting import wait_until

BROKER = "broker-a"
Q = MessageQueue("T", BROKER, 1)


def body(offset: int, n: int) -> bytes:
    return b"".join(encode_message(MessageExt(topic="T", body=b"m%d" % i, queue_offset=i, queue_id=1))
                    for i in range(offset, offset + n))


class Broker:
    """Answers pulls (4 messages each) after ``hold`` of them arrived, last first."""

    def __init__(self, hold: int = 1, refuse_at: int | None = None) -> None:
        self.hold, self.refuse_at = hold, refuse_at
        self.pulls: list[RemotingCommand] = []
        self.held: list[RemotingCommand] = []
        self.connections: set[int] = set()
        self.lock = threading.Lock()

    def __call__(self, conn: FakeConn, cmd: RemotingCommand) -> None:
        if cmd.code == RequestCode.GET_ROUTEINFO_BY_TOPIC:
            conn.send(answer(cmd, body=route_for(cmd.ext["topic"], {BROKER: conn.server.address})))
            return
        if cmd.code == RequestCode.GET_BROKER_CLUSTER_INFO:
            conn.send(answer(cmd, body=cluster_info_for({BROKER: conn.server.address})))
            return
        assert cmd.code == RequestCode.PULL_MESSAGE
        with self.lock:
            self.connections.add(id(conn))
            self.pulls.append(cmd)
            self.held.append(cmd)
            if len(self.held) < self.hold:
                return
            batch, self.held = self.held, []
        for c in reversed(batch):                 # out of order on purpose
            offset = int(c.ext["queueOffset"])
            if offset == self.refuse_at:
                conn.send(answer(c, 24, remark="the consumer's group info not exist"))
                continue
            ext = {"nextBeginOffset": str(offset + 4), "minOffset": "0", "maxOffset": "1000",
                   "suggestWhichBrokerId": "0"}
            conn.send(answer(c, 0, ext=ext, remark="FOUND", body=body(offset, 4)))


def client_for(server: FakeServer, **kw) -> MQClient:  # type: ignore[no-untyped-def]
    return MQClient(ClientConfig((server.address,), request_timeout=kw.pop("timeout", 5.0), **kw))


def test_pipelined_pulls_are_matched_by_opaque_and_framed_like_the_codec() -> None:
    broker = Broker(hold=4)
    with FakeServer(broker) as server:
        c = client_for(server)
        try:
            with c.direct_puller(Q) as p:
                pending = [p.pull_async(Q, off, group="g", max_nums=4, decode=False) for off in (0, 4, 8, 12)]
                results = [x.result() for x in pending]
                broker.hold = 1
                decoded = p.pull(Q, 16, group="g", max_nums=4, expression="*")
        finally:
            c.close()
    assert [r.next_begin_offset for r in results] == [4, 8, 12, 16]
    assert all(r.status is PullStatus.FOUND and r.raw_body for r in results)
    assert results[1].raw_body == body(4, 4) and not results[1].messages
    assert [m.queue_offset for m in decoded.messages] == [16, 17, 18, 19] and decoded.raw_body == b""
    # the template writes what the codec would: every field, the offsets asked for
    first = broker.pulls[0].ext
    assert {k: first[k] for k in ("consumerGroup", "topic", "queueId", "queueOffset", "maxMsgNums",
                                  "subscription", "expressionType", "commitOffset", "sysFlag")} == \
        {"consumerGroup": "g", "topic": "T", "queueId": "1", "queueOffset": "0", "maxMsgNums": "4",
         "subscription": "*", "expressionType": "TAG", "commitOffset": "0", "sysFlag": "4"}
    assert len({c.opaque for c in broker.pulls}) == 5 and len(broker.connections) == 1


def test_a_refused_pull_raises_the_broker_code_and_the_connection_is_reused() -> None:
    broker = Broker(refuse_at=8)
    with FakeServer(broker) as server:
        c = client_for(server)
        try:
            with c.direct_puller(Q) as p:
                assert p.pull(Q, 4, group="g", max_nums=4, decode=False).next_begin_offset == 8
                with pytest.raises(BrokerError) as info:
                    p.pull(Q, 8, group="g", max_nums=4, decode=False)
            assert info.value.code == 24 and "group info not exist" in info.value.remark
            with c.direct_puller(Q) as again:               # taken from the pool
                again.pull(Q, 12, group="g", max_nums=4, decode=False)
        finally:
            c.close()
    assert len(broker.connections) == 1


def test_cancelled_pulls_are_dropped_and_a_puller_with_answers_due_is_not_pooled() -> None:
    broker = Broker(hold=3)
    with FakeServer(broker) as server:
        c = client_for(server)
        try:
            with c.direct_puller(Q) as p:
                a = p.pull_async(Q, 0, group="g", max_nums=4, decode=False)
                b = p.pull_async(Q, 4, group="g", max_nums=4, decode=False)
                b.cancel()
                c3 = p.pull_async(Q, 8, group="g", max_nums=4, decode=False)
                assert c3.result().next_begin_offset == 12          # b's answer read and dropped
                assert a.result().next_begin_offset == 4
                p.pull_async(Q, 12, group="g", max_nums=4, decode=False)   # never answered (hold)
            with c.direct_puller(Q) as fresh:
                broker.hold = 1
                assert fresh.pull(Q, 16, group="g", max_nums=4, decode=False).next_begin_offset == 20
        finally:
            c.close()
    assert len(broker.connections) == 2                # the first was closed, not pooled


def test_an_unanswered_pull_times_out_and_breaks_the_connection() -> None:
    with FakeServer(Broker(hold=99)) as server:
        c = client_for(server, timeout=0.3)
        try:
            p = c.direct_puller(Q)
            with pytest.raises(RequestTimeout):
                p.pull(Q, 0, group="g", max_nums=4, decode=False)
            assert p.conn.broken
            p.close()
        finally:
            c.close()


def test_signed_pulls_carry_the_signature() -> None:
    broker = Broker()
    with FakeServer(broker) as server:
        c = client_for(server, access_key="rocketmq2", secret_key="12345678")
        try:
            with c.direct_puller(Q) as p:
                p.pull(Q, 0, group="g", max_nums=4, decode=False)
        finally:
            c.close()
    ext = broker.pulls[0].ext
    assert ext["AccessKey"] == "rocketmq2" and ext["Signature"] == signature(ext, b"", "12345678")


def test_a_pooled_connection_the_broker_closed_is_not_reused() -> None:
    broker = Broker()
    with FakeServer(broker) as server:
        c = client_for(server)
        try:
            with c.direct_puller(Q) as p:
                p.pull(Q, 0, group="g", max_nums=4, decode=False)
            pooled = p.conn
            for conn in list(server.connections):     # the broker drops idle connections
                if conn.sock.getpeername() == pooled.sock.getsockname():
                    conn.close()
            wait_until(lambda: not pooled.alive(60), 5, "the close to reach the client")
            with c.direct_puller(Q) as fresh:
                assert fresh.conn is not pooled
                assert fresh.pull(Q, 4, group="g", max_nums=4, decode=False).next_begin_offset == 8
        finally:
            c.close()
