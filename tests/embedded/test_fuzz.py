"""Bad input loses nothing: random and mutated frames against a running broker.

Each example opens a connection, writes the bytes, half-closes, and reads until the
broker closes: the broker must answer with well-formed frames or close, within a few
seconds. A separate connection kept open throughout must keep getting correct answers,
and the messages stored before the fuzzing must still be there, byte for byte.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from dataclasses import replace
from typing import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rocketmq_spark.embedded import EmbeddedCluster
from rocketmq_spark.errors import LocalProtocolError, NeedMoreData
from rocketmq_spark.remoting import command
from rocketmq_spark.remoting.codes import RequestCode
from tests.embedded.wire import Wire, max_offset, messages, pull, req, send_msg
from tests.vectors import cpp_vectors

FRAMES = [bytes.fromhex(v["frame_hex"]) for _, v in sorted(cpp_vectors().items())]
KEPT = [f"kept-{i}".encode() + bytes(range(i, i + 40)) for i in range(8)]


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[EmbeddedCluster, Wire]]:
    with EmbeddedCluster(tmp_path_factory.mktemp("fuzz"), topics={"kept": 1}) as c:
        with Wire(c.broker_addrs["broker-a"]) as healthy:
            for body in KEPT:
                assert send_msg(healthy, "kept", body).code == 0
            yield c, healthy


def exchange(addr: str, data: bytes, timeout: float = 5.0) -> tuple[bytes, bool]:
    """Write ``data``, half-close, read until EOF; returns (bytes read, closed in time)."""
    host, _, port = addr.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:  # the broker may close before reading everything
            pass
        received = bytearray()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                return bytes(received), False
            except OSError:
                return bytes(received), True  # reset: closed
            if not chunk:
                return bytes(received), True
            received += chunk
        return bytes(received), False


def check_answers(data: bytes) -> None:
    """Everything the broker wrote back is whole frames: answers or its own requests."""
    pos = 0
    while pos < len(data):
        try:
            cmd, used = command.decode(data[pos:])
        except NeedMoreData:
            raise AssertionError(f"broker wrote a partial frame: {data[pos:pos + 64]!r}") from None
        assert cmd.is_response or cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED
        pos += used


def check_healthy(cluster: EmbeddedCluster, healthy: Wire) -> None:
    assert max_offset(healthy, "kept", 0) == len(KEPT)
    assert [m.body for m in messages(pull(healthy, "fuzz_reader", "kept", 0, 0))] == KEPT
    # Long polling still works (its thread survived whatever the fuzzer asked for).
    held = pull(healthy, "fuzz_reader", "kept", 0, len(KEPT), sys_flag=6, suspend_ms=20, timeout=3)
    assert (held.code, held.remark) == (19, "OFFSET_OVERFLOW_ONE")
    assert not healthy.closed


CODES = sorted({int(c) for c in RequestCode} | {0, 9999, -1, 65536})
EXT_VALUES = st.one_of(st.text(max_size=12), st.integers(-2 ** 63, 2 ** 63 - 1).map(str),
                       st.sampled_from(["", "-1", "0", "1", "true", "TBW102", "%RETRY%g", "kept", "*", "TagA || TagB"]))


def _well_formed(draw: st.DrawFn, frame: bytes) -> bytes:
    """A frame that decodes, with hostile content: another code, changed or dropped
    extFields, a random body. These reach the request handlers."""
    cmd, _ = command.decode(frame)
    ext = dict(cmd.ext)
    for key in draw(st.lists(st.sampled_from(sorted(ext) or ["x"]), max_size=3)):
        if draw(st.booleans()):
            ext[key] = draw(EXT_VALUES)
        else:
            ext.pop(key, None)
    body = cmd.body if draw(st.booleans()) else draw(st.binary(max_size=200))
    code = cmd.code if draw(st.booleans()) else draw(st.sampled_from(CODES))
    mutated = replace(cmd, code=code, ext_fields=ext, body=body, flag=draw(st.sampled_from([0, 0, 2, 1, 3])),
                      serialize_type=draw(st.sampled_from([0, 0, 1])))
    try:
        return command.encode(mutated)
    except LocalProtocolError:  # e.g. a code the binary header cannot hold
        return command.encode(replace(mutated, serialize_type=0))


def _mutate(draw: st.DrawFn) -> bytes:
    frame = draw(st.sampled_from(FRAMES))
    kind = draw(st.sampled_from(["random", "flip", "truncate", "length", "header_length", "insert", "after_valid",
                                 "well_formed", "well_formed", "well_formed"]))
    if kind == "well_formed":
        return _well_formed(draw, frame)
    if kind == "random":
        return draw(st.binary(max_size=300))
    if kind == "flip":
        out = bytearray(frame)
        for _ in range(draw(st.integers(1, 6))):
            i = draw(st.integers(0, len(out) - 1))
            out[i] = draw(st.integers(0, 255))
        return bytes(out)
    if kind == "truncate":
        return frame[:draw(st.integers(0, len(frame) - 1))]
    if kind == "length":
        return struct.pack(">I", draw(st.integers(0, 2 ** 32 - 1))) + frame[4:]
    if kind == "header_length":
        return frame[:4] + struct.pack(">I", draw(st.integers(0, 2 ** 32 - 1))) + frame[8:]
    if kind == "insert":
        i = draw(st.integers(8, len(frame)))
        junk = draw(st.binary(min_size=1, max_size=20))
        out = frame[:i] + junk + frame[i:]
        return struct.pack(">i", len(out) - 4) + out[4:]  # lengths still add up: only the header is bad
    return frame + draw(st.binary(max_size=64))


@st.composite
def hostile(draw: st.DrawFn) -> bytes:
    return _mutate(draw)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=hostile())
def test_random_and_mutated_frames(target: tuple[EmbeddedCluster, Wire], data: bytes) -> None:
    cluster, healthy = target
    received, closed = exchange(cluster.broker_addrs["broker-a"], data)
    assert closed, f"the broker neither answered nor closed for {data[:80]!r}"
    check_answers(received)
    check_healthy(cluster, healthy)


def json_frame(header: bytes, body: bytes = b"", stype: int = 0) -> bytes:
    return struct.pack(">iI", 4 + len(header) + len(body), (stype << 24) | len(header)) + header + body


HEADER = json.dumps({"code": 30, "extFields": {"topic": "kept", "queueId": "0"}, "flag": 0, "language": "JAVA",
                     "opaque": 5, "version": 409}).encode()


@pytest.mark.parametrize("name,data", [
    ("oversized length", struct.pack(">i", 16 * 1024 * 1024 + 1) + b"\x00" * 64),
    ("negative length", struct.pack(">i", -5) + b"\x00" * 8),
    ("header longer than frame", struct.pack(">iI", 8, 100) + b"abcd"),
    ("header is not json", json_frame(b"{not json")),
    ("header is a json list", json_frame(b"[1,2]")),
    ("code is not a number", json_frame(b'{"code":"x","opaque":1}')),
    ("unknown serialization type", json_frame(HEADER, stype=7)),
    ("truncated rocketmq header", json_frame(b"\x00\x1e\x00\x01", stype=1)),
    ("truncated frame", json_frame(HEADER)[:20]),
])
def test_bad_frames_close_only_that_connection(target: tuple[EmbeddedCluster, Wire], name: str, data: bytes) -> None:
    cluster, healthy = target
    addr = cluster.broker_addrs["broker-a"]
    with Wire(addr) as victim:
        victim.send_raw(data)
        if name == "truncated frame":
            victim.sock.shutdown(socket.SHUT_WR)
        assert victim.wait_closed(5), name
    check_healthy(cluster, healthy)


def test_valid_frames_before_a_bad_one_are_answered(target: tuple[EmbeddedCluster, Wire]) -> None:
    cluster, healthy = target
    received, closed = exchange(cluster.broker_addrs["broker-a"], json_frame(HEADER) + json_frame(b"{bad"))
    assert closed
    ans, _ = command.decode(received)
    assert ans.opaque == 5 and ans.ext == {"offset": str(len(KEPT))}
    check_healthy(cluster, healthy)


def test_fresh_connections_still_work(target: tuple[EmbeddedCluster, Wire]) -> None:
    cluster, healthy = target
    with Wire(cluster.broker_addrs["broker-a"]) as w:
        assert w.request(req(RequestCode.GET_MAX_OFFSET, {"topic": "kept", "queueId": 0})).ext == {"offset": str(len(KEPT))}
    with Wire(cluster.namesrv_addr) as ns:
        assert ns.request(req(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "kept"})).code == 0
