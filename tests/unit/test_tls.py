"""TlsStream on real sockets: the handshake and its failures (each with the option to
fix it), one reader thread beside concurrent writers with large frames both ways, client
certificates, the permissive server's plain/TLS detection, and no key material in reprs."""

from __future__ import annotations

import hashlib
import os
import socket
import threading
from pathlib import Path
from typing import Callable

import pytest

from rocketmq_spark.errors import ConfigError
from rocketmq_spark.tls import (ClientAuth, Mode, ServerTls, TlsError, TlsSettings, TlsStream, Verify,
                                server_stream)
from tests.tls_certs import Certs, make_certs
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


def serve_once(tls: ServerTls, on_stream: Callable[[object], None]) -> tuple[int, list[BaseException]]:
    """A listener on 127.0.0.1 that runs ``server_stream`` on one accepted connection and
    hands the result to ``on_stream``; errors land in the returned list."""
    listener = socket.create_server(("127.0.0.1", 0))
    errors: list[BaseException] = []
    ctx = tls.context()

    def run() -> None:
        conn, _ = listener.accept()
        listener.close()
        try:
            on_stream(server_stream(conn, tls, ctx, 5.0, "client"))
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            errors.append(exc)
            conn.close()

    threading.Thread(target=run, daemon=True).start()
    return listener.getsockname()[1], errors


def connect(port: int, settings: TlsSettings, host: str = "127.0.0.1") -> TlsStream:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    stream = TlsStream(sock, settings.context(), server_side=False, server_hostname=host)
    try:
        stream.handshake(5.0, f"{host}:{port}")
    except BaseException:
        sock.close()
        raise
    return stream


def recv_exactly(stream, n: int) -> bytes:  # type: ignore[no-untyped-def]
    out = bytearray()
    while len(out) < n:
        chunk = stream.recv(min(n - len(out), 1 << 16))
        if not chunk:
            raise EOFError(f"stream ended after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def test_full_duplex_one_reader_and_several_writers(certs: Certs) -> None:
    """The transports' use: one reader thread, writers on other threads, frames of a few
    bytes to several MB crossing in both directions at once."""
    frames = [os.urandom(n) for n in (1, 17, 4096, 70_000, 3_000_000, 5)] * 2
    total = sum(len(f) for f in frames)
    echoed: list[str] = []

    def echo(stream) -> None:  # type: ignore[no-untyped-def]
        digest, seen = hashlib.sha256(), 0       # back as it comes: both directions at once
        while seen < total:
            chunk = stream.recv(1 << 16)
            if not chunk:
                break
            seen += len(chunk)
            digest.update(chunk)
            stream.sendall(chunk)
        echoed.append(digest.hexdigest())
        stream.close()

    port, errors = serve_once(ServerTls(certs.server, certs.server), echo)
    stream = connect(port, TlsSettings(ca_file=certs.ca))
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(recv_exactly(stream, total)))
    reader.start()
    lock = threading.Lock()
    order: list[bytes] = []

    def write(frame: bytes) -> None:
        with lock:                                # the transports' write lock: one frame whole
            order.append(frame)
            stream.sendall(frame)

    writers = [threading.Thread(target=write, args=(f,)) for f in frames]
    for w in writers:
        w.start()
    for w in writers:
        w.join(30)
    reader.join(30)
    assert not errors
    assert got and got[0] == b"".join(order)
    assert echoed == [hashlib.sha256(b"".join(order)).hexdigest()]
    assert stream.recv(10) == b""                 # the server closed
    stream.close()


@pytest.mark.parametrize("case, settings, host, message", [
    ("untrusted CA", lambda c: TlsSettings(ca_file=c.other_ca), "127.0.0.1",
     "not trusted .*set tlsTrustCertPath"),
    ("system CAs only", lambda c: TlsSettings(), "127.0.0.1", "not trusted .*set tlsTrustCertPath"),
])
def test_an_untrusted_server_is_refused_naming_the_option(certs, case, settings, host, message) -> None:
    port, _ = serve_once(ServerTls(certs.server, certs.server), lambda s: s.recv(1))
    with pytest.raises(TlsError, match=message):
        connect(port, settings(certs), host)


def test_host_names_are_checked_in_full_mode_only(certs: Certs) -> None:
    for verify, ok in ((Verify.FULL, False), (Verify.CA, True), (Verify.NONE, True)):
        port, _ = serve_once(ServerTls(certs.server_other_host, certs.server_other_host),
                             lambda s: s.sendall(b"ok"))
        settings = TlsSettings(ca_file=certs.ca, verify=verify)
        if ok:
            assert recv_exactly(connect(port, settings), 2) == b"ok"
        else:
            with pytest.raises(TlsError, match="names another .*set tlsVerify=ca"):
                connect(port, settings)


def test_verify_none_accepts_any_certificate(certs: Certs) -> None:
    port, _ = serve_once(ServerTls(certs.rogue_server, certs.rogue_server), lambda s: s.sendall(b"hi"))
    assert recv_exactly(connect(port, TlsSettings(verify=Verify.NONE)), 2) == b"hi"


def test_client_certificates_when_the_server_requires_them(certs: Certs) -> None:
    required = ServerTls(certs.server, certs.server, client_auth=ClientAuth.REQUIRE, client_ca_file=certs.ca)
    port, errors = serve_once(required, lambda s: s.sendall(b"welcome"))
    with_cert = TlsSettings(ca_file=certs.ca, cert_file=certs.client, key_file=certs.client)
    assert recv_exactly(connect(port, with_cert), 7) == b"welcome"
    assert not errors

    port, errors = serve_once(required, lambda s: s.sendall(b"welcome"))
    with pytest.raises((TlsError, OSError)):
        # TLS 1.3 finishes the client's side of the handshake before the server refuses:
        # the refusal shows on the first read
        stream = connect(port, TlsSettings(ca_file=certs.ca))
        recv_exactly(stream, 7)
    # the client can see the refusal before the server's thread has recorded it
    assert isinstance(wait_until(lambda: errors, 10, "the server's refusal")[0], TlsError)


def test_permissive_server_takes_plain_and_tls_clients(certs: Certs) -> None:
    tls = ServerTls(certs.server, certs.server, mode=Mode.PERMISSIVE)
    port, errors = serve_once(tls, lambda s: s.sendall(b"plain" if isinstance(s, socket.socket) else b"tls!!"))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as plain:
        plain.sendall(b"\x00\x00\x00\x10")          # a remoting frame starts with its length
        assert plain.recv(5) == b"plain"
    port, errors = serve_once(tls, lambda s: s.sendall(b"plain" if isinstance(s, socket.socket) else b"tls!!"))
    assert recv_exactly(connect(port, TlsSettings(ca_file=certs.ca)), 5) == b"tls!!"
    assert not errors


def test_enforcing_server_closes_a_plain_client(certs: Certs) -> None:
    port, errors = serve_once(ServerTls(certs.server, certs.server), lambda s: s.sendall(b"x"))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as plain:
        plain.sendall(b"\x00\x00\x00\x10" + b"\x00" * 16)
        data = plain.recv(100)
        assert not data.endswith(b"x")           # nothing but a TLS alert, then the close
    # the client can see the refusal before the server's thread has recorded it
    assert isinstance(wait_until(lambda: errors, 10, "the server's refusal")[0], TlsError)


def test_no_key_material_in_reprs_and_missing_files_name_the_option(certs: Certs, tmp_path: Path) -> None:
    s = TlsSettings(ca_file=certs.ca, cert_file=certs.client, key_file=certs.client, key_password="hunter22")
    assert "hunter22" not in repr(s)
    assert "hunter22" not in repr(ServerTls(certs.server, certs.server, key_password="hunter22"))
    with pytest.raises(ConfigError, match="option 'tlsTrustCertPath': no file at"):
        TlsSettings(ca_file=str(tmp_path / "missing.pem")).context()
    with pytest.raises(ConfigError, match="'tlsCertPath' and 'tlsKeyPath' must be set together"):
        TlsSettings(cert_file=certs.client)
    with pytest.raises(ConfigError, match="TLS client_auth needs client_ca_file"):
        ServerTls(certs.server, certs.server, client_auth="require")
    with pytest.raises(ConfigError, match="expected one of disabled, permissive, enforcing"):
        ServerTls(certs.server, certs.server, mode="strict")
