"""A scriptable remoting server on a real TCP socket (127.0.0.1, port 0) for client tests.

``FakeServer(handler)`` accepts connections; every frame a client sends is decoded and
passed, with the connection, to ``handler(conn, cmd)`` on that connection's reader
thread. The handler answers with ``conn.send(cmd)`` / ``conn.send_frame(bytes)``, now or
later, or not at all. ``replay_frame`` turns a recorded answer frame into the same bytes
with another opaque, so a test can replay what a real broker sent.
"""

from __future__ import annotations

import re
import socket
import struct
import threading
import time
from typing import Callable

from rocketmq_spark.remoting.codes import FLAG_RESPONSE, SERIALIZE_JSON, SERIALIZE_ROCKETMQ
from rocketmq_spark.remoting.command import FrameDecoder, RemotingCommand, encode

Handler = Callable[["FakeConn", RemotingCommand], None]
_OPAQUE_JSON = re.compile(rb'(?<!\\)"opaque":-?\d+')


def replay_frame(frame: bytes, opaque: int) -> bytes:
    """``frame`` (a whole recorded frame, length prefix included) with ``opaque`` put in
    place of the recorded one; every other byte is kept."""
    (length,) = struct.unpack_from(">i", frame, 0)
    (word,) = struct.unpack_from(">I", frame, 4)
    stype, hlen = word >> 24, word & 0xFFFFFF
    header, body = frame[8:8 + hlen], frame[8 + hlen:4 + length]
    if stype == SERIALIZE_JSON:
        header, n = _OPAQUE_JSON.subn(b'"opaque":%d' % opaque, header, count=1)
        assert n == 1, "recorded JSON header has no opaque"
    elif stype == SERIALIZE_ROCKETMQ:
        header = header[:5] + struct.pack(">i", opaque) + header[9:]
    else:
        raise ValueError(f"serialization type {stype}")
    return struct.pack(">iI", 4 + len(header) + len(body), (stype << 24) | len(header)) + header + body


def answer(request: RemotingCommand, code: int = 0, *, ext: dict[str, str] | None = None,
           body: bytes = b"", remark: str | None = None) -> RemotingCommand:
    return RemotingCommand(code=code, opaque=request.opaque, flag=FLAG_RESPONSE, ext_fields=ext,
                           remark=remark, body=body, language="JAVA", version=409)


class FakeConn:
    def __init__(self, server: "FakeServer", sock: socket.socket) -> None:
        self.server = server
        self.sock = sock
        self._wlock = threading.Lock()
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def send_frame(self, frame: bytes) -> None:
        with self._wlock:
            try:
                self.sock.sendall(frame)
            except OSError:
                if not self.closed.is_set():
                    raise

    def send(self, cmd: RemotingCommand) -> None:
        self.send_frame(encode(cmd))

    def close(self) -> None:
        self.closed.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def _read(self) -> None:
        dec = FrameDecoder()
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    break
                dec.feed(data)
                for cmd in dec:
                    self.server._received(self, cmd)
        except OSError:
            pass
        finally:
            self.closed.set()


class FakeServer:
    def __init__(self, handler: Handler | None = None) -> None:
        self.handler = handler
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.requests: list[RemotingCommand] = []
        self.connections: list[FakeConn] = []
        self._cond = threading.Condition()
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._sock.accept()
            except OSError:
                return
            with self._cond:
                if self._stopped:
                    sock.close()
                    return
                self.connections.append(FakeConn(self, sock))
                self._cond.notify_all()

    def _received(self, conn: FakeConn, cmd: RemotingCommand) -> None:
        with self._cond:
            self.requests.append(cmd)
            self._cond.notify_all()
        if self.handler is not None:
            self.handler(conn, cmd)

    def wait_until(self, predicate: Callable[[], bool], timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("condition not reached in time")
                self._cond.wait(left)

    def wait_requests(self, n: int, timeout: float = 5.0) -> list[RemotingCommand]:
        self.wait_until(lambda: len(self.requests) >= n, timeout)
        return list(self.requests)

    def requests_with(self, code: int) -> list[RemotingCommand]:
        with self._cond:
            return [r for r in self.requests if r.code == code]

    def close_connections(self) -> None:
        with self._cond:
            conns = list(self.connections)
        for c in conns:
            c.close()

    def close(self) -> None:
        with self._cond:
            self._stopped = True
        self._sock.close()
        self.close_connections()

    def __enter__(self) -> "FakeServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def wait_for(predicate: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    """Poll a condition that no server event signals (e.g. a client-side state)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout} s")
        time.sleep(0.005)


# ---------------------------------------------------------------- a one-broker world

def route_for(topic: str, brokers: dict[str, str], queues: int = 4, perm: int = 6) -> bytes:
    """Standard route JSON: each broker name -> master address, ``queues`` queues each."""
    from rocketmq_spark.remoting.route import BrokerData, QueueData, TopicRouteData, encode_route

    return encode_route(TopicRouteData(
        tuple(QueueData(name, queues, queues, perm) for name in sorted(brokers)),
        tuple(BrokerData("DefaultCluster", name, {0: addr}) for name, addr in sorted(brokers.items()))))


def cluster_info_for(brokers: dict[str, str]) -> bytes:
    """GET_BROKER_CLUSTER_INFO body, with fastjson's bare integer keys."""
    table = ",".join(f'"{n}":{{"brokerAddrs":{{0:"{a}"}},"brokerName":"{n}","cluster":"DefaultCluster"}}'
                     for n, a in sorted(brokers.items()))
    names = ",".join(f'"{n}"' for n in sorted(brokers))
    return ('{"brokerAddrTable":{%s},"clusterAddrTable":{"DefaultCluster":[%s]}}' % (table, names)).encode()
