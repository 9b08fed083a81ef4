"""Where a sidecar listens and the gRPC options both ends use: shared by the server and its
clients, so a client imports no server code."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rocketmq_spark.errors import ConfigError

MAX_MESSAGE_BYTES = 64 << 20
GRPC_OPTIONS = (
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
)
UNIX_PATH_MAX = 107


@dataclass(frozen=True)
class Address:
    """Where a sidecar listens: ``target`` is what gRPC takes, ``path`` a Unix socket's file."""

    target: str
    path: Path | None = None

    def __str__(self) -> str:
        return self.target


def parse_address(text: str) -> Address:
    """``unix:PATH``, ``unix:///abs/path`` or ``host:port`` -> Address (paths made absolute)."""
    text = text.strip()
    if text.startswith("unix:"):
        raw = text[len("unix:"):]
        if raw.startswith("//"):
            raw = raw[2:]
        if not raw:
            raise ConfigError(f"sidecar address {text!r} names no socket path")
        path = Path(raw).expanduser().absolute()
        if len(os.fsencode(path)) > UNIX_PATH_MAX:
            raise ConfigError(f"sidecar socket path {str(path)!r} is longer than {UNIX_PATH_MAX} "
                              "bytes (a Unix socket limit); use a shorter directory")
        return Address(f"unix:{path}", path)
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"sidecar address {text!r} is neither unix:PATH nor HOST:PORT")
    return Address(text)
