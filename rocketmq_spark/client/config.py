"""Client configuration (frozen)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from rocketmq_spark.tls import TlsSettings


def default_client_id() -> str:
    try:
        ip = socket.gethostbyname(socket.gethostname())
    except OSError:
        ip = "127.0.0.1"
    return f"{ip}@{os.getpid()}#rocketmq_spark"


def split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"address {address!r} is not host:port")
    return host.strip("[]"), int(port)


@dataclass(frozen=True)
class ClientConfig:
    name_servers: tuple[str, ...]               # "host:port", tried in turn (failover)
    access_key: str | None = None               # ACL: sign every request when set
    secret_key: str | None = field(default=None, repr=False)
    client_id: str = field(default_factory=default_client_id)
    request_timeout: float = 3.0                # seconds, for every call but long polls
    route_ttl: float = 30.0                     # seconds a cached route is trusted
    tls: TlsSettings | None = None              # every connection over TLS when set

    @classmethod
    def parse(cls, name_server: str, **kwargs: object) -> "ClientConfig":
        """``"h1:9876;h2:9876"`` (``;`` or ``,``) -> ClientConfig."""
        addrs = tuple(a.strip() for a in name_server.replace(",", ";").split(";") if a.strip())
        if not addrs:
            raise ValueError("nameServer is empty")
        for address in addrs:        # checked here, not at the first request's connect
            split_address(address)
        return cls(name_servers=addrs, **kwargs)  # type: ignore[arg-type]
