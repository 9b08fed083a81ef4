"""The Spark layer's way to the sidecar: one client per process and sidecar address.

Spark reuses Python workers between tasks, and the driver's stream reader lives as long as
its query, so a client (a gRPC channel) is kept per process. When the sidecar went away
(an auto-started one exits after an idle timeout, or was restarted), the next call
reconnects once, which in ``auto`` mode starts a new sidecar.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Callable, TypeVar

from rocketmq_spark.errors import BrokerError, as_acl_error
from rocketmq_spark.sidecar.errors import SidecarUnavailable
from rocketmq_spark.sidecar.model import Cluster
from rocketmq_spark.spark.options import SourceOptions

if TYPE_CHECKING:       # imported when a call is made: planning makes a reader, never calls
    from rocketmq_spark.sidecar.client import SidecarClient

T = TypeVar("T")

_clients: dict[tuple[int, str], "SidecarClient"] = {}
_mutex = threading.Lock()


def cluster_of(opts: SourceOptions) -> Cluster:
    return Cluster(opts.name_server, opts.access_key, opts.secret_key, opts.tls, opts.request_timeout_ms)


def client(sidecar: str) -> SidecarClient:
    key = (os.getpid(), sidecar)
    with _mutex:
        c = _clients.get(key)
    if c is None:
        from rocketmq_spark.sidecar.spawn import connect

        c = connect(sidecar)
        with _mutex:
            c = _clients.setdefault(key, c)
    return c


def forget(sidecar: str) -> None:
    with _mutex:
        _clients.pop((os.getpid(), sidecar), None)


def call(sidecar: str, fn: Callable[[SidecarClient], T]) -> T:
    """``fn(client)``, reconnecting once if the sidecar is unreachable. A broker's ACL
    refusal becomes an ``AclError`` naming the accessKey/secretKey options."""
    try:
        try:
            return fn(client(sidecar))
        except SidecarUnavailable:
            forget(sidecar)
            return fn(client(sidecar))
    except BrokerError as exc:
        converted = as_acl_error(exc)
        if converted is exc:
            raise
        raise converted from None


def with_timeout(c: T, seconds: float) -> T:
    """The same sidecar with another per-call timeout (a client over the same channel)."""
    from rocketmq_spark.sidecar.client import SidecarClient

    if isinstance(c, SidecarClient):
        return SidecarClient(c.address, timeout=seconds)  # type: ignore[return-value]
    return c
