"""The gRPC layer over a real in-process server: conversions, error mapping, activity.

The client behind the service is an in-memory stand-in here (the mapping is what is under
test); test_e2e_embedded.py runs the same RPCs against the embedded cluster."""

from __future__ import annotations

import threading
from typing import Iterator

import grpc
import pytest

from rocketmq_spark.errors import (BrokerError, ConfigError, RemoteProtocolError, RequestTimeout,
                                   TransportError)
from rocketmq_spark.sidecar.client import SidecarClient, channel_for
from rocketmq_spark.sidecar.errors import DataLossError, SidecarError
from rocketmq_spark.sidecar.server import SidecarServer
from rocketmq_spark.sidecar.service import SidecarService
from rocketmq_spark.sidecar.v1 import sidecar_pb2 as pb
from rocketmq_spark.sidecar.v1 import sidecar_pb2_grpc as pb_grpc
from rocketmq_spark.structs import PullResult, PullStatus
from tests.sidecar.fakes import Q, FakeQueue, make_messages


class Raising:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __getattr__(self, name: str):
        def fail(*a, **kw):
            raise self.exc
        return fail

    def close(self) -> None:
        pass


class QueueClient:
    def __init__(self, fq: FakeQueue) -> None:
        self.fq = fq

    def pull(self, *a, **kw):
        return self.fq.pull(*a, **kw)

    def close(self) -> None:
        pass


@pytest.fixture()
def sidecar() -> Iterator[tuple[SidecarServer, dict]]:
    clients: dict[str, object] = {}
    service = SidecarService(client_factory=lambda c: clients[c.name_server])
    server = SidecarServer("127.0.0.1:0", service=service)
    try:
        yield server, clients
    finally:
        server.stop(grace=0)


def raw_error(server: SidecarServer, call: str, request) -> grpc.RpcError:
    stub = pb_grpc.SidecarStub(channel_for(server.address))
    with pytest.raises(grpc.RpcError) as e:
        result = getattr(stub, call)(request, timeout=10)
        if call == "Pull":
            list(result)
    return e.value


def cluster(name: str) -> pb.Cluster:
    return pb.Cluster(name_server=name)


@pytest.mark.parametrize("exc,status,cls", [
    (BrokerError(17, "topic[x] not exist, apply first please!"), grpc.StatusCode.NOT_FOUND, BrokerError),
    (BrokerError(1, "look message by offset failed, 5"), grpc.StatusCode.UNAVAILABLE, BrokerError),
    (BrokerError(16, "no permission"), grpc.StatusCode.PERMISSION_DENIED, BrokerError),
    (BrokerError(206, "the consumer group[g] not online"), grpc.StatusCode.FAILED_PRECONDITION, BrokerError),
    (TransportError("connect to 10.0.0.1:10911 refused"), grpc.StatusCode.UNAVAILABLE, TransportError),
    (RequestTimeout("no answer within 3 s"), grpc.StatusCode.DEADLINE_EXCEEDED, RequestTimeout),
    (RemoteProtocolError("bad magic code"), grpc.StatusCode.INTERNAL, RemoteProtocolError),
    (RuntimeError("a bug"), grpc.StatusCode.INTERNAL, SidecarError),
])
def test_error_mapping(sidecar, exc, status, cls) -> None:
    server, clients = sidecar
    clients["ns:1"] = Raising(exc)
    err = raw_error(server, "GetQueues", pb.GetQueuesRequest(cluster=cluster("ns:1"), topics=["x"]))
    assert err.code() == status
    client = SidecarClient(server.address)
    with pytest.raises(cls) as e:
        client.get_queues("ns:1", ["x"])
    if isinstance(exc, BrokerError):
        assert err.details() == f"BrokerError code={exc.code} {exc.args[0].split(' (')[0]}: {exc.remark}"
        assert (e.value.code, e.value.remark, e.value.retriable) == (exc.code, exc.remark, exc.retriable)
    else:
        assert str(exc) in str(e.value)


def test_non_ascii_remark_survives(sidecar) -> None:
    server, clients = sidecar
    clients["ns:1"] = Raising(BrokerError(17, "主题 [x] 不存在"))
    with pytest.raises(BrokerError) as e:
        SidecarClient(server.address).get_offsets("ns:1", [Q])
    assert e.value.remark == "主题 [x] 不存在"


def test_bad_requests_are_invalid_argument(sidecar) -> None:
    server, clients = sidecar
    err = raw_error(server, "GetQueues", pb.GetQueuesRequest(cluster=cluster(""), topics=["x"]))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "name_server" in err.details()
    clients["ns:1"] = QueueClient(FakeQueue(make_messages(3)))
    bad_queue = pb.PullRequest(cluster=cluster("ns:1"), queue=pb.MessageQueue(topic="t"), end_offset=1)
    err = raw_error(server, "Pull", bad_queue)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "broker_name=''" in err.details()
    backwards = pb.PullRequest(cluster=cluster("ns:1"), queue=pb.MessageQueue(
        topic="orders", broker_name="broker-a", queue_id=0), start_offset=5, end_offset=2)
    err = raw_error(server, "Pull", backwards)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "[5, 2)" in err.details()
    with pytest.raises(ConfigError, match="consumer_group is empty"):
        SidecarClient(server.address).commit_offsets("ns:1", "", {Q: 1})


def test_pull_streams_rows_and_maps_data_loss(sidecar) -> None:
    server, clients = sidecar
    clients["ns:1"] = QueueClient(FakeQueue(make_messages(50), min_offset=10))
    client = SidecarClient(server.address)
    batches = list(client.pull_batches("ns:1", Q, 12, 45, pull_batch_size=8, max_rows_per_batch=10))
    assert [b.num_rows for b in batches] == [8, 8, 8, 9]   # whole pulls of 8, up to 10 rows a batch
    rows = [r for b in batches for r in b.to_pylist()]
    assert [r["queue_offset"] for r in rows] == list(range(12, 45))
    assert [r["body"] for r in rows[:2]] == [b"m12", b"m13"]

    err = raw_error(server, "Pull", pb.PullRequest(
        cluster=cluster("ns:1"), queue=pb.MessageQueue(topic="orders", broker_name="broker-a"),
        start_offset=2, end_offset=20, fail_on_data_loss=True))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "orders/broker-a/0" in err.details() and "[2, 10)" in err.details()
    with pytest.raises(DataLossError, match=r"\[2, 10\)"):
        list(client.pull_batches("ns:1", Q, 2, 20, fail_on_data_loss=True))
    with pytest.raises(DataLossError) as e:
        list(client.pull_batches("ns:1", Q, 60, 70))
    assert e.value.beyond_max
    skipped = list(client.pull_batches("ns:1", Q, 2, 20, fail_on_data_loss=False))
    assert [r["queue_offset"] for b in skipped for r in b.to_pylist()] == list(range(10, 20))


class Gate:
    """A client whose pull blocks until released (to hold a Pull stream open)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fq = FakeQueue(make_messages(3))

    def pull(self, *a, **kw) -> PullResult:
        self.entered.set()
        if not self.release.wait(10):
            return PullResult(PullStatus.OFFSET_ILLEGAL, 0, 0, 0)
        return self.fq.pull(*a, **kw)

    def close(self) -> None:
        pass


def test_a_running_stream_counts_as_in_flight(sidecar) -> None:
    server, clients = sidecar
    gate = clients["ns:1"] = Gate()
    client = SidecarClient(server.address)
    result: list[int] = []
    t = threading.Thread(target=lambda: result.extend(
        r["queue_offset"] for b in client.pull_batches("ns:1", Q, 0, 3) for r in b.to_pylist()))
    t.start()
    assert gate.entered.wait(10)
    assert server.activity.in_flight == 1 and server.activity.idle_for() == 0.0
    gate.release.set()
    t.join(10)
    assert result == [0, 1, 2]
    assert wait_until(lambda: server.activity.in_flight == 0)
    assert server.activity.idle_for() >= 0.0


def wait_until(pred, timeout: float = 10.0) -> bool:
    import time
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


def test_health(sidecar) -> None:
    import os

    import rocketmq_spark
    server, _ = sidecar
    h = SidecarClient(server.address).health()
    assert (h.version, h.api, h.pid) == (rocketmq_spark.__version__, "v1", os.getpid())
    assert h.uptime_ms >= 0


def test_unreachable_name_server_is_unavailable() -> None:
    """The real client against a closed port: TransportError -> UNAVAILABLE -> TransportError."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    server = SidecarServer("127.0.0.1:0")
    try:
        err = raw_error(server, "GetQueues", pb.GetQueuesRequest(
            cluster=cluster(f"127.0.0.1:{port}"), topics=["t"]))
        assert err.code() == grpc.StatusCode.UNAVAILABLE and str(port) in err.details()
        with pytest.raises(TransportError, match=str(port)):
            SidecarClient(server.address).get_queues(f"127.0.0.1:{port}", ["t"])
    finally:
        server.stop(grace=0)


def test_closing_the_reader_stops_the_pulls(sidecar) -> None:
    server, clients = sidecar
    from dataclasses import replace

    big = b"x" * 10_000
    fq = FakeQueue([replace(m, body=big) for m in make_messages(20000)])   # 200 MB in all
    clients["ns:1"] = QueueClient(fq)
    batches = SidecarClient(server.address).pull_batches("ns:1", Q, 0, 20000, pull_batch_size=8,
                                                         max_rows_per_batch=8)
    assert next(batches).num_rows == 8
    batches.close()
    assert wait_until(lambda: server.activity.in_flight == 0)
    calls = len(fq.calls)
    # flow control lets the server run ahead by a few MB, not by the whole range
    assert calls < 1000, f"{calls} of 2500 pulls although the reader went away after one batch"
