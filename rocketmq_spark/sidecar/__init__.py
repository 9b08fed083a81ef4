"""The per-host gRPC sidecar: broker connections, routes, queue locks, pulls as Arrow.

Spark code uses ``connect(sidecar)`` -> ``SidecarClient``; ``SOURCE_SCHEMA`` is the row
schema of pulled messages. The server side is ``server.serve`` (``rocketmq-spark sidecar``).
"""

from rocketmq_spark.sidecar.arrow import SOURCE_SCHEMA
from rocketmq_spark.sidecar.client import SidecarClient
from rocketmq_spark.sidecar.errors import (DataLossError, SidecarError, SidecarStartError,
                                           SidecarUnavailable, SidecarVersionMismatch,
                                           UnsafeRuntimeDir)
from rocketmq_spark.sidecar.model import Cluster, HealthInfo, Outgoing, PullSpec, SendBackItem
from rocketmq_spark.sidecar.spawn import connect

__all__ = ["SOURCE_SCHEMA", "Cluster", "DataLossError", "HealthInfo", "Outgoing", "PullSpec",
           "SendBackItem", "SidecarClient", "SidecarError", "SidecarStartError",
           "SidecarUnavailable", "SidecarVersionMismatch", "UnsafeRuntimeDir", "connect"]
