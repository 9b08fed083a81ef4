"""Errors the sidecar adds to ``rocketmq_spark.errors``.

Every error crosses the gRPC boundary as a status code plus trailing metadata naming its
kind (``servicer.KIND_*``); ``client`` rebuilds the same class on the other side.
"""

from __future__ import annotations

from rocketmq_spark.errors import ConfigError, RocketMQError, TransportError


class DataLossError(RocketMQError):
    """Offsets a reader asked for are not stored: retention removed them (below the
    queue's min offset) or the queue lost/reset them (beyond its max offset)."""

    def __init__(self, message: str, *, beyond_max: bool = False) -> None:
        super().__init__(message)
        self.beyond_max = beyond_max


class SidecarError(RocketMQError):
    """The sidecar answered with an error that has no more specific class."""

    def __init__(self, message: str, *, status: str = "UNKNOWN") -> None:
        super().__init__(message)
        self.status = status


class SidecarUnavailable(TransportError):
    """No sidecar answers at the address (not started, exited, or unreachable)."""


class SidecarVersionMismatch(RocketMQError):
    """A sidecar of another rocketmq_spark version holds the per-host socket."""


class SidecarStartError(RocketMQError):
    """An auto-spawned sidecar did not come up."""


class UnsafeRuntimeDir(ConfigError):
    """The sidecar runtime directory or socket is accessible to other users."""
