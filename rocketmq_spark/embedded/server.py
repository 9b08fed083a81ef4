"""The remoting server: TCP listener, one reader and one writer thread per connection.

How this works. The reader thread decodes frames (``remoting.command.FrameDecoder``) and
hands each request to the handler on that thread (a server given a ``FrameHandler`` offers
it each frame undecoded first: it answers the frames it knows how to, the broker its plain
pulls); handlers answer at once or later (a
held pull, a send waiting for fsync) through ``Connection.send``, which only queues the
frame: the connection's writer thread does the socket writes, so no handler, flusher or
timer ever blocks on a slow peer, and a held request never blocks other connections. The
answers to the requests of one read are written by the reader itself once they are all
handled, as far as the socket takes them without waiting (one write, no hand-over to the
writer thread: pipelined pulls are answered together); what the socket does not take, and
everything sent from other threads, goes through the writer. Only one thread writes at a
time, and it takes the queued frames in order, so answers keep their order.
A frame that cannot be decoded (over 16 MiB, bad header, unknown serialization) closes
that connection only; queued answers are written first. With TLS (``ServerTls``: Apache's
tlsMode ``enforcing`` or ``permissive``) the reader thread runs the handshake before the
first frame; a failed handshake closes that connection only.
"""

from __future__ import annotations

import ipaddress
import itertools
import logging
import select
import socket
import threading
import time
from collections import deque
from typing import Callable

from rocketmq_spark.errors import LocalProtocolError, RemoteProtocolError
from rocketmq_spark.remoting.command import FrameDecoder, RemotingCommand, decode_frame, encode
from rocketmq_spark.remoting.message import HostPort
from rocketmq_spark.tls import Mode, ServerTls, TlsError, TlsStream, server_stream

log = logging.getLogger(__name__)

_ids = itertools.count(1)
RECV_SIZE = 256 * 1024
HANDSHAKE_TIMEOUT = 10.0     # seconds a new connection has to finish its TLS handshake
_HUNG_UP = getattr(select, "POLLRDHUP", 0x2000) | select.POLLHUP | select.POLLERR

Handler = Callable[["Connection", RemotingCommand], None]
# Answers one whole undecoded frame itself (True), or leaves it to the Handler (False).
FrameHandler = Callable[["Connection", bytes], bool]


def advertised_ip(host: str, advertised: str | None = None) -> str:
    """The IP address to publish for a listener on ``host``: clients must be able to reach
    it and stored messages carry it (STOREHOST), so never a wildcard or a host name."""
    name = advertised or host
    if name in ("0.0.0.0", "", "::"):
        return "127.0.0.1"
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        return socket.gethostbyname(name)


class Connection:
    """One accepted TCP connection. ``send`` is thread-safe and never blocks."""

    def __init__(self, sock: socket.socket, server: "RemotingServer") -> None:
        self.id = next(_ids)
        self.sock = sock
        self.stream: socket.socket | TlsStream = sock     # what frames are read from and written to
        self.server = server
        host, port = sock.getpeername()[:2]
        self.remote = HostPort(host, port)
        self.remote_addr = str(self.remote)
        self.last_read = time.monotonic()
        self.closed = threading.Event()
        self._out: deque[bytes] = deque()
        self._cond = threading.Condition()
        self._writing = threading.Lock()      # held by whichever thread writes to the socket
        self._held_by_reader = False          # the reader is handling a read: it writes after
        self._close_notified = False
        self._reader = threading.Thread(target=self._read_loop, name=f"{server.name}-r{self.id}", daemon=True)
        self._writer = threading.Thread(target=self._write_loop, name=f"{server.name}-w{self.id}", daemon=True)

    def __repr__(self) -> str:
        return f"<Connection {self.id} {self.remote_addr} on {self.server.name}>"

    def start(self) -> None:
        self._writer.start()
        self._reader.start()

    def send(self, cmd: RemotingCommand) -> bool:
        """Queue ``cmd`` for writing; False when the connection is closed."""
        try:
            frame = encode(cmd)
        except LocalProtocolError as exc:
            log.error("%r: cannot encode an answer to code %d: %s", self, cmd.code, exc)
            return False
        return self.send_frame(frame)

    def send_frame(self, frame: bytes) -> bool:
        """Queue an encoded frame (length prefix included) for writing, as ``send``."""
        with self._cond:
            if self.closed.is_set():
                return False
            self._out.append(frame)
            if not (self._held_by_reader and threading.current_thread() is self._reader):
                self._cond.notify()
        return True

    def peer_gone(self) -> bool:
        """Closed, or the peer hung up (seen on the socket without reading it: a reader held
        by a gate never reads the end of the stream)."""
        if self.closed.is_set():
            return True
        poller = select.poll()
        poller.register(self.sock, _HUNG_UP)
        try:
            return bool(poller.poll(0))
        except (OSError, ValueError):
            return True

    def close(self, reason: str | None = None) -> None:
        """Stop reading; frames already queued are written, then the socket closes."""
        with self._cond:
            if self.closed.is_set():
                return
            self.closed.set()
            self._cond.notify()
        if reason:
            log.info("%r closed: %s", self, reason)
        try:
            self.sock.shutdown(socket.SHUT_RD)
        except OSError:
            pass

    def _read_loop(self) -> None:
        decoder = FrameDecoder()
        frames = self.server.frame_handler
        reason = "peer closed the connection"
        try:
            if self.server.tls is not None:
                assert self.server.tls_context is not None
                self.stream = server_stream(self.sock, self.server.tls, self.server.tls_context,
                                            HANDSHAKE_TIMEOUT, self.remote_addr)
            while not self.closed.is_set():
                data = self.stream.recv(RECV_SIZE)
                if not data:
                    break
                self.last_read = time.monotonic()
                decoder.feed(data)
                self._held_by_reader = True
                try:
                    for frame in decoder.frames():
                        if frames is not None and self._answered(frames, frame):
                            continue
                        cmd = decode_frame(frame)
                        try:
                            self.server.handler(self, cmd)
                        except Exception:
                            log.exception("%r: handler failed for code %d", self, cmd.code)
                finally:
                    self._held_by_reader = False
                    self._write_answers()
        except RemoteProtocolError as exc:
            reason = f"bad frame: {exc}"
            log.warning("%r: %s; closing this connection", self, reason)
        except TlsError as exc:
            reason = str(exc)
            log.info("%r: %s; closing this connection", self, reason)
        except OSError as exc:
            reason = f"socket error: {exc}"
        self.close()
        if decoder.pending and reason == "peer closed the connection":
            log.info("%r: peer closed with %d bytes of an unfinished frame", self, decoder.pending)
        self._notify_closed()

    def _answered(self, frames: FrameHandler, frame: bytes) -> bool:
        try:
            return frames(self, frame)
        except Exception:      # a bug in the shortcut: the general path still answers
            log.exception("%r: frame handler failed", self)
            return False

    def _take(self) -> bytes:
        with self._cond:
            data = b"".join(self._out)
            self._out.clear()
        return data

    def _write_answers(self) -> None:
        """The reader, after a read's requests: writes what is queued as far as the socket
        takes it now; the rest (or everything, with TLS or while the writer is writing) is
        left to the writer thread."""
        if self.server.tls is None and self._writing.acquire(blocking=False):
            try:
                data = self._take()
                try:
                    sent = self.sock.send(data, socket.MSG_DONTWAIT) if data else 0
                except (BlockingIOError, InterruptedError):
                    sent = 0
                except OSError:
                    self.close()
                    return
                if sent < len(data):
                    with self._cond:
                        self._out.appendleft(data[sent:])
            finally:
                self._writing.release()
        with self._cond:
            if self._out:
                self._cond.notify()

    def _write_loop(self) -> None:
        while True:
            with self._cond:
                while not self._out and not self.closed.is_set():
                    self._cond.wait()
                if not self._out:
                    break
            with self._writing:
                data = self._take()
                try:
                    if data:
                        self.stream.sendall(data)
                except OSError:
                    self.close()
                    with self._cond:
                        self._out.clear()
                    break
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self._notify_closed()

    def _notify_closed(self) -> None:
        with self._cond:
            if self._close_notified:
                return
            self._close_notified = True
        self.server._connection_closed(self)

    def join(self, timeout: float | None = None) -> None:
        for t in (self._reader, self._writer):
            if t.is_alive() and t is not threading.current_thread():
                t.join(timeout)


class RemotingServer:
    def __init__(self, name: str, host: str, handler: Handler,
                 on_close: Callable[[Connection], None] | None = None,
                 tls: ServerTls | None = None, frame_handler: FrameHandler | None = None) -> None:
        self.name = name
        self.host = host
        self.tls = tls if tls is not None and tls.mode is not Mode.DISABLED else None
        self.tls_context = self.tls.context() if self.tls is not None else None
        self.handler = handler
        self.frame_handler = frame_handler
        self.on_close = on_close
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._conns: dict[int, Connection] = {}
        self._lock = threading.Lock()
        self._stopping = False
        self._port: int | None = None

    @property
    def used(self) -> bool:
        """True once bound: a stopped server is not started again (make a new one)."""
        return self._port is not None

    @property
    def port(self) -> int:
        assert self._port is not None, "bind() first"
        return self._port

    def bind(self, port: int = 0, *, preferred: int | None = None) -> int:
        """Bind to ``port`` (0 = any free port), trying ``preferred`` first when given."""
        for candidate in ([preferred] if preferred else []) + [port]:
            sock = socket.socket(socket.AF_INET6 if ":" in self.host else socket.AF_INET)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((self.host, candidate))
            except OSError:
                sock.close()
                if candidate == port:
                    raise
                continue
            sock.listen(128)
            self._sock = sock
            self._port = sock.getsockname()[1]
            return self._port
        raise OSError(f"cannot bind {self.host}:{port}")

    def start(self) -> None:
        self._thread = threading.Thread(target=self._accept_loop, name=f"{self.name}-accept", daemon=True)
        self._thread.start()

    def connections(self) -> list[Connection]:
        with self._lock:
            return list(self._conns.values())

    def _accept_loop(self) -> None:
        assert self._sock is not None
        while True:
            try:
                sock, _addr = self._sock.accept()
            except OSError:
                if self._stopping:
                    return
                log.exception("%s: accept failed", self.name)
                time.sleep(0.1)
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                conn = Connection(sock, self)
            except OSError:  # the peer is already gone
                sock.close()
                continue
            with self._lock:
                if self._stopping:
                    sock.close()
                    return
                self._conns[conn.id] = conn
            conn.start()

    def _connection_closed(self, conn: Connection) -> None:
        with self._lock:
            if self._conns.pop(conn.id, None) is None:
                return
        if self.on_close is not None:
            try:
                self.on_close(conn)
            except Exception:
                log.exception("%s: close callback failed", self.name)

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            conns = list(self._conns.values())
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()
        if self._thread is not None:
            self._thread.join(5)
        for conn in conns:
            conn.close("server stopping")
        for conn in conns:
            conn.join(5)
