"""The one place integration tests get a RocketMQ cluster from.

By default a session-wide embedded cluster (two brokers, port 0, temporary directory).
With ``ROCKETMQ_NAMESRV=host:port`` the same tests run against a cluster that is already
running — an embedded one started by hand or a real Apache RocketMQ cluster: every test
uses its own topic and group names, creates its topics with UPDATE_AND_CREATE_TOPIC on
every master, and assumes nothing else about what the cluster holds."""

from __future__ import annotations

import itertools
import json
import os
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from rocketmq_spark.client import ClientConfig, MQClient
from rocketmq_spark.remoting.route import MessageQueue

_RUN = uuid.uuid4().hex[:6]
_seq = itertools.count()


@dataclass
class ClusterHandle:
    namesrv_addr: str
    external: bool
    embedded: object | None = None          # the EmbeddedCluster when we started one
    _admin: MQClient | None = field(default=None, repr=False)

    @property
    def admin(self) -> MQClient:
        if self._admin is None:
            self._admin = MQClient(ClientConfig.parse(self.namesrv_addr, request_timeout=10.0))
        return self._admin

    @property
    def is_5x(self) -> bool:
        """Whether the cluster's brokers are RocketMQ 5.x, as the test run knows it (not as
        the client under test reads it): the embedded cluster answers as 4.9.8; a real
        cluster of scripts/apache-cluster says its version in $ROCKETMQ_APACHE_DIR/cluster.json;
        another external cluster is asked for its brokers' brokerVersionDesc."""
        if not self.external:
            return False
        started = os.environ.get("ROCKETMQ_APACHE_DIR")
        if started and (Path(started) / "cluster.json").is_file():
            return json.loads((Path(started) / "cluster.json").read_text())["version"].startswith("5.")
        descs = {self.admin.broker_runtime_info(a).get("brokerVersionDesc", "")
                 for a in self.admin.cluster_brokers().values()}
        return all(d.startswith("V5_") for d in descs)

    def unique(self, prefix: str) -> str:
        """A name no other test (or run, on a shared cluster) uses."""
        return f"{prefix}_{_RUN}_{next(_seq)}"

    def create_topic(self, prefix: str = "t", queues: int = 4) -> str:
        topic = self.unique(prefix)
        self.admin.create_topic(topic, queues=queues)
        self.wait_for_route(topic, queues)
        return topic

    def wait_for_route(self, topic: str, queues: int, timeout: float = 30.0) -> list[MessageQueue]:
        """Until the NameServer routes every queue of the topic on every master."""
        import time

        deadline = time.monotonic() + timeout
        want = queues * len(self.admin.cluster_brokers())
        while True:
            try:
                got = self.admin.subscribe_queues(topic, refresh=True)
                if len(got) >= want:
                    return got
            except Exception:  # noqa: BLE001 - not routed yet
                if time.monotonic() > deadline:
                    raise
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {topic} not routed with {want} queues in {timeout}s")
            time.sleep(0.05)

    def group_members(self, group: str, topic: str) -> set[str]:
        """Client ids of the group's consumers; empty while none has registered (brokers
        answer SYSTEM_ERROR "no consumer for this group" then, not an empty list)."""
        from rocketmq_spark.errors import BrokerError

        try:
            return set(self.admin.consumer_list(group, topic))
        except BrokerError as exc:
            if exc.code == 1 and "no consumer" in (exc.remark or ""):
                return set()
            raise

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()


@contextmanager
def open_cluster(data_dir: Path) -> Iterator[ClusterHandle]:
    addr = os.environ.get("ROCKETMQ_NAMESRV")
    if addr:
        cluster = ClusterHandle(addr, external=True)
        try:
            yield cluster
        finally:
            cluster.close()
        return
    from rocketmq_spark.embedded import EmbeddedCluster

    # check-backs every 5 s (Apache's default is 60 s), as the Apache test clusters do
    # (tests/apache/cluster.py): a Java transactional producer's UNKNOW is resolved in seconds
    with EmbeddedCluster(data_dir, brokers=2, namesrv_port=0, transaction_check_interval_ms=5000) as embedded:
        cluster = ClusterHandle(embedded.namesrv_addr, external=False, embedded=embedded)
        try:
            yield cluster
        finally:
            cluster.close()
