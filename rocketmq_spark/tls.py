"""TLS on the remoting port: client settings, server settings, and a TLS stream over a socket.

How this works. Apache RocketMQ serves TLS on the same port as plain remoting: with
``tlsMode=enforcing`` only TLS, with ``permissive`` both (a server tells a TLS client by
its first byte, 0x16, the start of a handshake record). ``TlsStream`` runs the TLS session
over a connected socket with an ``ssl.SSLObject`` and two memory buffers, so the session
itself does no I/O: encrypted bytes move between the socket and the buffers outside it.
That makes the stream safe for the way both our client and the embedded server use a
socket, one reader thread and writers on other threads: an ``SSLSocket`` is not (OpenSSL
forbids using one SSL object from two threads at once). Bytes the session produces are
taken out of the outgoing buffer and written to the socket under one lock, so TLS records
reach the wire in the order they were made.

Key material never appears in a ``repr``, a log or an error: only paths are named.
"""

from __future__ import annotations

import enum
import os
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field

from rocketmq_spark.errors import ConfigError, TransportError

HANDSHAKE_RECORD = 0x16      # first byte a TLS client sends
_CHUNK = 256 * 1024


class TlsError(TransportError):
    """The TLS handshake failed (certificate not trusted, wrong host, no client
    certificate, ...); retrying the same call does not help."""

    retriable = False


class Verify(str, enum.Enum):
    """How a client checks the server's certificate."""

    FULL = "full"    # chain up to a trusted CA, and the host name or IP address it was reached at
    CA = "ca"        # chain only (brokers are reached at the IPs their routes publish)
    NONE = "none"    # nothing: for tests and throw-away clusters only


class ClientAuth(str, enum.Enum):
    """Whether a server asks clients for a certificate (Apache's tls.server.need.client.auth)."""

    NONE = "none"
    OPTIONAL = "optional"
    REQUIRE = "require"


class Mode(str, enum.Enum):
    """What a server accepts on its port (Apache's tlsMode)."""

    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


def _readable(option: str, path: str | None) -> str | None:
    if path is None:
        return None
    if not os.path.isfile(path):
        raise ConfigError(f"option {option!r}: no file at {path!r}")
    return path


@dataclass(frozen=True)
class TlsSettings:
    """A client's TLS settings (every connection, NameServers and brokers alike, uses them,
    as Apache's clients do with ``tls.enable``)."""

    ca_file: str | None = None            # trusted CAs (PEM); None: the system's
    cert_file: str | None = None          # client certificate (PEM), for servers that ask
    key_file: str | None = None           # its private key (PEM)
    key_password: str | None = field(default=None, repr=False)
    verify: Verify = Verify.FULL

    def __post_init__(self) -> None:
        if not isinstance(self.verify, Verify):
            object.__setattr__(self, "verify", Verify(self.verify))
        if bool(self.cert_file) != bool(self.key_file):
            raise ConfigError("options 'tlsCertPath' and 'tlsKeyPath' must be set together")

    def context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.verify is Verify.NONE:
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        else:
            ctx.check_hostname = self.verify is Verify.FULL
            ctx.verify_mode = ssl.CERT_REQUIRED
            try:
                if self.ca_file:
                    ctx.load_verify_locations(cafile=_readable("tlsTrustCertPath", self.ca_file))
                else:
                    ctx.load_default_certs()
            except ssl.SSLError as exc:
                raise ConfigError(f"option 'tlsTrustCertPath': {self.ca_file!r} holds no "
                                  f"usable CA certificate ({exc.reason})") from None
        if self.cert_file:
            _load_chain(ctx, self.cert_file, self.key_file, self.key_password,
                        ("tlsCertPath", "tlsKeyPath"))
        return ctx


@dataclass(frozen=True)
class ServerTls:
    """A server's TLS settings: its certificate and key, what its port accepts, and
    whether (and against which CAs) it checks client certificates."""

    cert_file: str
    key_file: str
    key_password: str | None = field(default=None, repr=False)
    mode: Mode = Mode.ENFORCING
    client_auth: ClientAuth = ClientAuth.NONE
    client_ca_file: str | None = None

    def __post_init__(self) -> None:
        for name in ("mode", "client_auth"):
            kind = {"mode": Mode, "client_auth": ClientAuth}[name]
            value = getattr(self, name)
            if not isinstance(value, kind):
                try:
                    object.__setattr__(self, name, kind(value))
                except ValueError:
                    allowed = ", ".join(m.value for m in kind)
                    raise ConfigError(f"TLS {name} {value!r}: expected one of {allowed}") from None
        if self.client_auth is not ClientAuth.NONE and not self.client_ca_file:
            raise ConfigError("TLS client_auth needs client_ca_file: the CAs client certificates must chain to")

    def context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        _load_chain(ctx, self.cert_file, self.key_file, self.key_password, ("cert_file", "key_file"))
        if self.client_auth is not ClientAuth.NONE:
            ctx.load_verify_locations(cafile=_readable("client_ca_file", self.client_ca_file))
            ctx.verify_mode = (ssl.CERT_REQUIRED if self.client_auth is ClientAuth.REQUIRE
                               else ssl.CERT_OPTIONAL)
        return ctx


def _load_chain(ctx: ssl.SSLContext, cert: str, key: str | None, password: str | None,
                names: tuple[str, str]) -> None:
    _readable(names[0], cert)
    _readable(names[1], key)
    try:
        ctx.load_cert_chain(cert, key, password=password)
    except ssl.SSLError as exc:
        raise ConfigError(f"options {names[0]!r}/{names[1]!r}: cannot load the certificate "
                          f"{cert!r} with its key ({exc.reason})") from None


class TlsStream:
    """A TLS session over a connected socket, with the socket calls the transports use:
    ``recv``, ``sendall``, ``settimeout``, ``shutdown``, ``close``. One thread may read
    while others write."""

    def __init__(self, sock: socket.socket, context: ssl.SSLContext, *, server_side: bool,
                 server_hostname: str | None = None) -> None:
        self.sock = sock
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._in, self._out, server_side=server_side,
                                     server_hostname=None if server_side else server_hostname)
        self._state = threading.Lock()     # the SSL object and the two buffers
        self._wire = threading.Lock()      # taking bytes out of _out and writing them

    # ------------------------------------------------------------ handshake

    def handshake(self, timeout: float, peer: str) -> None:
        """Run the handshake within ``timeout`` seconds; TlsError naming ``peer`` if it fails."""
        deadline = time.monotonic() + timeout
        old = self.sock.gettimeout()
        try:
            while True:
                try:
                    with self._state:
                        self._tls.do_handshake()
                    self._flush()
                    return
                except ssl.SSLWantReadError:
                    self._flush()
                    self.sock.settimeout(max(deadline - time.monotonic(), 0.001))
                    data = self.sock.recv(_CHUNK)
                    if not data:
                        raise TlsError(f"TLS handshake with {peer}: the peer closed the "
                                       f"connection (does it serve TLS? is a client "
                                       f"certificate required?)") from None
                    with self._state:
                        self._in.write(data)
        except ssl.SSLCertVerificationError as exc:
            raise TlsError(_verify_message(peer, exc)) from None
        except ssl.SSLError as exc:
            self._flush_quietly()
            raise TlsError(f"TLS handshake with {peer} failed: {exc.reason or exc}") from None
        except TimeoutError:
            raise TlsError(f"TLS handshake with {peer} timed out after {timeout:g} s "
                           f"(does it serve TLS on this port?)") from None
        except OSError as exc:
            raise TlsError(f"TLS handshake with {peer} failed: {exc}") from None
        finally:
            try:
                self.sock.settimeout(old)
            except OSError:
                pass

    # ------------------------------------------------------------ data

    def recv(self, n: int) -> bytes:
        """Up to ``n`` decrypted bytes; b"" at the end of the stream. Socket timeouts and
        errors pass through; a bad record raises OSError (ssl.SSLError)."""
        while True:
            with self._state:
                try:
                    data = self._tls.read(n)
                except ssl.SSLWantReadError:
                    data = None
                except ssl.SSLZeroReturnError:
                    return b""
                produced = self._out.pending
            if produced:          # the session answered something (a key update)
                self._flush()
            if data:
                return data
            raw = self.sock.recv(_CHUNK)
            if not raw:
                return b""
            with self._state:
                self._in.write(raw)

    def sendall(self, data: bytes | bytearray | memoryview) -> None:
        with self._wire:
            with self._state:
                view = memoryview(data)
                while view:
                    written = self._tls.write(view[:_CHUNK])
                    view = view[written:]
                out = self._out.read()
            self.sock.sendall(out)

    def _flush(self) -> None:
        with self._wire:
            with self._state:
                out = self._out.read()
            if out:
                self.sock.sendall(out)

    def _flush_quietly(self) -> None:
        try:
            self._flush()       # an alert telling the peer why
        except OSError:
            pass

    # ------------------------------------------------------------ the socket's own calls

    def settimeout(self, value: float | None) -> None:
        self.sock.settimeout(value)

    def gettimeout(self) -> float | None:
        return self.sock.gettimeout()

    def setsockopt(self, *args: int) -> None:
        self.sock.setsockopt(*args)

    def getpeername(self):  # type: ignore[no-untyped-def]
        return self.sock.getpeername()

    def shutdown(self, how: int) -> None:
        self.sock.shutdown(how)

    def close(self) -> None:
        self.sock.close()


def _verify_message(peer: str, exc: ssl.SSLCertVerificationError) -> str:
    text = exc.verify_message or str(exc)
    other = ("set tlsVerify=ca (CLI: --tls-verify ca) to check only that it chains to a trusted "
             "CA (brokers are reached at the IP their route publishes)")
    hint = {
        62: f"its certificate names another host or IP address; {other}",
        64: f"its certificate names another IP address; {other}",
    }.get(exc.verify_code, "set tlsTrustCertPath (CLI: --tls-ca) to the CA that signed the "
                           "cluster's certificates")
    return f"TLS: the certificate of {peer} is not trusted ({text}): {hint}"


def server_stream(sock: socket.socket, tls: ServerTls, context: ssl.SSLContext,
                  timeout: float, peer: str) -> "TlsStream | socket.socket":
    """What an accepting server reads and writes: a TLS stream after its handshake, or the
    plain socket (``permissive`` mode, a client whose first byte is not a TLS handshake)."""
    if tls.mode is Mode.PERMISSIVE:
        old = sock.gettimeout()
        sock.settimeout(timeout)
        try:
            first = sock.recv(1, socket.MSG_PEEK)
        except TimeoutError:
            raise TlsError(f"{peer} sent nothing within {timeout:g} s") from None
        finally:
            sock.settimeout(old)
        if not first or first[0] != HANDSHAKE_RECORD:
            return sock
    stream = TlsStream(sock, context, server_side=True)
    stream.handshake(timeout, peer)
    return stream
