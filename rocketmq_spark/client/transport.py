"""The only client socket code: one multiplexed TCP connection per address (TLS optional).

How it works. ``Transport.invoke(address, cmd, timeout)`` takes the pooled ``Connection``
to ``address`` (opening it on demand), gives the command a fresh opaque, registers a
future under that opaque and writes the frame. Each connection has a reader thread that
feeds a ``FrameDecoder``: a response completes the future holding its opaque (answers
nobody waits for any more, e.g. after a timeout, are dropped); a request from the server
(NOTIFY_CONSUMER_IDS_CHANGED, ...) goes to the handler registered for its code, on a
small executor so a handler may call the server itself; unknown non-oneway requests are
answered REQUEST_CODE_NOT_SUPPORTED. A connection that breaks (peer closed, bad frame,
write error) fails every call pending on it with ``TransportError`` and leaves the pool;
the next call to that address connects again. A call whose write fails on a pooled
connection that turns out to be dead is sent once more on a fresh connection (the server
cannot have seen the whole frame).
"""

from __future__ import annotations

import itertools
import logging
import socket
import ssl
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import replace
from typing import Callable

from rocketmq_spark.client.config import split_address
from rocketmq_spark.errors import ConnectError, ProtocolError, RequestTimeout, TransportError
from rocketmq_spark.remoting.codes import (
    CLIENT_VERSION, FLAG_ONEWAY, FLAG_RESPONSE, ResponseCode)
from rocketmq_spark.remoting.command import FrameDecoder, RemotingCommand, encode, response_to
from rocketmq_spark.tls import TlsStream

log = logging.getLogger(__name__)

# (server address, request) -> the answer, or None for an empty SUCCESS; a oneway
# request's result is ignored.
RequestHandler = Callable[[str, RemotingCommand], "RemotingCommand | None"]
RpcHook = Callable[[RemotingCommand], RemotingCommand]

_READ_CHUNK = 256 * 1024


def local_ipv4() -> bytes:
    """This host's IPv4 address as 4 bytes (127.0.0.1 when none can be found)."""
    candidates: list[str] = []
    try:
        candidates.append(socket.gethostbyname(socket.gethostname()))
    except OSError:
        pass
    try:  # the address a route to the outside would use; sends no packet
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            candidates.append(s.getsockname()[0])
    except OSError:
        pass
    for ip in candidates:
        if not ip.startswith("127."):
            return socket.inet_aton(ip)
    return socket.inet_aton(candidates[0] if candidates else "127.0.0.1")


def open_socket(address: str, *, timeout: float,
                tls: ssl.SSLContext | None = None) -> "socket.socket | TlsStream":
    """A connected socket to ``address`` (TCP_NODELAY), over TLS when ``tls`` is given
    (the handshake done); TransportError naming the address when it cannot be had."""
    host, port = split_address(address)
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise ConnectError(f"cannot connect to {address}: {exc}") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if tls is None:
        return sock
    stream = TlsStream(sock, tls, server_side=False, server_hostname=host)
    try:
        stream.handshake(timeout, address)
    except TransportError:
        sock.close()
        raise
    return stream


class _WriteFailed(TransportError):
    """The frame did not reach the socket (the server cannot have processed it)."""

    def __init__(self, message: str, *, timed_out: bool) -> None:
        super().__init__(message)
        self.timed_out = timed_out


class Connection:
    """One TCP connection: a reader thread, pending calls by opaque, a write lock."""

    def __init__(self, address: str, *, connect_timeout: float, io_timeout: float,
                 on_request: Callable[["Connection", RemotingCommand], None],
                 on_close: Callable[["Connection"], None],
                 tls: ssl.SSLContext | None = None) -> None:
        self.address = address
        self._sock: socket.socket | TlsStream = open_socket(address, timeout=connect_timeout, tls=tls)
        # One timeout for both directions: it bounds sendall; the reader just loops on it.
        self._sock.settimeout(io_timeout)
        self._on_request = on_request
        self._on_close = on_close
        self._lock = threading.Lock()        # _pending, _error
        self._write_lock = threading.Lock()
        self._pending: dict[int, Future[RemotingCommand]] = {}
        self._error: TransportError | None = None
        self._reader = threading.Thread(target=self._read_loop, daemon=True,
                                        name=f"rocketmq-reader-{address}")
        self._reader.start()

    @property
    def closed(self) -> bool:
        return self._error is not None

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def send(self, cmd: RemotingCommand, *, expect_response: bool) -> Future[RemotingCommand] | None:
        frame = encode(cmd)
        fut: Future[RemotingCommand] | None = None
        with self._lock:
            if self._error is not None:
                raise _WriteFailed(f"connection to {self.address} is closed: {self._error}",
                                   timed_out=False)
            if expect_response:
                fut = Future()
                self._pending[cmd.opaque] = fut
        try:
            with self._write_lock:
                self._sock.sendall(frame)
        except OSError as exc:
            timed_out = isinstance(exc, TimeoutError)
            err = _WriteFailed(f"sending to {self.address} failed: {exc}", timed_out=timed_out)
            self._fail(err)
            raise err from None
        return fut

    def forget(self, opaque: int) -> None:
        with self._lock:
            self._pending.pop(opaque, None)

    def close(self, reason: str = "closed by the client") -> None:
        self._fail(TransportError(f"connection to {self.address} {reason}"))

    # ------------------------------------------------------------ reader side

    def _read_loop(self) -> None:
        decoder = FrameDecoder()
        err: TransportError
        try:
            while True:
                try:
                    data = self._sock.recv(_READ_CHUNK)
                except TimeoutError:
                    if self._error is not None:
                        return
                    continue
                if not data:
                    err = TransportError(f"connection to {self.address} closed by the peer")
                    break
                decoder.feed(data)
                for cmd in decoder:
                    self._dispatch(cmd)
        except ProtocolError as exc:
            err = TransportError(f"bad frame from {self.address}: {exc}")
        except OSError as exc:
            err = TransportError(f"connection to {self.address} broken: {exc}")
        except Exception as exc:  # noqa: BLE001 - a reader must never die silently
            log.exception("reader of %s failed", self.address)
            err = TransportError(f"reader of {self.address} failed: {exc!r}")
        self._fail(err)

    def _dispatch(self, cmd: RemotingCommand) -> None:
        if cmd.is_response:
            with self._lock:
                fut = self._pending.pop(cmd.opaque, None)
            if fut is not None and not fut.done():
                fut.set_result(cmd)
            return
        self._on_request(self, cmd)

    def _fail(self, err: TransportError) -> None:
        with self._lock:
            if self._error is not None:
                return
            self._error = err
            pending, self._pending = self._pending, {}
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(err)
        self._on_close(self)


class PendingCall:
    """A request written to a connection, its answer still to come."""

    def __init__(self, fut: "Future[RemotingCommand]", conn: Connection, opaque: int, address: str,
                 code: int, timeout: float, deadline: float) -> None:
        self._fut, self._conn, self._opaque = fut, conn, opaque
        self._address, self._code, self._timeout, self._deadline = address, code, timeout, deadline

    def result(self) -> RemotingCommand:
        try:
            return self._fut.result(timeout=max(self._deadline - time.monotonic(), 0.0))
        except FutureTimeout:
            self._conn.forget(self._opaque)
            raise RequestTimeout(f"no answer from {self._address} to request code {self._code} "
                                 f"within {self._timeout:.3g} s") from None

    def cancel(self) -> None:
        """Nobody wants the answer any more: drop it when it comes."""
        self._conn.forget(self._opaque)


class Transport:
    """A pool of connections, one per address, shared by every thread of the process."""

    def __init__(self, *, connect_timeout: float = 3.0, io_timeout: float = 30.0,
                 rpc_hook: RpcHook | None = None, handler_threads: int = 2,
                 tls: ssl.SSLContext | None = None) -> None:
        self.connect_timeout = connect_timeout
        self.tls = tls                      # every connection speaks TLS when set
        self.io_timeout = io_timeout
        self.rpc_hook = rpc_hook
        self._conns: dict[str, Connection] = {}
        self._connecting: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._handlers: dict[int, RequestHandler] = {}
        self._opaques = itertools.count(1)
        self._opaque_lock = threading.Lock()
        self._executor = ThreadPoolExecutor(max_workers=handler_threads,
                                            thread_name_prefix="rocketmq-server-request")
        self._closed = False

    # ------------------------------------------------------------ calls

    def invoke(self, address: str, cmd: RemotingCommand, timeout: float) -> RemotingCommand:
        """Send ``cmd`` and wait up to ``timeout`` seconds for its answer."""
        return self.submit(address, cmd, timeout).result()

    def submit(self, address: str, cmd: RemotingCommand, timeout: float) -> "PendingCall":
        """Send ``cmd`` now and return at once; ``result()`` waits for the answer until
        ``timeout`` seconds after this call (several calls may be in flight on a connection)."""
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        deadline = time.monotonic() + timeout
        cmd = self._prepare(cmd, oneway=False)
        for attempt in (0, 1):
            conn, fresh = self._connection(address, deadline)
            sent = replace(cmd, opaque=self._next_opaque())
            try:
                fut = conn.send(sent, expect_response=True)
            except _WriteFailed as exc:
                if attempt == 0 and not fresh and not exc.timed_out:
                    continue
                raise TransportError(str(exc)) from None
            assert fut is not None
            return PendingCall(fut, conn, sent.opaque, address, cmd.code, timeout, deadline)
        raise AssertionError("unreachable")

    def invoke_oneway(self, address: str, cmd: RemotingCommand, timeout: float) -> None:
        """Send ``cmd`` with the oneway flag; the server does not answer."""
        deadline = time.monotonic() + timeout
        cmd = self._prepare(cmd, oneway=True)
        for attempt in (0, 1):
            conn, fresh = self._connection(address, deadline)
            try:
                conn.send(replace(cmd, opaque=self._next_opaque()), expect_response=False)
                return
            except _WriteFailed as exc:
                if attempt == 0 and not fresh and not exc.timed_out:
                    continue
                raise TransportError(str(exc)) from None

    def _prepare(self, cmd: RemotingCommand, *, oneway: bool) -> RemotingCommand:
        if self._closed:
            raise TransportError("the client is closed")
        flag = ((cmd.flag | FLAG_ONEWAY) if oneway else (cmd.flag & ~FLAG_ONEWAY)) & ~FLAG_RESPONSE
        if flag != cmd.flag:
            cmd = replace(cmd, flag=flag)
        return self.rpc_hook(cmd) if self.rpc_hook else cmd

    def _next_opaque(self) -> int:
        with self._opaque_lock:
            return next(self._opaques) & 0x7FFFFFFF

    def _connection(self, address: str, deadline: float) -> tuple[Connection, bool]:
        """The pooled connection to ``address``, and whether it was just opened."""
        with self._lock:
            if self._closed:
                raise TransportError("the client is closed")
            conn = self._conns.get(address)
            if conn is not None and not conn.closed:
                return conn, False
            gate = self._connecting.setdefault(address, threading.Lock())
        remaining = deadline - time.monotonic()
        if not gate.acquire(timeout=max(remaining, 0.0)):
            raise RequestTimeout(f"timed out waiting for a connection to {address}")
        try:
            with self._lock:
                conn = self._conns.get(address)
                if conn is not None and not conn.closed:
                    return conn, False
            timeout = max(min(self.connect_timeout, deadline - time.monotonic()), 0.001)
            conn = Connection(address, connect_timeout=timeout, io_timeout=self.io_timeout,
                              on_request=self._on_request, on_close=self._on_close, tls=self.tls)
            with self._lock:
                if self._closed:
                    conn.close()
                    raise TransportError("the client is closed")
                self._conns[address] = conn
            return conn, True
        finally:
            gate.release()

    def _on_close(self, conn: Connection) -> None:
        with self._lock:
            if self._conns.get(conn.address) is conn:
                del self._conns[conn.address]

    # ------------------------------------------------------------ server requests

    def register_handler(self, code: int, handler: RequestHandler | None) -> None:
        """Handle server requests with ``code`` (None removes the handler)."""
        with self._lock:
            if handler is None:
                self._handlers.pop(code, None)
            else:
                self._handlers[code] = handler

    def _on_request(self, conn: Connection, cmd: RemotingCommand) -> None:
        handler = self._handlers.get(cmd.code)
        if handler is None:
            if not cmd.is_oneway:
                self._answer(conn, response_to(
                    cmd, ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                    remark=f" request type {cmd.code} not supported",
                    version=CLIENT_VERSION, language="PYTHON"))
            return
        try:
            self._executor.submit(self._run_handler, conn, handler, cmd)
        except RuntimeError:  # executor shut down: the client is closing
            pass

    def _run_handler(self, conn: Connection, handler: RequestHandler, cmd: RemotingCommand) -> None:
        try:
            answer = handler(conn.address, cmd)
        except Exception as exc:  # noqa: BLE001 - reported to the server, logged here
            log.exception("handler for server request code %s failed", cmd.code)
            answer = response_to(cmd, ResponseCode.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}",
                                 version=CLIENT_VERSION, language="PYTHON")
        if cmd.is_oneway:
            return
        if answer is None:
            answer = response_to(cmd, ResponseCode.SUCCESS, version=CLIENT_VERSION, language="PYTHON")
        self._answer(conn, replace(answer, opaque=cmd.opaque, flag=FLAG_RESPONSE))

    @staticmethod
    def _answer(conn: Connection, answer: RemotingCommand) -> None:
        try:
            conn.send(answer, expect_response=False)
        except TransportError as exc:
            log.debug("could not answer a server request on %s: %s", conn.address, exc)

    # ------------------------------------------------------------ lifecycle

    def pending_calls(self, address: str) -> int:
        """Calls sent to ``address`` and not answered yet (0 without a connection)."""
        with self._lock:
            conn = self._conns.get(address)
        return conn.pending_count if conn is not None else 0

    def connected(self, address: str) -> bool:
        with self._lock:
            conn = self._conns.get(address)
        return conn is not None and not conn.closed

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            conns = list(self._conns.values())
            self._conns.clear()
        for conn in conns:
            conn.close("closed: the client is shutting down")
        self._executor.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> "Transport":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Connection", "RequestHandler", "RpcHook", "Transport", "local_ipv4", "open_socket",
           "split_address"]
