"""DirectPuller (client/direct.py) against scripted brokers on real sockets: frames as the
codec frames them, answers matched by opaque when they come out of order, cancelled pulls'
answers dropped, broker errors with their code, timeouts, signing, and when a connection
goes back to the pool."""

from __future__ import annotations

import array
import json
import struct
import threading
from contextlib import contextmanager
from typing import Iterator

import pyarrow as pa
import pytest

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.client import direct
from rocketmq_spark.client.acl import signature
from rocketmq_spark.errors import BrokerError, RequestTimeout
from rocketmq_spark.remoting.codes import MessageSysFlag, RequestCode
from rocketmq_spark.remoting.command import RemotingCommand
from rocketmq_spark.remoting.compression import Compression
from rocketmq_spark.remoting.message import MessageExt, decode_messages, encode_message
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.sidecar import columnar
from rocketmq_spark.sidecar.arrow import messages_to_batch
from rocketmq_spark.sidecar.columnar import _record_starts
from rocketmq_spark.structs import PullStatus, WalkedBodies
from tests.client.fake_server import FakeConn, FakeServer, answer, cluster_info_for, route_for
from tests.waiting import WaitTimeout, wait_until

BROKER = "broker-a"
Q = MessageQueue("T", BROKER, 1)


# how bodies are stored: as sent, or compressed as a 4.x producer (sysFlag bit 0: zlib) and a
# 5.x one (the codec's type bits too) send them
STORED = ((None, 0), ("zlib", MessageSysFlag.COMPRESSED),
          ("zlib", MessageSysFlag.COMPRESSED | MessageSysFlag.COMPRESSION_ZLIB),
          ("lz4", MessageSysFlag.COMPRESSED | MessageSysFlag.COMPRESSION_LZ4),
          ("zstd", MessageSysFlag.COMPRESSED | MessageSysFlag.COMPRESSION_ZSTD))


def payload(i: int, big_from: int | None = None) -> bytes:
    return b"m%d" % i + (b"x" * 3000 if big_from is not None and i >= big_from else b"")


def body(offset: int, n: int, big_from: int | None = None, compressed: bool = False) -> bytes:
    """The stored records of messages ``offset`` to ``offset + n``; from ``big_from`` on their
    bodies are 3,000 bytes longer; ``compressed``: stored with each codec in turn."""
    out = []
    for i in range(offset, offset + n):
        data, sys_flag = payload(i, big_from), 0
        codec, flag = STORED[i % len(STORED)] if compressed else (None, 0)
        if codec is not None:
            data, sys_flag = Compression(codec).deflate(data), flag
        out.append(encode_message(MessageExt(topic="T", body=data, sys_flag=sys_flag, queue_offset=i, queue_id=1)))
    return b"".join(out)


class Broker:
    """Answers pulls (4 messages each) after ``hold`` of them arrived, last first."""

    def __init__(self, hold: int = 1, refuse_at: int | None = None, short_at: int | None = None,
                 escaped_at: int | None = None, damaged_at: int | None = None,
                 big_from: int | None = None, compressed: bool = False) -> None:
        self.hold, self.refuse_at, self.big_from, self.compressed = hold, refuse_at, big_from, compressed
        self.short_at, self.escaped_at = short_at, escaped_at      # 2 messages; a key with an escape
        self.damaged_at = damaged_at          # a body whose last record says it is longer
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
            n = 2 if offset == self.short_at else 4
            if offset == self.damaged_at:
                data = body(offset, n)[:-1]
                conn.send(answer(c, 0, ext=found_ext(offset, n), remark="FOUND", body=data))
                continue
            if offset != self.escaped_at:
                found(conn, c, n, self.big_from, self.compressed)
                continue
            # valid JSON the compiled scanner leaves to Python
            header = json.dumps({"code": 0, "extFields": found_ext(offset, n), "flag": 1,
                                 "opaque": c.opaque, "remark": "FOUND"}).encode()
            header = header.replace(b'"nextBeginOffset"', rb'"next\u0042eginOffset"')
            data = body(offset, n)
            conn.send_frame(struct.pack(">iI", 4 + len(header) + len(data), len(header)) + header + data)


def found_ext(offset: int, n: int) -> dict[str, str]:
    return {"nextBeginOffset": str(offset + n), "minOffset": "0", "maxOffset": "1000",
            "suggestWhichBrokerId": "0"}


def found(conn: FakeConn, cmd: RemotingCommand, n: int, big_from: int | None = None,
          compressed: bool = False) -> None:
    """A FOUND answer to ``cmd`` with the ``n`` messages from its offset."""
    offset = int(cmd.ext["queueOffset"])
    conn.send(answer(cmd, 0, ext=found_ext(offset, n), remark="FOUND", body=body(offset, n, big_from, compressed)))


def client_for(server: FakeServer, **kw) -> MQClient:  # type: ignore[no-untyped-def]
    return MQClient(ClientConfig((server.address,), request_timeout=kw.pop("timeout", 5.0), **kw))


@contextmanager
def connected(broker: Broker, **kw) -> Iterator[MQClient]:  # type: ignore[no-untyped-def]
    """A client of ``broker`` served by a FakeServer; both closed on exit."""
    with FakeServer(broker) as server:
        c = client_for(server, **kw)
        try:
            yield c
        finally:
            c.close()


def test_pipelined_pulls_are_matched_by_opaque_and_framed_like_the_codec() -> None:
    broker = Broker(hold=4)
    with connected(broker) as c:
        with c.direct_puller(Q) as p:
            pending = [p.pull_async(Q, off, group="g", max_nums=4, decode=False) for off in (0, 4, 8, 12)]
            results = [x.result() for x in pending]
            broker.hold = 1
            decoded = p.pull(Q, 16, group="g", max_nums=4, expression="*")
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
    with connected(broker) as c:
        with c.direct_puller(Q) as p:
            assert p.pull(Q, 4, group="g", max_nums=4, decode=False).next_begin_offset == 8
            with pytest.raises(BrokerError) as info:
                p.pull(Q, 8, group="g", max_nums=4, decode=False)
        assert info.value.code == 24 and "group info not exist" in info.value.remark
        with c.direct_puller(Q) as again:               # taken from the pool
            again.pull(Q, 12, group="g", max_nums=4, decode=False)
    assert len(broker.connections) == 1


def test_cancelled_pulls_are_dropped_and_a_puller_with_answers_due_is_not_pooled() -> None:
    broker = Broker(hold=3)
    with connected(broker) as c:
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
    assert len(broker.connections) == 2                # the first was closed, not pooled


def test_an_unanswered_pull_times_out_and_breaks_the_connection() -> None:
    with connected(Broker(hold=99), timeout=0.3) as c:
        p = c.direct_puller(Q)
        with pytest.raises(RequestTimeout):
            p.pull(Q, 0, group="g", max_nums=4, decode=False)
        assert p.conn.broken
        p.close()


def test_signed_pulls_carry_the_signature() -> None:
    broker = Broker()
    with connected(broker, access_key="rocketmq2", secret_key="12345678") as c:
        with c.direct_puller(Q) as p:
            p.pull(Q, 0, group="g", max_nums=4, decode=False)
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


# ---------------------------------------------------------------- compiled runs (_fastpull.c)

def _run(p, start: int, end: int, *, depth: int = 4, max_rows: int = 1000,  # type: ignore[no-untyped-def]
         max_bytes: int = 1 << 20):
    return p.fast_range(Q, start, end, group="g", expression="*", max_nums=4, stride=4, depth=depth,
                        max_rows=max_rows, max_bytes=max_bytes)


def _data(bodies: list) -> list[bytes]:
    """A run's bodies as bytes: the records at the starts it noted, joined (the caller
    compares them with the bodies the broker sent, in offset order)."""
    out = []
    for b in bodies:
        assert isinstance(b, WalkedBodies) and b.records > 0
        joined = b.joined()
        assert len(_record_starts(joined)) == b.records      # each start a whole record
        out.append(joined)
    return out


def test_the_compiled_pulls_are_built() -> None:
    assert direct._compiled is not None, "pip install . did not build rocketmq_spark/client/_fastpull.c"


def test_a_compiled_run_returns_the_bodies_in_offset_order_and_where_to_go_on() -> None:
    broker = Broker(hold=4)                      # answers four at a time, last first
    with connected(broker) as c:
        with c.direct_puller(Q) as p:
            bodies, resume = _run(p, 0, 34)
            assert resume == 32                    # 34 - 32 < 4: no whole pull left
            assert _run(p, 32, 34) is None
            broker.hold = 1
            assert p.pull(Q, 32, group="g", max_nums=4, decode=False).next_begin_offset == 36
    assert _data(bodies) == [b"".join(body(o, 4) for o in range(0, 32, 4))]    # one after the other
    offsets = [int(cmd.ext["queueOffset"]) for cmd in broker.pulls]
    assert offsets == list(range(0, 36, 4)) and len({cmd.opaque for cmd in broker.pulls}) == 9
    assert {cmd.ext["maxMsgNums"] for cmd in broker.pulls} == {"4"} and len(broker.connections) == 1


@pytest.mark.parametrize("case, resume, delivered", [
    ("refused", 8, [0, 4]),                      # code 24 at 8: the caller's path raises it
    ("short", 10, [0, 4, 8]),                    # 2 messages at 8: delivered, go on at 10
    ("escaped", 8, [0, 4]),                      # a header the scanner does not read
])
def test_a_run_stops_at_the_first_answer_it_does_not_take(case: str, resume: int, delivered: list[int]) -> None:
    broker = Broker(**{{"refused": "refuse_at", "short": "short_at", "escaped": "escaped_at"}[case]: 8})
    with connected(broker) as c:
        with c.direct_puller(Q) as p:
            bodies, got = _run(p, 0, 40)
            # the answers still due were read: the next pull gets its own answer
            after = p.pull(Q, 24, group="g", max_nums=4, decode=False)
    assert got == resume
    assert _data(bodies) == [b"".join(body(o, 2 if case == "short" and o == 8 else 4) for o in delivered)]
    assert after.next_begin_offset == 28


@pytest.mark.parametrize("big_from", [None, 0])
def test_a_compiled_run_of_compressed_bodies_is_decoded_in_c_as_the_per_message_path(big_from: int | None) -> None:
    """Bodies stored with every codec (4.x zlib, 5.x zlib, lz4, zstd) among plain ones: the run
    hands them over walked and the compiled decoder inflates them itself, as the per-message
    decoder does."""
    broker = Broker(hold=4, compressed=True, big_from=big_from)
    with connected(broker) as c:
        with c.direct_puller(Q) as p:
            bodies, resume = _run(p, 0, 32)
    assert resume == 32
    sent = b"".join(body(o, 4, big_from, compressed=True) for o in range(0, 32, 4))
    assert b"".join(_data(bodies)) == sent
    assert {m.sys_flag for m in decode_messages(sent)} == {0, 0x1, 0x301, 0x101, 0x201}
    assert columnar._compiled.decode_parts([b.data for b in bodies], [b.starts for b in bodies]) is not None
    window = columnar.Window(0, 32, broker=BROKER)
    got, last = columnar.decode_parts(bodies, window)
    assert last == 31 and got.column("body").to_pylist() == [payload(i, big_from) for i in range(32)]
    assert got.equals(messages_to_batch(decode_messages(sent), broker=BROKER))
    encoded = columnar.encode_parts(bodies, window, -1, max_rows=100)
    assert encoded is not None and encoded[0] is not None
    assert pa.ipc.read_record_batch(pa.py_buffer(encoded[0].message), columnar.SOURCE_SCHEMA).equals(got)


class Gate(Broker):
    """Holds every pull until the test releases it: shows when the client sends more."""

    def __init__(self) -> None:
        super().__init__(hold=1 << 30)
        self.conn: FakeConn | None = None

    def __call__(self, conn: FakeConn, cmd: RemotingCommand) -> None:
        self.conn = conn
        super().__call__(conn, cmd)

    def release(self, n: int) -> None:
        with self.lock:
            batch, self.held = self.held[:n], self.held[n:]
        assert self.conn is not None
        for c in batch:
            found(self.conn, c, 4)


def test_a_run_sends_more_pulls_once_half_its_pipeline_is_free() -> None:
    broker = Gate()
    with connected(broker) as c:
        with c.direct_puller(Q) as p:
            got: list = []
            t = threading.Thread(target=lambda: got.append(_run(p, 0, 32, depth=4)))
            t.start()
            wait_until(lambda: len(broker.pulls) == 4, 10, "the first 4 pulls")
            broker.release(1)
            # one slot free is not enough: nothing more comes (a window, as absence has no event)
            assert not wait_until_or_none(lambda: len(broker.pulls) > 4, 0.3)
            broker.release(1)
            wait_until(lambda: len(broker.pulls) == 6, 10, "two more pulls, together")
            broker.release(2)
            wait_until(lambda: len(broker.pulls) == 8, 10, "the last two pulls")
            broker.release(4)
            t.join(10)
    assert [int(cmd.ext["queueOffset"]) for cmd in broker.pulls] == list(range(0, 32, 4))
    assert len(got) == 1 and got[0][1] == 32
    assert _data(got[0][0]) == [b"".join(body(o, 4) for o in range(0, 32, 4))]


def wait_until_or_none(pred, timeout: float):  # type: ignore[no-untyped-def]
    try:
        return wait_until(pred, timeout, poll=0.02)
    except WaitTimeout:
        return None


@pytest.mark.parametrize("limit, pulls", [({"max_rows": 8}, 2),
                                          ({"max_bytes": 1, "depth": 3}, 3)])   # then those in flight
def test_a_run_stops_after_about_max_rows_or_max_bytes(limit: dict, pulls: int) -> None:
    broker = Broker()
    with connected(broker) as c:
        with c.direct_puller(Q) as p:
            bodies, resume = _run(p, 0, 1000, **limit)
    assert resume == 4 * pulls and len(broker.pulls) == pulls
    assert _data(bodies) == [b"".join(body(o, 4) for o in range(0, 4 * pulls, 4))]


@pytest.mark.parametrize("big_from", [None, 4, 200])
def test_a_long_run_holds_every_body_whatever_their_sizes(big_from: int | None) -> None:
    # the run reserves room for all its pulls at the first answer, by that answer's size:
    # bodies that grow past that estimate (and runs past the first allocation) must fit too
    broker = Broker(hold=4, big_from=big_from)
    with connected(broker) as c:
        with c.direct_puller(Q) as p:
            bodies, resume = _run(p, 0, 400, depth=8, max_bytes=64 << 20)
    assert resume == 400
    assert _data(bodies) == [b"".join(body(o, 4, big_from) for o in range(0, 400, 4))]


def test_a_run_with_a_record_that_does_not_fit_hands_its_bytes_back_unwalked() -> None:
    broker = Broker(damaged_at=8)         # the decoder walks them and reports the size
    with connected(broker) as c:
        with c.direct_puller(Q) as p:
            bodies, resume = _run(p, 0, 16)
    assert resume == 16
    assert bodies == [body(0, 4) + body(4, 4) + body(8, 4)[:-1] + body(12, 4)]


def test_an_unanswered_run_times_out_and_breaks_the_connection() -> None:
    with connected(Broker(hold=99), timeout=0.3) as c:
        p = c.direct_puller(Q)
        with pytest.raises(RequestTimeout):
            _run(p, 0, 16)
        assert p.conn.broken
        p.close()


@pytest.mark.parametrize("broker_kw", [{}, {"short_at": 8}, {"escaped_at": 12}, {"hold": 4}])
def test_a_range_reads_the_same_with_and_without_compiled_runs(broker_kw: dict,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from rocketmq_spark.sidecar.model import PullSpec
    from rocketmq_spark.sidecar.pull import PullPolicy, read_range

    def read() -> bytes:            # a compiled run's bodies come as one: compare the stored records
        with connected(Broker(**broker_kw)) as c:
            with c.direct_puller(Q) as p:
                return b"".join(read_range(p, PullSpec(Q, 0, 48, group="g", pull_batch_size=4),
                                           PullPolicy(pipeline_depth=4)))

    compiled = read()
    monkeypatch.setattr(direct, "_compiled", None)
    assert compiled == read() and compiled.count(b"m47") == 1
