"""Transport on real sockets: opaque matching, timeouts, reconnects, concurrency, server requests."""

from __future__ import annotations

import socket
import threading
from dataclasses import replace
from concurrent.futures import ThreadPoolExecutor

import pytest

from rocketmq_spark.client.transport import Transport, split_address
from rocketmq_spark.errors import RequestTimeout, TransportError
from rocketmq_spark.remoting.codes import FLAG_ONEWAY, RequestCode, ResponseCode
from rocketmq_spark.remoting.command import RemotingCommand
from tests.client.fake_server import FakeConn, FakeServer, answer, wait_for


def echo(conn: FakeConn, cmd: RemotingCommand) -> None:
    if not cmd.is_response and not cmd.is_oneway:
        conn.send(answer(cmd, body=cmd.body, ext={"echo": cmd.ext.get("n", "")}))


def req(n: int | str = 0, code: int = RequestCode.GET_MAX_OFFSET) -> RemotingCommand:
    return RemotingCommand(code=code, ext_fields={"n": str(n)}, body=f"body-{n}".encode())


@pytest.fixture
def transport():
    t = Transport(connect_timeout=2.0)
    yield t
    t.close()


def test_responses_out_of_order_reach_their_callers(transport: Transport) -> None:
    held: list[tuple[FakeConn, RemotingCommand]] = []
    lock = threading.Lock()

    def hold(conn: FakeConn, cmd: RemotingCommand) -> None:
        with lock:
            held.append((conn, cmd))
            if len(held) == 5:   # answer all, newest first
                for c, r in reversed(held):
                    c.send(answer(r, body=r.body))

    with FakeServer(hold) as server, ThreadPoolExecutor(5) as pool:
        futures = [pool.submit(transport.invoke, server.address, req(i), 5.0) for i in range(5)]
        results = [f.result() for f in futures]
        assert [r.body for r in results] == [f"body-{i}".encode() for i in range(5)]
        assert len({c.opaque for _, c in held}) == 5
        assert [r.opaque for r in results] == [next(c.opaque for _, c in held if c.body == r.body)
                                              for r in results]
        assert len(server.connections) == 1     # one multiplexed connection


def test_timeout_names_the_address_and_a_late_answer_is_dropped(transport: Transport) -> None:
    late: list[tuple[FakeConn, RemotingCommand]] = []

    def handler(conn: FakeConn, cmd: RemotingCommand) -> None:
        if cmd.ext.get("n") == "slow":
            late.append((conn, cmd))
        else:
            echo(conn, cmd)

    with FakeServer(handler) as server:
        with pytest.raises(RequestTimeout) as info:
            transport.invoke(server.address, req("slow"), 0.2)
        assert server.address in str(info.value) and info.value.retriable
        conn, cmd = late[0]
        conn.send(answer(cmd, body=b"too late"))          # nobody waits for it any more
        assert transport.invoke(server.address, req(1), 5.0).body == b"body-1"
        assert len(server.connections) == 1


def test_reconnects_after_the_server_closes(transport: Transport) -> None:
    with FakeServer(echo) as server:
        assert transport.invoke(server.address, req(1), 5.0).body == b"body-1"
        server.close_connections()
        wait_for(lambda: not transport.connected(server.address), what="disconnect noticed")
        assert transport.invoke(server.address, req(2), 5.0).body == b"body-2"
        assert len(server.connections) == 2


def test_pending_call_fails_when_the_server_closes_mid_call(transport: Transport) -> None:
    def close_on_request(conn: FakeConn, cmd: RemotingCommand) -> None:
        if cmd.ext.get("n") == "die":
            conn.close()
        else:
            echo(conn, cmd)

    with FakeServer(close_on_request) as server:
        with pytest.raises(TransportError, match="closed by the peer|broken") as info:
            transport.invoke(server.address, req("die"), 5.0)
        assert not isinstance(info.value, RequestTimeout)
        assert server.address in str(info.value)
        assert transport.invoke(server.address, req(3), 5.0).body == b"body-3"


def test_stale_pooled_connection_is_replaced_on_write_failure(transport: Transport) -> None:
    """A write on a connection the peer reset is retried once on a fresh connection."""
    with FakeServer(echo) as server:
        transport.invoke(server.address, req(1), 5.0)
        conn = transport._conns[server.address]
        conn._sock.shutdown(socket.SHUT_WR)      # our side can no longer write on it
        assert transport.invoke(server.address, req(2), 5.0).body == b"body-2"
        assert len(server.connections) == 2


def test_many_threads_share_one_connection(transport: Transport) -> None:
    with FakeServer(echo) as server, ThreadPoolExecutor(16) as pool:
        def work(t: int) -> list[bytes]:
            return [transport.invoke(server.address, req(f"{t}-{i}"), 10.0).body for i in range(40)]

        results = list(pool.map(work, range(16)))
        assert results == [[f"body-{t}-{i}".encode() for i in range(40)] for t in range(16)]
        assert len(server.connections) == 1
        assert transport.pending_calls(server.address) == 0


def test_oneway_sets_the_flag_and_waits_for_nothing(transport: Transport) -> None:
    with FakeServer() as server:   # never answers
        transport.invoke_oneway(server.address, req(7), 1.0)
        (got,) = server.wait_requests(1)
        assert got.flag & FLAG_ONEWAY and got.ext["n"] == "7"


def test_server_requests_reach_the_handler_and_unknown_ones_are_refused(transport: Transport) -> None:
    seen: list[tuple[str, RemotingCommand]] = []
    done = threading.Event()

    def on_notify(addr: str, cmd: RemotingCommand) -> None:
        seen.append((addr, cmd))
        done.set()

    def on_running_info(addr: str, cmd: RemotingCommand) -> RemotingCommand:
        return RemotingCommand(code=0, body=b"info for " + cmd.ext["consumerGroup"].encode())

    def on_reset(addr: str, cmd: RemotingCommand) -> None:
        raise RuntimeError("cannot reset")

    transport.register_handler(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, on_notify)
    transport.register_handler(RequestCode.GET_CONSUMER_RUNNING_INFO, on_running_info)
    transport.register_handler(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, on_reset)
    with FakeServer(echo) as server:
        transport.invoke(server.address, req(1), 5.0)
        (conn,) = server.connections
        conn.send(RemotingCommand(code=RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, opaque=900,
                                  flag=FLAG_ONEWAY, ext_fields={"consumerGroup": "g1"}, language="JAVA"))
        conn.send(RemotingCommand(code=RequestCode.GET_CONSUMER_RUNNING_INFO, opaque=901,
                                  ext_fields={"consumerGroup": "g2"}, language="JAVA"))
        conn.send(RemotingCommand(code=RequestCode.CHECK_TRANSACTION_STATE, opaque=902, language="JAVA"))
        conn.send(RemotingCommand(code=RequestCode.RESET_CONSUMER_CLIENT_OFFSET, opaque=903, language="JAVA"))
        responses = {}

        def three_answers() -> bool:
            responses.update({r.opaque: r for r in server.requests if r.is_response})
            return len(responses) == 3

        server.wait_until(three_answers)
        assert done.wait(5)
        addr, cmd = seen[0]
        assert addr == server.address and cmd.ext["consumerGroup"] == "g1"
        assert 900 not in responses                       # oneway: no answer
        assert (responses[901].code, responses[901].body) == (0, b"info for g2")
        assert responses[902].code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        assert responses[902].remark == f" request type {RequestCode.CHECK_TRANSACTION_STATE} not supported"
        assert responses[903].code == ResponseCode.SYSTEM_ERROR and "cannot reset" in responses[903].remark
        assert all(r.language == "PYTHON" for r in responses.values())


def test_unknown_oneway_server_request_is_ignored(transport: Transport) -> None:
    with FakeServer(echo) as server:
        transport.invoke(server.address, req(1), 5.0)
        (conn,) = server.connections
        conn.send(RemotingCommand(code=RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, opaque=5,
                                  flag=FLAG_ONEWAY, ext_fields={"consumerGroup": "g"}))
        # the next call still works and the server got nothing but requests
        assert transport.invoke(server.address, req(2), 5.0).body == b"body-2"
        assert not [r for r in server.requests if r.is_response]


def test_connect_refused_names_the_address(transport: Transport) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(TransportError, match=f"cannot connect to 127.0.0.1:{port}"):
        transport.invoke(f"127.0.0.1:{port}", req(), 2.0)


def test_bad_frame_breaks_the_connection_and_fails_the_call(transport: Transport) -> None:
    def garbage(conn: FakeConn, cmd: RemotingCommand) -> None:
        conn.send_frame(b"\x00\x00\x00\x02\x00\x00")       # length 2 < 4: not a frame

    with FakeServer(garbage) as server:
        with pytest.raises(TransportError, match="bad frame from " + server.address):
            transport.invoke(server.address, req(), 5.0)


def test_close_fails_pending_calls_and_refuses_new_ones() -> None:
    t = Transport()
    with FakeServer() as server:
        errors: list[BaseException] = []

        def call() -> None:
            try:
                t.invoke(server.address, req(), 30.0)
            except BaseException as exc:  # noqa: BLE001 - recorded for the assertion
                errors.append(exc)

        th = threading.Thread(target=call)
        th.start()
        server.wait_requests(1)
        t.close()
        th.join(5)
        assert not th.is_alive()
        assert isinstance(errors[0], TransportError) and not isinstance(errors[0], RequestTimeout)
        with pytest.raises(TransportError, match="closed"):
            t.invoke(server.address, req(), 1.0)


def test_rpc_hook_sees_every_request_but_not_answers_to_the_server() -> None:
    t = Transport(rpc_hook=lambda c: replace(c, ext_fields={**(c.ext_fields or {}), "hooked": "1"}))
    t.register_handler(RequestCode.GET_CONSUMER_RUNNING_INFO, lambda a, c: None)
    try:
        with FakeServer(echo) as server:
            t.invoke(server.address, req(1), 5.0)
            t.invoke_oneway(server.address, req(2), 5.0)
            (conn,) = server.connections
            conn.send(RemotingCommand(code=RequestCode.GET_CONSUMER_RUNNING_INFO, opaque=77))
            server.wait_until(lambda: any(r.is_response for r in server.requests))
            reqs = [r for r in server.requests if not r.is_response]
            resp = [r for r in server.requests if r.is_response]
            assert [r.ext["hooked"] for r in reqs] == ["1", "1"]
            assert resp[0].opaque == 77 and resp[0].code == 0 and "hooked" not in resp[0].ext
    finally:
        t.close()


def test_opaques_are_distinct_and_positive() -> None:
    t = Transport()
    try:
        with FakeServer(echo) as server:
            for i in range(3):
                t.invoke(server.address, req(i), 5.0)
            ops = [r.opaque for r in server.requests]
            assert len(set(ops)) == 3 and all(o > 0 for o in ops)
    finally:
        t.close()


@pytest.mark.parametrize("bad", ["nohost", "host:", ":99", "h:0", "h:70000", "h:x"])
def test_split_address_rejects_bad_addresses(bad: str) -> None:
    with pytest.raises(ValueError, match="not host:port"):
        split_address(bad)


def test_split_address_accepts_ipv6_brackets() -> None:
    assert split_address("[::1]:10911") == ("::1", 10911)
