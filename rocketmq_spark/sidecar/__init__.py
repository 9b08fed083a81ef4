"""The per-host gRPC sidecar: broker connections, routes, queue locks, pulls as Arrow.

Spark code uses ``connect(sidecar)`` -> ``SidecarClient``; ``SOURCE_SCHEMA`` is the row
schema of pulled messages. The server side is ``server.serve`` (``rocketmq-spark sidecar``).

The names below are loaded when first used: a process that only needs the model or the
errors (Spark's planning process, which makes the reader only to send it to the tasks)
does not import gRPC, protobuf and the client for them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_WHERE = {
    "SOURCE_SCHEMA": "arrow",
    "SidecarClient": "client",
    "connect": "spawn",
    **dict.fromkeys(("DataLossError", "SidecarError", "SidecarStartError", "SidecarUnavailable",
                     "SidecarVersionMismatch", "UnsafeRuntimeDir"), "errors"),
    **dict.fromkeys(("Cluster", "HealthInfo", "Outgoing", "PullSpec", "SendBackItem"), "model"),
}

__all__ = ["SOURCE_SCHEMA", "Cluster", "DataLossError", "HealthInfo", "Outgoing", "PullSpec",
           "SendBackItem", "SidecarClient", "SidecarError", "SidecarStartError",
           "SidecarUnavailable", "SidecarVersionMismatch", "UnsafeRuntimeDir", "connect"]

if TYPE_CHECKING:
    from rocketmq_spark.sidecar.arrow import SOURCE_SCHEMA
    from rocketmq_spark.sidecar.client import SidecarClient
    from rocketmq_spark.sidecar.errors import (DataLossError, SidecarError, SidecarStartError,
                                               SidecarUnavailable, SidecarVersionMismatch,
                                               UnsafeRuntimeDir)
    from rocketmq_spark.sidecar.model import Cluster, HealthInfo, Outgoing, PullSpec, SendBackItem
    from rocketmq_spark.sidecar.spawn import connect


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{where}"), name)
    globals()[name] = value          # once: later lookups do not come here
    return value
