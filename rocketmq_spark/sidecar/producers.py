"""Producer groups kept registered with every master, so brokers can check back half messages.

A broker sends CHECK_TRANSACTION_STATE to a connection of the half message's producer group:
one that sent HEART_BEAT with that group in its producer data within the last 120 s. The
keeper heartbeats each registered group to every master of its cluster when it is first
registered and every ``interval`` seconds after, for the life of the process.
"""

from __future__ import annotations

import logging
import threading
from typing import Callable

from rocketmq_spark.client import MQClient
from rocketmq_spark.errors import RocketMQError
from rocketmq_spark.sidecar.model import Cluster

log = logging.getLogger(__name__)

HEARTBEAT_INTERVAL = 20.0


class ProducerKeeper:
    def __init__(self, client_for: Callable[[Cluster], MQClient], *,
                 interval: float = HEARTBEAT_INTERVAL) -> None:
        self._client_for = client_for
        self._interval = interval
        self._groups: dict[Cluster, set[str]] = {}
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def register(self, cluster: Cluster, group: str) -> None:
        """Keep ``group`` registered; the first registration heartbeats at once."""
        with self._mutex:
            groups = self._groups.setdefault(cluster, set())
            if group in groups:
                return
            groups.add(group)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="producer-heartbeats", daemon=True)
                self._thread.start()
        self._beat(cluster)

    def registered(self, cluster: Cluster) -> frozenset[str]:
        with self._mutex:
            return frozenset(self._groups.get(cluster, ()))

    def _beat(self, cluster: Cluster) -> None:
        groups = sorted(self.registered(cluster))
        if not groups:
            return
        client = self._client_for(cluster)
        try:
            masters = sorted(set(client.cluster_brokers().values()))
            client.heartbeat(producer_groups=groups, addresses=masters)
        except RocketMQError as exc:
            log.warning("heartbeat of producer groups %s failed: %s", ", ".join(groups), exc)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            with self._mutex:
                clusters = list(self._groups)
            for cluster in clusters:
                self._beat(cluster)

    def close(self) -> None:
        self._stop.set()
