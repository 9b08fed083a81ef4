"""A connection of its own for one reader: pipelined pulls answered in the caller's thread.

How it works. The shared ``Transport`` multiplexes every call over one connection per
broker, with a reader thread handing answers to waiting threads through futures; for a
range read that hand-over costs more CPU than the pull itself. A ``DirectPuller`` holds a
connection of its own to one broker and no thread: ``pull_async`` writes the request at
once; ``result()`` reads frames from the socket, in the calling thread, until the one with
its opaque arrives, keeping any that came first (a broker may answer pulls out of order).
Requests are signed (ACL) and the connection speaks TLS exactly as the shared transport's.
One thread uses a puller at a time. A puller whose every request was answered gives its
connection back to the client's pool when closed; otherwise the connection is closed.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import struct
import time
from dataclasses import replace
from typing import Callable

from rocketmq_spark.client import pull as pull_codec
from rocketmq_spark.client.transport import open_socket
from rocketmq_spark.errors import RemoteProtocolError, RequestTimeout, TransportError
from rocketmq_spark.remoting.codes import SERIALIZE_JSON
from rocketmq_spark.remoting.command import MAX_FRAME, RemotingCommand, decode_frame, encode
from rocketmq_spark.remoting.message import decode_messages
from rocketmq_spark.remoting.route import MessageQueue
from rocketmq_spark.structs import PullResult, PullStatus, WalkedBodies
from rocketmq_spark.tls import TlsStream

try:     # a range's plain pulls in one call (_fastpull.c), built by pip install; pull_async is the reference
    from rocketmq_spark.client import _fastpull as _compiled
except ImportError:  # pragma: no cover - a build without a C compiler
    _compiled = None
if os.environ.get("ROCKETMQ_SPARK_PURE_PYTHON") == "1":
    _compiled = None

_LEN = struct.Struct(">i")
_FRAME_HEAD = struct.Struct(">iI")
_CHUNK = 256 * 1024
_OFFSET_MARK, _OPAQUE_MARK = 7_346_519_028_531, 1_939_283_746      # never real values
FAST_RUN_BYTES = 4 << 20        # bodies a compiled run of pulls collects before it returns them
_FAST_STATUS = {0: PullStatus.FOUND, 19: PullStatus.NO_NEW_MSG, 20: PullStatus.NO_MATCHED_MSG,
                21: PullStatus.OFFSET_ILLEGAL}


def _template(cmd: RemotingCommand) -> tuple[bytes, bytes, bytes]:
    """A pull request's JSON header cut around its offset and its opaque: the parts between
    which each pull's numbers go (the codec's own encoding, made once)."""
    header = encode(replace(cmd, opaque=_OPAQUE_MARK))[8:]
    first, rest = header.split(b'"%d"' % _OFFSET_MARK)
    middle, last = rest.split(b"%d" % _OPAQUE_MARK)
    return first + b'"', b'"' + middle, last


def _fast_result(frame: bytes) -> tuple[int, PullResult | None]:
    """(opaque, the PullResult) of a JSON pull answer with a pull status, read with one
    json.loads; (opaque or -1, None) for anything else (the codec's full path reads it)."""
    (word,) = struct.unpack_from(">I", frame, 0)
    if word >> 24 != SERIALIZE_JSON:
        return -1, None
    hlen = word & 0xFFFFFF
    try:
        obj = json.loads(frame[4:4 + hlen])
        status = _FAST_STATUS.get(obj["code"])
        opaque = int(obj["opaque"])
        if status is None or not int(obj.get("flag", 0)) & 1:
            return opaque, None
        ext = obj["extFields"]
        body = frame[4 + hlen:] if status is PullStatus.FOUND else b""
        return opaque, PullResult(status=status, next_begin_offset=int(ext["nextBeginOffset"]),
                                  min_offset=int(ext["minOffset"]), max_offset=int(ext["maxOffset"]),
                                  suggest_which_broker_id=int(ext.get("suggestWhichBrokerId", 0)),
                                  raw_body=bytes(body))
    except (ValueError, KeyError, TypeError):
        return -1, None


class DirectConnection:
    """One socket (TLS optional) with whole-frame reads and writes; no thread."""

    def __init__(self, address: str, *, timeout: float, tls: ssl.SSLContext | None = None) -> None:
        self.address = address
        self.sock: socket.socket | TlsStream = open_socket(address, timeout=timeout, tls=tls)
        self._buf = bytearray()
        self.broken = False
        self.idle_since = time.monotonic()

    def alive(self, max_idle: float) -> bool:
        """Worth reusing: idle less than ``max_idle`` s and not closed by the peer (brokers
        close connections idle for 120 s; a peek without blocking tells)."""
        if self.broken or time.monotonic() - self.idle_since > max_idle:
            return False
        raw = self.sock.sock if isinstance(self.sock, TlsStream) else self.sock
        try:
            raw.setblocking(False)
            try:
                raw.recv(1, socket.MSG_PEEK)
            finally:
                raw.setblocking(True)
        except BlockingIOError:
            return True                    # nothing to read: open, as expected
        except OSError:
            return False
        return False                       # closed (b"") or bytes nobody asked for

    def send(self, frame: bytes, timeout: float) -> None:
        try:
            self.sock.settimeout(timeout)
            self.sock.sendall(frame)
        except OSError as exc:
            self.broken = True
            raise TransportError(f"sending to {self.address} failed: {exc}") from None

    def read_frame(self, deadline: float) -> bytes:
        """The next whole frame, without its length prefix; RequestTimeout at ``deadline``."""
        while True:
            if len(self._buf) >= 4:
                (length,) = _LEN.unpack_from(self._buf, 0)
                if length < 4 or length + 4 > MAX_FRAME:
                    self.broken = True
                    raise TransportError(f"bad frame from {self.address}: length {length}")
                if len(self._buf) >= length + 4:
                    frame = bytes(self._buf[4:4 + length])
                    del self._buf[:4 + length]
                    return frame
            left = deadline - time.monotonic()
            if left <= 0:
                self.broken = True          # an answer may still come: the stream is out of step
                raise RequestTimeout(f"no answer from {self.address} in time")
            try:
                self.sock.settimeout(left)
                data = self.sock.recv(_CHUNK)
            except TimeoutError:
                continue
            except OSError as exc:
                self.broken = True
                raise TransportError(f"connection to {self.address} broken: {exc}") from None
            if not data:
                self.broken = True
                raise TransportError(f"connection to {self.address} closed by the peer")
            self._buf += data

    def close(self) -> None:
        self.broken = True
        try:
            self.sock.close()
        except OSError:
            pass


class DirectPuller:
    """Pulls of one broker's queues over a connection of their own (see the module text)."""

    def __init__(self, conn: DirectConnection, *, request_timeout: float,
                 sign: Callable[[RemotingCommand], RemotingCommand] | None,
                 give_back: Callable[[DirectConnection], None], replica: bool = False) -> None:
        self.conn = conn
        self.address = conn.address
        self.replica = replica            # reading from a slave (the master is away)
        self.request_timeout = request_timeout
        self._sign = sign
        self._give_back = give_back
        self._opaque = 0
        self._answers: dict[int, RemotingCommand | PullResult] = {}
        self._outstanding: set[int] = set()
        self._forgotten: set[int] = set()
        self._templates: dict[tuple[str, int, str, str, int, str], tuple[bytes, bytes, bytes]] = {}

    def __enter__(self) -> "DirectPuller":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def pull_async(self, queue: MessageQueue, offset: int, *, group: str, max_nums: int = 32,
                   expression: str = "*", commit_offset: int | None = None, suspend_ms: int = 0,
                   timeout: float | None = None, decode: bool = True,
                   expression_type: str = "TAG") -> "DirectPending":
        self._opaque = opaque = (self._opaque % 0x7FFFFFFE) + 1
        if timeout is None:
            timeout = pull_codec.pull_timeout(suspend_ms, self.request_timeout)
        if self._sign is None and commit_offset is None and suspend_ms == 0:
            key = (queue.topic, queue.queue_id, group, expression, max_nums, expression_type)
            parts = self._templates.get(key)
            if parts is None:
                parts = self._templates[key] = _template(pull_codec.pull_request(
                    queue, _OFFSET_MARK, group=group, max_nums=max_nums, expression=expression,
                    expression_type=expression_type))
            if offset < 0:
                raise ValueError(f"pull offset must be >= 0, got {offset}")
            header = b"%b%d%b%d%b" % (parts[0], offset, parts[1], opaque, parts[2])
            frame = _FRAME_HEAD.pack(4 + len(header), (SERIALIZE_JSON << 24) | len(header)) + header
        else:                              # signed, or a committing or held pull: the codec's path
            cmd = pull_codec.pull_request(queue, offset, group=group, max_nums=max_nums,
                                          expression=expression, commit_offset=commit_offset,
                                          suspend_ms=suspend_ms, allow_commit=True,
                                          expression_type=expression_type)
            cmd = replace(cmd, opaque=opaque)
            if self._sign is not None:
                cmd = self._sign(cmd)
            frame = encode(cmd)
        self.conn.send(frame, timeout)
        self._outstanding.add(opaque)
        return DirectPending(self, opaque, expression, decode, time.monotonic() + timeout, expression_type)

    def pull(self, queue: MessageQueue, offset: int, **kw: object) -> PullResult:
        return self.pull_async(queue, offset, **kw).result()  # type: ignore[arg-type]

    def fast_range(self, queue: MessageQueue, offset: int, end: int, *, group: str, expression: str,
                   max_nums: int, stride: int, depth: int, max_rows: int,
                   max_bytes: int = FAST_RUN_BYTES,
                   expression_type: str = "TAG") -> tuple[list[bytes | WalkedBodies], int] | None:
        """Plain pulls from ``offset`` (``max_nums`` asked, ``stride`` expected, each whole below
        ``end``), ``depth`` in flight, about ``max_rows`` messages or ``max_bytes`` of bodies
        (then the pulls in flight), in one compiled call without the GIL
        (_fastpull.c): (the FOUND bodies that ended where expected, in order, as the
        bytes the run read them into with where their records start (``WalkedBodies``;
        the bodies joined as bare bytes when a size did not fit, for the decoder to
        report); the offset to go on from with ``pull_async``,
        which handles everything else). None when the call cannot be made here: not built, a
        signed (ACL) or TLS connection, pulls of this puller still due, or not one whole
        pull left."""
        conn = self.conn
        if (_compiled is None or self._sign is not None or isinstance(conn.sock, TlsStream)
                or self._outstanding or conn._buf or conn.broken or end - offset < stride):
            return None
        key = (queue.topic, queue.queue_id, group, expression, max_nums, expression_type)
        parts = self._templates.get(key)
        if parts is None:
            parts = self._templates[key] = _template(pull_codec.pull_request(
                queue, _OFFSET_MARK, group=group, max_nums=max_nums, expression=expression,
                expression_type=expression_type))
        timeout_ms = max(1, int(pull_codec.pull_timeout(0, self.request_timeout) * 1000))
        try:
            data, resume, self._opaque, rest, starts = _compiled.run(
                conn.sock.fileno(), *parts, offset, end, stride, depth, max_rows, max_bytes, timeout_ms,
                self._opaque)
        except TimeoutError:
            conn.close()
            raise RequestTimeout(f"no pull answer from {conn.address} in time") from None
        except (OSError, ValueError) as exc:
            conn.close()
            raise TransportError(f"pulls from {conn.address} failed: {exc}") from None
        conn._buf += rest
        if not data:
            return [], resume
        return [data if starts is None else WalkedBodies(data, starts)], resume

    def _answer(self, opaque: int, deadline: float) -> RemotingCommand | PullResult:
        while opaque not in self._answers:
            frame = self.conn.read_frame(deadline)
            got, answer = _fast_result(frame)
            if answer is None:
                try:
                    cmd = decode_frame(frame)
                except RemoteProtocolError as exc:
                    self.conn.close()
                    raise TransportError(f"bad frame from {self.conn.address}: {exc}") from None
                if not cmd.is_response:
                    continue
                got, answer = cmd.opaque, cmd
            if got in self._forgotten:                 # a cancelled pull's answer
                self._forgotten.discard(got)
                self._outstanding.discard(got)
                continue
            self._answers[got] = answer
        self._outstanding.discard(opaque)
        return self._answers.pop(opaque)

    def _forget(self, opaque: int) -> None:
        if self._answers.pop(opaque, None) is not None:
            self._outstanding.discard(opaque)
        elif opaque in self._outstanding:
            self._forgotten.add(opaque)               # read and dropped when it comes

    def close(self) -> None:
        if self._outstanding or self.conn.broken:
            self.conn.close()
        else:
            self.conn.idle_since = time.monotonic()
            self._give_back(self.conn)


class DirectPending:
    def __init__(self, puller: DirectPuller, opaque: int, expression: str, decode: bool,
                 deadline: float, expression_type: str = "TAG") -> None:
        self._puller, self._opaque = puller, opaque
        self._expression, self._decode, self._deadline = expression, decode, deadline
        self._expression_type = expression_type

    def result(self) -> PullResult:
        answer = self._puller._answer(self._opaque, self._deadline)
        if isinstance(answer, PullResult):
            if not self._decode:
                return answer
            messages = pull_codec.filter_tags(decode_messages(answer.raw_body),
                                              pull_codec.client_tags(self._expression, self._expression_type)
                                              ) if answer.raw_body else ()
            return replace(answer, messages=messages, raw_body=b"")
        return pull_codec.pull_result(answer, expression=self._expression,
                                      address=self._puller.conn.address, decode=self._decode,
                                      expression_type=self._expression_type)

    def cancel(self) -> None:
        self._puller._forget(self._opaque)
